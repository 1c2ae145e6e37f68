"""The configs of the curation stages: exactly what `curate_shard` and `curate_source` read.

A source's name is not part of either: it only labels error messages (passed beside the config), so
two specs that curate the same input the same way share the artifacts whatever they call the source.
"""

from __future__ import annotations

from runlib.spec.models import CurateSpec, DedupSpec, InputSpec
from runlib.stageconfig import StageConfig


class CurateShardConfig(StageConfig):
    """One shard of one source: where its documents come from and every curation step applied to them."""

    input: InputSpec
    """The source's input (format, path glob, builtin name, text field, max_docs, shards)."""

    curate: CurateSpec
    """The curation steps (normalize, length, language, quality rules, PII, exact dedup, MinHash)."""

    shard: int
    """This shard's index, 0 .. shards - 1."""

    shards: int
    """Number of shards of the source (a builtin source's shard takes documents shard::shards)."""

    files: list[str]
    """The input files this shard reads, in order ([] for a builtin source)."""


class CurateSourceConfig(StageConfig):
    """The join of a source's shards: dedup across shards, near-duplicates, the held-out split."""

    dedup: DedupSpec
    """Exact dedup across shards and MinHash near-duplicate removal (the shards computed the signatures)."""

    heldout_docs: int
    """Documents kept out of training (the ones with the smallest SHA-256)."""
