"""Curation: read a source's raw documents, normalize, filter, deduplicate and split off held-out documents.

The stages, in order: `curate_shard` (one job per shard of a source), `dedup_partition` (one job per slice
of the hash space), `curate_source` (the join: which documents are duplicates across shards and which are
held out, decided from the shards' tables), with quality filters `train_classifier`, `train_ngram_lm`,
`score_quality` (per shard) and `filter_quality` (the cut), and `filter_shard` (one job per shard: the
shard's train.jsonl / heldout.jsonl).
"""
