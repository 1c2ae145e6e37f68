"""The memory of the data jobs that grow with their input (curate_shard, dedup_partition), from the bytes
they read: what their Slurm jobs ask for (runlib.workflow.resources) and what `runlib plan` says each holds.

Peak RSS per job, measured with `python -m runlib.bench.dedup_scale` (jsonl documents of 150 words):
curate_shard 175 MB at 0.5 MB of input, 292 MB at 21.5 MB (its documents, their signatures and tables);
dedup_partition 64 MB at 0.25 MB of the source's kept documents per slice, 122 MB at 21.5 MB. A warc shard,
measured in-process on copies of `runlib sample-web`'s crawl with FineWeb's rules (2026-12-03): 434 MB at
4.5 MB of .warc.gz, 472 MB at 16.6 MB, 522 MB at 32.5 MB (the extractor and language models, then the
extracted texts: 3.1 MB per MB). The model is a base plus MB per MB held, each with a margin of 1.5x over
those figures. A dedup_partition job holds its slice of the documents curate_shard kept: once the shards are
built, their docs.jsonl (a warc source keeps a small share of its bytes), before, their input files.

The one job per source of the join and of the quality cut holds what no size known before the run gives, so
its memory is set when the job starts, from its inputs' counts (Snakemake evaluates a resource that reads
the job's input once the input exists): curate_source holds one shard's hash table at a time (156 bytes a
document with its copies) and the duplicates and verified pairs (121 bytes each); filter_quality the scores,
lengths and codes of every document the join kept (67 bytes each). Measured in-process on synthetic tables
(2026-12-03): curate_source 201 MB with 0.5M documents per shard, 435 MB with 2M; 512 MB with 1M exact
duplicates and 1M pairs, 1,238 MB with 4M of each; filter_quality 193 MB at 1M documents, 393 MB at 4M. Both
models are a base plus those slopes, with the same 1.5x margin. filter_shard holds one shard's fate codes (a
byte a document) while the texts stream: it keeps its registry share.
"""

from __future__ import annotations

SIZED_STAGES = ("curate_shard", "dedup_partition")
MEM_MODEL_MB = {"curate_shard": (260, 8.3), "curate_shard warc": (630, 4.7), "dedup_partition": (100, 4.0)}
"""(base MB, MB per MB held) per stage; a warc shard's per MB of .warc.gz as stored."""


def data_job_mem_mb(stage: str, input_bytes: int, fmt: str = "jsonl") -> int:
    """The memory a data job asks for, in MB, from the bytes of input it holds (MEM_MODEL_MB; `fmt`: the
    source's input.format, which sets a curate_shard's)."""
    base, per_mb = MEM_MODEL_MB[f"{stage} warc" if stage == "curate_shard" and fmt == "warc" else stage]
    return int(base + per_mb * input_bytes / 2**20 + 0.5)


JOIN_BASE_MB, JOIN_SHARD_DOC_BYTES, JOIN_DUPLICATE_BYTES = 130, 156, 121
QUALITY_BASE_MB, QUALITY_DOC_BYTES = 130, 67
MARGIN = 1.5


def join_mem_mb(largest_shard_docs: int, duplicates_and_pairs: int) -> int:
    """curate_source's memory, in MB: one shard's hash table at a time, and the duplicates and pairs."""
    held = JOIN_SHARD_DOC_BYTES * largest_shard_docs + JOIN_DUPLICATE_BYTES * duplicates_and_pairs
    return int(MARGIN * (JOIN_BASE_MB + held / 2**20) + 0.5)


def quality_cut_mem_mb(docs: int) -> int:
    """filter_quality's memory, in MB: its scores, lengths and codes of every document the join kept."""
    return int(MARGIN * (QUALITY_BASE_MB + QUALITY_DOC_BYTES * docs / 2**20) + 0.5)
