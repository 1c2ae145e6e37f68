"""The run report's curation funnel: for each source whose curate_source artifact is built, every step from the
first read to the held-out split (and the quality filters after it) with its documents and characters in and out and the reasons it dropped or
changed documents (stats.json, summed over the shards, then the join's own steps: runlib.curate.source)."""

from __future__ import annotations

from runlib.audit.render.report import Block, Heading, Para, Table
from runlib.report.collect import JsonObject, RunData, is_number, json_object, read_json
from runlib.spec.units import format_count

TOP_REASONS = 6  # reasons shown per step, the largest first; the rest are summed as "other"


def _reasons(reasons: JsonObject) -> str:
    counted = sorted(((str(k), int(v)) for k, v in reasons.items() if is_number(v) and v), key=lambda kv: -kv[1])
    shown = ", ".join(f"{k} {v:,}" for k, v in counted[:TOP_REASONS])
    rest = sum(v for _, v in counted[TOP_REASONS:])
    return shown + (f", other {rest:,}" if rest else "") or "–"


def _docs(x: object) -> str:
    return f"{int(x):,}" if is_number(x) else "n/a"


def _chars(x: object) -> str:
    return format_count(int(x)) if is_number(x) else "n/a"


def _rows(steps: list[object]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for raw in steps:
        step = json_object(raw)
        docs_in, docs_out = step.get("docs_in"), step.get("docs_out")
        kept = f"{docs_out / docs_in:.1%}" if is_number(docs_in) and is_number(docs_out) and docs_in else "–"
        rows.append(
            (
                str(step.get("step", "?")),
                str(step.get("kind", "?")),
                _docs(docs_in),
                _docs(docs_out),
                kept,
                _chars(step.get("chars_in")),
                _chars(step.get("chars_out")),
                _reasons(json_object(step.get("reasons"))),
            )
        )
    return rows


def curation_blocks(run: RunData) -> list[Block]:
    """A table per source with a built curate_source artifact; a line for the sources not curated yet."""
    blocks: list[Block] = []
    waiting = []
    filtered = {n.params.get("source"): n for n in run.graph.of("filter_quality")}
    for joined in run.graph.of("curate_source"):
        node = filtered.get(joined.params.get("source"), joined)  # its stats hold the join's steps and its own
        state = next((s for s in run.stages if s.node is node), None)
        stats = read_json(node.dir / "stats.json") if state is not None and state.built else None
        steps = stats.get("steps") if stats is not None else None
        if not isinstance(steps, list):
            waiting.append(str(node.params.get("source")))
            continue
        blocks += [Heading(3, f"Source {node.params.get('source')}"), Table(HEADERS, _rows(steps))]
    if not blocks and not waiting:
        return []
    intro = (
        "Each step's documents and characters in and out, and why it dropped or changed documents (reasons "
        "with their counts; `runlib docs SPEC --source NAME --dropped` shows a sample where curate.keep_dropped "
        "is set). Shards are summed; the join's steps follow, then the quality filters' (classifier, perplexity)."
    )
    if waiting:
        intro += f" Not curated yet: {', '.join(waiting)}."
    return [Heading(2, "Curation"), Para(intro), *blocks]


HEADERS = ("Step", "Kind", "Docs in", "Docs out", "Kept", "Chars in", "Chars out", "Reasons")
