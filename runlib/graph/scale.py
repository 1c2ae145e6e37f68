"""A source's data jobs on paper: how many per stage, what each holds, the memory it asks and the CPU time
the stage takes, from the input's size alone (the files need not exist): `runlib plan SPEC --input-bytes
SOURCE=SIZE`. The memory model is runlib.curate.memory's; the time is the stage's work over a rate measured
on this machine (RATES), so the core-hours are those of this machine's cores.

What each stage's work is:
  curate_shard     the source's input bytes (reading, extraction for warc, the filters, the signatures)
  dedup_partition  the bytes curate_shard kept (its slice of the hash and band tables, the candidates' check)
  curate_source    the bytes curate_shard kept (it reads their hash tables, 56 bytes a document, and clusters
                   the verified pairs: one job, no text)
  filter_shard     the bytes curate_shard kept (one job per shard: its documents copied into the splits)
  tokenize         the curated bytes
The curated bytes are the source's declared `tokens` x BYTES_PER_TOKEN (a source without declared tokens
is refused: nothing on paper says what curation keeps). A warc source's rate is per byte of its .warc.gz
files as stored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from runlib.curate.memory import data_job_mem_mb
from runlib.errors import UserError
from runlib.graph.registry import STAGES
from runlib.spec.models import RunSpec


@dataclass(frozen=True)
class Rate:
    mb_per_cpu_s: float
    """MB (2^20 bytes) of the stage's work per CPU second: the stage's CPU time summed over its jobs."""
    measured: str
    """The command that measured it and its figures."""


DATA_SCALE = (
    "python -m runlib.bench.data_scale --base-mb 32 --shard-mb 8 --scales 1 4, its 4x run (138 MB of jsonl in 19 "
    "shards; 2026-12-03, with filter_shard)"
)
DATA_SCALE_WARC = (
    "python -m runlib.bench.data_scale --format warc --base-mb 8 --shard-mb 4 --scales 1 4, its 4x run (32.5 MB "
    "of .warc.gz in 9 shards; 2026-12-03)"
)
RATES: dict[str, Rate] = {
    # 5.4 MB/s: normalize, length filter, SHA-256 and MinHash signatures of 150-word documents; no quality
    # rule or language identification (random-letter words: the rules would drop every one)
    "curate_shard jsonl": Rate(6.14, DATA_SCALE),
    # per MB of .warc.gz as stored: reading, resiliparse, the Gopher, C4 and FineWeb rules, MinHash
    "curate_shard warc resiliparse": Rate(0.34, DATA_SCALE_WARC),
    # the resiliparse rate x 27.7 / 139.1, trafilatura's docs/s/core over resiliparse's in
    # `python -m runlib.bench.curate_web` (2026-12-03, same crawl, interleaved rounds)
    "curate_shard warc trafilatura": Rate(0.068, DATA_SCALE_WARC + " x 27.7/139.1 (runlib.bench.curate_web)"),
    "dedup_partition": Rate(9.86, DATA_SCALE),
    # the tables only (56 bytes a document): per MB of the documents they index
    "curate_source": Rate(172.5, DATA_SCALE),
    "filter_shard": Rate(59.4, DATA_SCALE),
    "tokenize": Rate(3.51, DATA_SCALE + "; a 3,840-id BPE, one thread"),
}
BYTES_PER_TOKEN = 4.0
"""UTF-8 bytes per token of curated English web text (a 32K-128K BPE; this repository's tokenize stage
measures it per source: bytes_per_token in its manifest), to turn the declared tokens into curated bytes."""


@dataclass(frozen=True)
class StageScale:
    stage: str
    jobs: int
    bytes_per_job: int
    """What one job holds and its memory grows with (its shard's input; a slice of the source's); 0 for a job
    whose memory does not grow with its input."""
    mem_mb: int
    cpu_hours: float
    note: str = ""


@dataclass(frozen=True)
class SourceScale:
    source: str
    input_bytes: int
    curated_bytes: int
    curated_from: str
    stages: list[StageScale]
    not_estimated: str = ""
    """The source's stages this plan leaves out, and why ('' for none)."""

    @property
    def cpu_hours(self) -> float:
        return sum(s.cpu_hours for s in self.stages)


def _hours(work_bytes: float, rate: Rate) -> float:
    return work_bytes / 2**20 / rate.mb_per_cpu_s / 3600


def _curate_rate(fmt: str, extract: str | None) -> str:
    return f"curate_shard warc {extract or 'resiliparse'}" if fmt == "warc" else "curate_shard jsonl"


TIMED_STAGES = ("curate_shard", "dedup_partition", "curate_source", "filter_shard", "tokenize")
"""The data stages whose Slurm time limit comes from their work (job_runtime_min)."""


def job_seconds(stage: str, work_bytes: float, fmt: str = "jsonl", extract: str | None = None) -> float:
    """Estimated seconds of one job of `stage` over work_bytes of its work (the module docstring says what)."""
    key = _curate_rate(fmt, extract) if stage == "curate_shard" else stage
    return work_bytes / 2**20 / RATES[key].mb_per_cpu_s


