"""`runlib docs SPEC --source NAME`: the documents curation kept (train.jsonl or heldout.jsonl of the source's
filter_shard artifacts, in shard order) or the sample of those it dropped (dropped.jsonl of each curate_shard
artifact, then of each filter_shard: the first curate.keep_dropped of each step and reason, in input order),
streamed as JSONL on stdout. Each artifact is verified against its manifest before a line of it is read
(runlib.store.artifacts.verify_node)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from runlib.curate.files import DROPPED_FILE, HELDOUT_FILE, TRAIN_FILE
from runlib.errors import UserError
from runlib.graph.build import build_graph
from runlib.spec import load_spec
from runlib.store.artifacts import is_built, verify_node
from runlib.store.command import snakemake_command
from runlib.store.node import StageNode
from runlib.store.settings import done_stamp

SPLIT_FILES = {"train": TRAIN_FILE, "heldout": HELDOUT_FILE}


def _built(node: StageNode, spec_path: str) -> Path:
    if not is_built(node):
        target = str(done_stamp(node.stage, node.key))
        raise UserError(f"{node.instance} is not built yet: run {snakemake_command(spec_path, [target])}")
    verify_node(node, full=True, spec_path=spec_path)
    return node.dir


def _lines(path: Path) -> Iterator[str]:
    with open(path, encoding="utf-8") as f:
        yield from f


def _dropped_rows(dirs: list[Path], per_reason: int) -> Iterator[dict[str, object]]:
    """The artifacts' samples in order, the first `per_reason` of each (step, reason): each shard kept its
    first ones, so these are the source's first ones in input order."""
    taken: Counter[tuple[object, object]] = Counter()
    for directory in dirs:
        path = directory / DROPPED_FILE
        if path.exists():
            for line in _lines(path):
                row = json.loads(line)
                taken[(row["step"], row["reason"])] += 1
                if taken[(row["step"], row["reason"])] <= per_reason:
                    yield row


def _check_reason(source: str, reason: str, dirs: list[Path], per_reason: int) -> None:
    """UserError listing the reasons the sample holds when `reason` is none of them."""
    seen = Counter(f"{row['step']}:{row['reason']}" for row in _dropped_rows(dirs, per_reason))
    if not any(reason in (key, key.split(":", 1)[1]) for key in seen):
        listing = ", ".join(f"{key} ({n})" for key, n in sorted(seen.items())) or "none"
        raise UserError(
            f"--reason {reason[:80]!r}: no document of source {source!r} was dropped for it; the sample holds "
            f"(step:reason, documents): {listing}"
        )


def curated_docs(
    spec_path: str, source: str, split: str = "train", dropped: bool = False, reason: str | None = None
) -> Iterator[str]:
    """The JSONL lines to print, one document each (id first; a web page's id is its URL)."""
    spec = load_spec(spec_path).spec
    sources = spec.data.sources
    if source not in sources:
        raise UserError(f"--source {source[:80]!r}: the spec has no such source; its sources: {', '.join(sources)}")
    graph = build_graph(spec)
    finished = graph.curated(source)  # the documents the source trains on, shard by shard
    if not dropped:
        if reason is not None:
            raise UserError("--reason selects among dropped documents: give --dropped too")
        for directory in [_built(node, spec_path) for node in finished]:
            yield from _lines(directory / SPLIT_FILES[split])
        return
    per_reason = sources[source].curate.keep_dropped
    if not per_reason:
        raise UserError(
            f"data.sources.{source}.curate.keep_dropped is 0, so curation kept no dropped document to show: "
            "set it (e.g. keep_dropped: 20, per step and reason) and run the workflow again"
        )
    shards = [n for n in graph.of("curate_shard") if n.params.get("source") == source]
    dirs = [_built(n, spec_path) for n in [*shards, *finished]]
    if reason is not None:
        _check_reason(source, reason, dirs, per_reason)
    for row in _dropped_rows(dirs, per_reason):
        if reason is None or reason in (row["reason"], f"{row['step']}:{row['reason']}"):
            yield json.dumps(row, ensure_ascii=False) + "\n"
