"""input.shard_bytes: a source's shards by size, not count. The files, in order, are grouped into shards of
at most that many bytes, so a source 4x larger makes 4x the shards of the same size (and the same memory per
job); a file larger than that is a shard alone; with shards, or on a builtin source, it is an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from runlib.errors import SpecError
from runlib.graph.build import build_graph
from tests.curate import jsonl_source, make_spec


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RUNLIB_WORK_DIR", str(tmp_path / "work"))


def write_files(folder: str, sizes: list[int]) -> None:
    Path(folder).mkdir()
    for i, size in enumerate(sizes):
        with open(f"{folder}/{i:03d}.jsonl", "wb") as f:
            f.truncate(size)


def shard_files(folder: str, **input_patch) -> list[list[str]]:
    source = jsonl_source(f"{folder}/*.jsonl", dedup={"minhash": {}})
    source["input"].update(input_patch)
    graph = build_graph(make_spec({"web": source}))
    return [
        [Path(f.path).name for f in n.config.files] for n in graph.of("curate_shard") if n.params["source"] == "web"
    ]


def test_files_are_grouped_in_order_up_to_the_size():
    write_files("one", [300, 300, 300, 900, 100, 100])
    assert shard_files("one", shard_bytes=600) == [
        ["000.jsonl", "001.jsonl"],
        ["002.jsonl"],
        ["003.jsonl"],
        ["004.jsonl", "005.jsonl"],
    ]
    assert shard_files("one") == [[f"00{i}.jsonl"] for i in range(6)]  # the default: a shard per file


def test_a_source_4x_larger_has_4x_the_shards_of_the_same_size():
    write_files("small", [250] * 8)
    write_files("large", [250] * 32)
    small, large = shard_files("small", shard_bytes="1K"), shard_files("large", shard_bytes="1K")
    assert len(large) == 4 * len(small) == 8 and {len(s) for s in small + large} == {4}
    # and a slice of the dedup per shard: the partitions grow with the shards
    source = jsonl_source("large/*.jsonl", dedup={"minhash": {}})
    source["input"]["shard_bytes"] = "1K"
    assert (
        len([n for n in build_graph(make_spec({"web": source})).of("dedup_partition") if n.params["source"] == "web"])
        == 8
    )


@pytest.mark.parametrize(
    ("input_patch", "message"),
    [
        ({"shards": 2, "shard_bytes": 100}, "give one of shards and shard_bytes"),
        ({"format": "builtin", "name": "arithmetic", "path": None, "shard_bytes": 100}, "builtin source has none"),
    ],
)
def test_shard_bytes_with_shards_or_on_a_builtin_source_is_an_error(input_patch, message):
    write_files("d", [10])
    source = jsonl_source("d/*.jsonl")
    source["input"].update(input_patch)
    with pytest.raises(SpecError, match=message):
        make_spec({"web": source})