def job_runtime_min(seconds: float, floor_min: int) -> int:
    """A data job's Slurm time limit: its estimate x 1.5 + 10 minutes, at least floor_min (the registry's)."""
    return max(floor_min, math.ceil(seconds * 1.5 / 60) + 10)


def curated_estimate(spec: RunSpec, name: str, input_bytes: int) -> int:
    """The bytes curation keeps of a source: its declared tokens x BYTES_PER_TOKEN, or else its input's bytes
    (a bound for a text source; a builtin source's input is small)."""
    tokens = spec.data.sources[name].tokens
    return int(tokens * BYTES_PER_TOKEN) if tokens is not None else input_bytes


def _floor_mb(stage: str) -> int:
    resources = STAGES[stage].resources
    return resources.mem_mb if resources is not None else 0


def source_scale(spec: RunSpec, name: str, input_bytes: int) -> SourceScale:
    """The data jobs of source `name` if its input held input_bytes (UserError naming the field to set when
    the spec does not say how the source is sharded)."""
    if name not in spec.data.sources:
        raise UserError(
            f"--input-bytes {name}=...: no source {name!r} in the spec (sources: {', '.join(spec.data.sources)})"
        )
    source = spec.data.sources[name]
    fmt = source.input.format
    if fmt == "builtin":
        raise UserError(f"--input-bytes {name}=...: a builtin source has no input files to size")
    if source.input.shard_bytes is not None:
        shards = max(1, math.ceil(input_bytes / source.input.shard_bytes))
    elif source.input.shards is not None:
        shards = source.input.shards
    else:
        raise UserError(
            f"data.sources.{name}.input: neither shard_bytes nor shards, so its jobs follow its files, which are "
            "not here; set input.shard_bytes (e.g. 1Gi) to plan it on paper"
        )
    if source.tokens is None:
        raise UserError(
            f"data.sources.{name}.tokens: not declared, so the size of what curation keeps is unknown; declare the "
            "tokens you expect after curation (e.g. tokens: 200B) to plan the stages after curate_shard"
        )
    curated = int(source.tokens * BYTES_PER_TOKEN)
    curated_from = f"its declared tokens x {BYTES_PER_TOKEN:g} bytes"
    per_shard = input_bytes // shards
    stages = [
        StageScale(
            "curate_shard",
            shards,
            per_shard,
            max(_floor_mb("curate_shard"), data_job_mem_mb("curate_shard", per_shard, fmt)),
            _hours(input_bytes, RATES[_curate_rate(source.input.format, source.input.extract)]),
        )
    ]
    dedup = source.curate.dedup
    if dedup.exact or dedup.minhash is not None:
        stages.append(
            StageScale(
                "dedup_partition",
                shards,
                curated // shards,
                max(_floor_mb("dedup_partition"), data_job_mem_mb("dedup_partition", curated // shards)),
                _hours(curated, RATES["dedup_partition"]),
            )
        )
    stages.append(
        StageScale(
            "curate_source",
            1,
            0,
            _floor_mb("curate_source"),
            _hours(curated, RATES["curate_source"]),
            "one job, no text: reads the shards' hash tables; its memory is set when it starts, from the largest "
            "shard's documents and the duplicates and pairs found (runlib.curate.memory)",
        )
    )
    stages.append(
        StageScale(
            "filter_shard", shards, curated // shards, _floor_mb("filter_shard"), _hours(curated, RATES["filter_shard"])
        )
    )
    stages.append(
        StageScale("tokenize", shards, curated // shards, _floor_mb("tokenize"), _hours(curated, RATES["tokenize"]))
    )
    unmeasured = (
        "score_quality and filter_quality (its quality filters): no rate measured"
        if (source.curate.classifier is not None or source.curate.perplexity is not None)
        else ""
    )
    return SourceScale(name, input_bytes, curated, curated_from, stages, unmeasured)


def _size(nbytes: float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if nbytes >= scale:
            return f"{nbytes / scale:,.1f} {unit}"
    return f"{nbytes:,.0f} B"


def render_scale(scale: SourceScale) -> str:
    """The paper plan of one source as `runlib plan --input-bytes` prints it."""
    lines = [
        f"source {scale.source} on paper: {_size(scale.input_bytes)} of input; curated {_size(scale.curated_bytes)} "
        f"({scale.curated_from})",
        f"  {'stage':<16} {'jobs':>8} {'holds/job':>11} {'memory/job':>11} {'CPU-hours':>10}",
    ]
    for s in scale.stages:
        lines.append(
            f"  {s.stage:<16} {s.jobs:>8,} {_size(s.bytes_per_job) if s.bytes_per_job else '-':>11} "
            f"{s.mem_mb:>8,} MB {s.cpu_hours:>10,.1f}" + (f"  {s.note}" if s.note else "")
        )
    lines.append(f"  {'total':<16} {sum(s.jobs for s in scale.stages):>8,} {'':>11} {'':>11} {scale.cpu_hours:>10,.1f}")
    if scale.not_estimated:
        lines.append(f"  not estimated: {scale.not_estimated}")
    lines.append("  rates (MB of work per CPU second, this machine's cores):")
    for key, rate in RATES.items():
        lines.append(f"    {key:<30} {rate.mb_per_cpu_s:6.2f}  {rate.measured}")
    return "\n".join(lines) + "\n"
