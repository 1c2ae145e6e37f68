"""Tests of runlib.curate: shared helpers (spec building, jsonl sources, running a source's shards)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runlib.audit.cases import case_data
from runlib.curate.config import CurateShardConfig, InputFile
from runlib.curate.filter_shard import filter_shard
from runlib.curate.partition import dedup_partition
from runlib.curate.source import curate_source
from runlib.curate.stage import curate_shard
from runlib.spec import validate_data
from runlib.spec.models import RunSpec
from runlib.util.hashing import file_digest


def make_spec(sources: dict[str, Any], heldout_docs: int = 2, **patch: Any) -> RunSpec:
    """The base case spec with data.sources replaced (mixtures elsewhere are not checked by the loader)."""
    return validate_data(case_data({"data.sources": sources, "data.heldout_docs": heldout_docs, **patch})).spec


PROSE = (
    "The history of the river valley is one of slow change. Farmers came to the banks and built their homes "
    "with stone that they carried from the hills, and over many years the villages grew into towns that traded "
    "with each other along the water. Each spring the floods brought new soil to the fields, so the harvests "
    "were good, and the people learned to read the seasons from the colour of the river and the flight of birds."
)


def jsonl_source(path="data/*.jsonl", **curate):
    return {"domain": "web", "input": {"format": "jsonl", "path": path}, "curate": curate}


def write_jsonl(path, texts):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")


def read_lines(path):
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


def shard_config(spec: RunSpec, name: str, shard: int = 0, shards: int = 1, files=()) -> CurateShardConfig:
    """The curate_shard config of one shard of source `name` with the given files (the workflow's
    runlib.graph.configs.curate_shard_configs makes the same from the files the glob matches)."""
    source = spec.data.sources[name]
    inputs = [input_file(f) for f in files]
    return CurateShardConfig(input=source.input, curate=source.curate, shard=shard, shards=shards, files=inputs)


def input_file(path: str | Path) -> InputFile:
    """A file as a curation config lists it: path, size, content digest."""
    return InputFile(path=str(path), bytes=Path(path).stat().st_size, digest=file_digest(path))


def source_config(spec: RunSpec, name: str):
    """The curate_source config of source `name`, as the workflow builds it."""
    from runlib.graph.configs import curate_source_configs

    return curate_source_configs(spec)[name]


def run_partitions(spec: RunSpec, name: str, shard_dirs: list[Path], out: str | Path = "out") -> list[Path]:
    """The source's dedup_partition stages over the shards' outputs, as the workflow runs them."""
    from runlib.graph.configs import dedup_partition_configs

    dirs = []
    for config in dedup_partition_configs(spec, {name: len(shard_dirs)})[name]:
        d = Path(out) / f"partition{config.partition}"
        dedup_partition(config, shard_dirs, d, name)
        dirs.append(d)
    return dirs


def run_filter_shards(
    spec: RunSpec,
    name: str,
    shard_dirs: list[Path],
    source_dir: Path,
    out: str | Path = "out",
    quality: dict[str, Path] | None = None,
) -> list[Path]:
    """The source's filter_shard stages (as the workflow runs them), into out/part0, out/part1, ...; with
    quality filters, `quality` gives "quality" (filter_quality's output) and "scores0", ... (score_quality's)."""
    from runlib.graph.configs import filter_shard_configs

    parts = []
    for config in filter_shard_configs(spec, {name: len(shard_dirs)})[name]:
        dirs = {"shard": Path(shard_dirs[config.shard]), "source": Path(source_dir)}
        if quality is not None:
            dirs |= {"quality": quality["quality"], "scores": quality[f"scores{config.shard}"]}
        d = Path(out) / f"part{config.shard}"
        filter_shard(config, dirs, d)
        parts.append(d)
    return parts


def concatenate_parts(parts: list[Path], out_dir: Path) -> None:
    """train.jsonl and heldout.jsonl of the parts, one after the other, into out_dir: the source's documents
    in the order the loader reads them."""
    for name in ("train.jsonl", "heldout.jsonl"):
        Path(out_dir, name).write_bytes(b"".join(Path(p, name).read_bytes() for p in parts))


def run_source(spec, name, shard_files, out="out"):
    """curate_shard for each file list, dedup_partition for each slice, curate_source (into out/source), then
    filter_shard per shard (out/part<i>), their splits concatenated into out/source/train.jsonl and
    heldout.jsonl; returns (shard results, source result)."""
    dirs, results = [], []
    for i, files in enumerate(shard_files):
        d = Path(out) / f"shard{i}"
        results.append(curate_shard(shard_config(spec, name, i, len(shard_files), files), d, name))
        dirs.append(d)
    partitions = run_partitions(spec, name, dirs, out)
    result = curate_source(source_config(spec, name), dirs, Path(out) / "source", name, partitions)
    concatenate_parts(run_filter_shards(spec, name, dirs, Path(out) / "source", out), Path(out) / "source")
    return results, result
