"""filter_shard, a job per curate shard: each writes its shard's documents as the join decided, the shards
together are the source, its dropped sample is the source's first of each reason in input order, and tables
that do not match their shard are named, not trusted."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from runlib.curate.config import FilterShardConfig
from runlib.curate.files import save_npy
from runlib.curate.filter_shard import filter_shard
from runlib.curate.joined import fate_codes
from runlib.curate.source import FATE_DTYPE, FATES_FILE
from tests.curate import PROSE, jsonl_source, make_spec, read_lines, run_source, write_jsonl


def _texts(n: int, start: int = 0) -> list[str]:
    return [f"{PROSE} Document number {i}." for i in range(start, start + n)]


@pytest.fixture
def joined(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """A source of 3 files in 3 shards: 12 distinct documents each, the second file repeating 5 of the
    first's and the third 4 of the second's (dropped across shards), 3 held out; keep_dropped 2."""
    monkeypatch.chdir(tmp_path)
    files = [Path("data/a.jsonl"), Path("data/b.jsonl"), Path("data/c.jsonl")]
    write_jsonl(files[0], _texts(12))
    write_jsonl(files[1], _texts(5) + _texts(12, 100))
    write_jsonl(files[2], _texts(4, 100) + _texts(12, 200))
    spec = make_spec({"web": jsonl_source(keep_dropped=2)}, heldout_docs=3)
    _, result = run_source(spec, "web", [[f] for f in files])
    return {"result": result, "spec": spec}


def test_the_shards_together_are_the_source_and_its_dropped_sample(joined: dict) -> None:
    parts = [Path(f"out/part{i}") for i in range(3)]
    train = [row for p in parts for row in read_lines(p / "train.jsonl")]
    heldout = [row for p in parts for row in read_lines(p / "heldout.jsonl")]
    assert len(train) + len(heldout) == 36 and len(heldout) == 3
    assert len({row["text"] for row in train + heldout}) == 36  # every text once
    assert all(
        row["id"].startswith(f"{'abc'[i]}.jsonl:") for i, p in enumerate(parts) for row in read_lines(p / "train.jsonl")
    )
    counts = joined["result"]["counts"]
    assert (counts["docs_train"], counts["docs_heldout"]) == (len(train), len(heldout))
    assert joined["result"]["parts"] == [
        [len(read_lines(p / "train.jsonl")), len(read_lines(p / "heldout.jsonl"))] for p in parts
    ]
    # each shard keeps the first 2 of each reason it dropped: shard 1 drops 5 copies, shard 2 drops 4
    dropped = [read_lines(p / "dropped.jsonl") if (p / "dropped.jsonl").exists() else [] for p in parts]
    assert [len(d) for d in dropped] == [0, 2, 2]
    assert [row["id"] for row in dropped[1]] == ["b.jsonl:1", "b.jsonl:2"]
    assert all(row["step"] == "cross_shard_dedup" and row["reason"] == "duplicate" for d in dropped for row in d)
    assert "sha256" not in dropped[1][0] and dropped[1][0]["text"] == _texts(1)[0]


def test_fates_that_do_not_fit_the_shard_are_named(joined: dict) -> None:
    source = Path("out/source")
    fates = np.load(source / FATES_FILE)
    assert fates.dtype == FATE_DTYPE and np.all(np.diff(fates["id"].astype(np.int64)) > 0)
    assert int((fate_codes(source, 1, 17) != 0).sum()) == int((fates["id"] >> np.uint64(40) == 1).sum())
    config = FilterShardConfig(shard=1, perplexity=False, classifier=False, keep_dropped=0)
    dirs = {"shard": Path("out/shard1"), "source": source}
    # a fate naming a line past the shard's end
    bad = fates.copy()
    bad["id"][-1] = (np.uint64(2) << np.uint64(40)) | np.uint64(999)
    save_npy(source / FATES_FILE, bad)
    with pytest.raises(ValueError, match=r"fates.npy: names line 999 of shard 2, which has 16"):
        filter_shard(config.model_copy(update={"shard": 2}), {"shard": Path("out/shard2"), "source": source}, Path("x"))
    # a table of another layout
    save_npy(source / FATES_FILE, np.zeros(3, dtype=np.uint64))
    with pytest.raises(ValueError, match="fates.npy: not a table of"):
        filter_shard(config, dirs, Path("x"))
    save_npy(source / FATES_FILE, fates)
    # a shard whose docs.jsonl lost a line
    lines = Path("out/shard1/docs.jsonl").read_bytes().splitlines(keepends=True)
    Path("out/shard1/docs.jsonl").write_bytes(b"".join(lines[:-1]))
    with pytest.raises(ValueError, match=r"docs.jsonl: 16 lines, its stats say 17"):
        filter_shard(config, dirs, Path("y"))
    assert not Path("y/train.jsonl").exists()  # nothing half-written
    stats = json.loads(Path("out/shard1/stats.json").read_text())
    assert stats["counts"]["docs"] == 17
