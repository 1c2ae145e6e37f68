"""The run report's curation funnel: for each source whose curate_source artifact is built (its
filter_quality's, with quality filters), every step from the first read to the held-out split (and the quality
filters after it) with its documents and characters in and out and the reasons it dropped or changed documents
(stats.json, summed over the shards, then the join's own steps: runlib.curate.source)."""

from __future__ import annotations

from pathlib import Path

from runlib.audit.render import plots
from runlib.audit.render.report import Block, Heading, Image, Para, Table
from runlib.report.collect import JsonObject, RunData, is_number, json_object, number, read_json
from runlib.spec.units import format_count

PLOT = "quality.png"
CAPTION = (
    "The quality filters' scores of each source's curated documents (after dedup): perplexity under the "
    "n-gram model of its reference sources (log scale) and the classifier's probability of the anchors' "
    "label, with the cut-offs of what was kept (dashed)."
)

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
    for joined in run.graph.of("curate_source"):
        node = run.graph.funnel(str(joined.params["source"]))  # its stats hold the join's steps and its own
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
    figure = [Image(PLOT, "Quality scores", CAPTION)] if run.graph.of("filter_quality") else []
    return [Heading(2, "Curation"), Para(intro), *blocks, *_classifier_lines(run), *figure]


def _classifier_lines(run: RunData) -> list[Block]:
    """A line per built classifier: its held-out precision, recall and F1 at score 0.5."""
    out: list[Block] = []
    for node in run.graph.of("train_classifier"):
        counts = json_object((read_json(node.dir / "stats.json") or {}).get("counts"))
        values = [
            number(counts.get(m)) for m in ("precision", "recall", "f1", "heldout_positives", "heldout_negatives")
        ]
        if all(v is not None for v in values):
            p, r, f, pos, neg = (float(v or 0) for v in values)
            out.append(
                Para(
                    f"Classifier of {node.params.get('source')}: held-out precision {p:.3f}, recall {r:.3f}, "
                    f"F1 {f:.3f} at score 0.5 ({int(pos)} anchor and {int(neg)} own documents held "
                    "out of its training)."
                )
            )
    return out


def _score_steps(run: RunData) -> list[tuple[str, JsonObject]]:
    """(source, step row) of each built filter_quality's perplexity and classifier steps."""
    out = []
    for node in run.graph.of("filter_quality"):
        stats = read_json(node.dir / "stats.json") or {}
        steps = stats.get("steps")
        for raw in steps if isinstance(steps, list) else []:
            row = json_object(raw)
            if row.get("step") in ("perplexity", "classifier"):
                out.append((str(node.params.get("source")), row))
    return out


def plot_quality(run: RunData, path: Path) -> Path:
    """quality.png: a histogram per source and filter, with its cut-offs (CAPTION)."""
    rows = _score_steps(run)
    fig, axes = plots.new_figure(rows=max(1, len(rows)), height=2.6 * max(1, len(rows)) + 0.6)
    if not rows:
        plots.mark_empty(axes[0], "no quality filter is built yet")
    for ax, (source, row) in zip(axes, rows, strict=False):
        hist = json_object(row.get("histogram"))
        edges, counts = hist.get("edges"), hist.get("counts")
        if not isinstance(edges, list) or not isinstance(counts, list) or len(edges) != len(counts) + 1 or not counts:
            plots.mark_empty(ax, f"{source}: no {row.get('step')} scores")
            continue
        widths = [b - a for a, b in zip(edges, edges[1:], strict=False)]
        ax.bar(edges[:-1], counts, width=widths, align="edge", color="tab:blue", alpha=0.7, edgecolor="white")
        perplexity = row.get("step") == "perplexity"
        if perplexity:
            ax.set_xscale("log")
        raw_cuts = row.get("keep_range") if perplexity else [row.get("threshold")]
        for cut in raw_cuts if isinstance(raw_cuts, list) else []:
            if is_number(cut):
                ax.axvline(float(cut), color="black", ls="--", lw=1.0)
        label = "perplexity" if perplexity else "classifier score"
        kept = f"{row.get('docs_out')} of {row.get('docs_in')} kept"
        ax.set_title(f"{source}: {label} ({kept})", fontsize=10)
        ax.set_ylabel("documents")
    plots.save_png(fig, path)
    return Path(path)


HEADERS = ("Step", "Kind", "Docs in", "Docs out", "Kept", "Chars in", "Chars out", "Reasons")
