"""Curation: read a source's raw documents, normalize, filter, deduplicate and split off held-out documents.

Two stages: `curate_shard` (one job per shard of a source) and `curate_source` (joins the shards,
deduplicates across them and writes train.jsonl / heldout.jsonl).
"""
