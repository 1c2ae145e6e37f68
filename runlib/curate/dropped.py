"""A sample of what curation dropped, per step and reason (curate.keep_dropped), so that a user can read
what a rule removed before trusting it: the first N documents of each (step, reason) in input order, as
datatrove's filters hand what they exclude to an `exclusion_writer` (huggingface/datatrove
src/datatrove/pipeline/filters/base_filter.py at v0.10.0). curate_shard and curate_source write the sample
to dropped.jsonl; `runlib docs --dropped` reads it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class DroppedSample:
    """Up to `per_reason` documents for each (step, reason); 0 keeps none and costs nothing."""

    per_reason: int
    meta: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """doc id -> what docs.jsonl carries beside the text (a web page's URL as its id, crawl date, record id)."""
    rows: list[dict[str, Any]] = field(default_factory=list)
    _taken: Counter[tuple[str, str]] = field(default_factory=Counter)

    def wants(self, step: str, reason: str) -> bool:
        return self._taken[(step, reason)] < self.per_reason

    def add(self, step: str, reason: str, doc_id: str, text: str, meta: Mapping[str, str] | None = None) -> None:
        """Keep this document if its (step, reason) has room; `meta` (else self.meta[doc_id]) holds the fields
        beside the text."""
        if not self.wants(step, reason):
            return
        self._taken[(step, reason)] += 1
        row: dict[str, Any] = {"id": doc_id, "text": text}
        extra = meta if meta is not None else self.meta.get(doc_id)
        if extra:
            row |= dict(extra)
        self.rows.append(row | {"step": step, "reason": reason})
