"""The memory of the data jobs that grow with their input (curate_shard, dedup_partition), from the bytes
they read: what their Slurm jobs ask for (runlib.workflow.resources) and what `runlib plan` says each holds.

Peak RSS per job, measured with `python -m runlib.bench.dedup_scale` (jsonl documents of 150 words):
curate_shard 175 MB at 0.5 MB of input, 292 MB at 21.5 MB (its documents, their signatures and tables);
dedup_partition 64 MB at 0.25 MB of the source per slice, 122 MB at 21.5 MB. The model is a base plus MB per
input MB, each with a margin of 1.5x over those figures. curate_source holds the duplicates, their verified
pairs and one shard's hash table at a time, and filter_shard one shard's fate codes (a byte a document) while
the texts stream: both keep their registry share.
"""

from __future__ import annotations

SIZED_STAGES = ("curate_shard", "dedup_partition")
MEM_MODEL_MB = {"curate_shard": (260, 8.3), "dedup_partition": (100, 4.0)}


def data_job_mem_mb(stage: str, input_bytes: int) -> int:
    """The memory a data job asks for, in MB, from the bytes of input it holds (MEM_MODEL_MB)."""
    base, per_mb = MEM_MODEL_MB[stage]
    return int(base + per_mb * input_bytes / 2**20 + 0.5)
