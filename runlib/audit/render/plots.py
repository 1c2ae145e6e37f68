"""The report's plots: one PNG each, drawn from the Plan alone.

Each function takes the Plan and an output path and writes one small PNG (fixed size, 100 dpi).
They are meant for a reader skimming a report, so each shows one question: does the LR schedule
look as intended, where does the batch change, what is each phase made of, does each phase fit the
device, and how often is each source repeated.

Figures are built with matplotlib's object API on an Agg canvas (`Figure` + `FigureCanvasAgg`)
rather than pyplot: that renders headless exactly as `matplotlib.use("Agg")` would, but without
switching the global backend of whatever process imports runlib, and without pyplot's global list
of open figures (nothing to leak when a plot raises). matplotlib is imported inside the functions,
so `runlib audit` in text or JSON form never pays for it.

Degenerate plans (no phases, zero-token phases, sources with unknown or zero availability) must
draw something sensible rather than raise: a report is most useful exactly when a spec is odd.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from runlib.spec.hardware import device_memory_text
from runlib.spec.units import format_count

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.axis import Axis
    from matplotlib.figure import Figure

    from runlib.plan import Plan
    from runlib.plan.derive import PhasePlan

__all__ = [
    "DPI",
    "FIGSIZE",
    "MEMORY_PARTS",
    "PLOTS",
    "Colour",
    "colour_map",
    "count_axis",
    "draw_lr",
    "draw_memory",
    "format_bytes",
    "lr_curve",
    "lr_title",
    "mark_empty",
    "memory_parts",
    "memory_table",
    "new_figure",
    "phase_bounds_steps",
    "phase_bounds_tokens",
    "phase_lines",
    "plot_epochs",
    "plot_lr",
    "plot_memory",
    "plot_mixture",
    "plot_tokens_per_step",
    "save_png",
    "write_plots",
]

Colour = tuple[float, float, float, float]  # RGBA, as a matplotlib colormap returns it

FIGSIZE = (9.0, 4.2)
DPI = 100
GIB = 2**30
SAMPLES_PER_PHASE = 400
EPOCH_LINES = (
    (4.0, "4 epochs: repetition still ~free"),
    (16.0, "16 epochs: more repeats ~worthless"),
)  # Muennighoff et al. 2023
MEMORY_PARTS = (
    ("weights", "weights"),
    ("master_weights", "master"),
    ("gradients", "gradients"),
    ("optimizer_states", "optimizer states"),
    ("activations", "activations"),
    ("logits", "logits"),
    ("buffers", "buffers"),
    ("runtime_overhead", "runtime overhead"),
    ("fragmentation", "fragmentation"),
)  # labels of MemoryBreakdown.as_dict()'s parts; a part without one here is shown by its key

# (file, title, caption): the report lists the plots in this order.
PLOTS = (
    (
        "lr.png",
        "Learning rate",
        "Learning rate over the run, against tokens seen (top) and optimizer steps (bottom), a phase's "
        "optimizer.lr_scale applied; vertical lines mark phase starts.",
    ),
    (
        "tokens_per_step.png",
        "Tokens per step",
        "Tokens per optimizer step over the run (the global batch in tokens); a step changes at a batch ramp or a phase with another batch or sequence length.",
    ),
    ("mixture.png", "Mixture", "Share of each source in each phase's tokens (mixture weights normalised to 1)."),
    (
        "memory.png",
        "Memory per device",
        "Estimated peak memory per device in each phase, by component; solid line: device memory, dashed: 90% of it. "
        "The table under the bars gives every component's size, so parts too small to see at the device's "
        "scale are still read.",
    ),
    (
        "epochs.png",
        "Epochs per source",
        "Passes over each source's available tokens across the whole run; dashed lines at 4 and 16 epochs (Muennighoff et al. 2023).",
    ),
)


def write_plots(plan: Plan, out_dir: Path) -> list[Path]:
    """Write every plot of PLOTS into out_dir; returns the paths in PLOTS order."""
    out_dir = Path(out_dir)
    paths = [out_dir / name for name, _, _ in PLOTS]
    plot_lr(plan, paths[0])
    plot_tokens_per_step(plan, paths[1])
    plot_mixture(plan, paths[2])
    plot_memory(plan, paths[3])
    plot_epochs(plan, paths[4])
    return paths


# --- helpers (public: the run report draws its plots with them, runlib.report.plots) -------------


def new_figure(rows: int = 1, height: float | None = None) -> tuple[Figure, list[Axes]]:
    """A figure (FIGSIZE wide, `height` or FIGSIZE's tall, DPI) on an Agg canvas with `rows` stacked axes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(FIGSIZE[0], height or FIGSIZE[1]), dpi=DPI)
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(rows, 1, i + 1) for i in range(rows)]
    return fig, axes


def save_png(fig: Figure, path: Path) -> None:
    """Lay the figure out tightly and write it to path as a PNG at DPI, with no Software metadata (so the
    same plot is the same bytes whichever matplotlib drew it)."""
    fig.tight_layout()
    fig.savefig(Path(path), format="png", dpi=DPI, metadata={"Software": None})


def count_axis(axis: Axis) -> None:
    """Tick labels as short counts (2.41B) rather than 1e9 offsets."""
    from matplotlib.ticker import FuncFormatter

    axis.set_major_formatter(FuncFormatter(lambda x, _pos: format_count(x) if x else "0"))


def _finite(x: float | None, default: float = 0.0) -> float:
    return x if x is not None and math.isfinite(x) else default


def colour_map(names: Iterable[str]) -> dict[str, Colour]:
    """One stable colour per name (in first-seen order, tab10, or tab20 past ten names), shared by the mixture
    and epochs plots and the run report's per-source curves."""
    from matplotlib import colormaps

    names = list(dict.fromkeys(names))
    cmap = colormaps["tab10" if len(names) <= 10 else "tab20"]
    return {name: cmap(i % cmap.N) for i, name in enumerate(names)}


def _source_names(plan: Plan) -> list[str]:
    names = [s.name for s in plan.sources]
    for p in plan.phases:
        names.extend(p.settings.phase.mixture)
    return list(dict.fromkeys(names))


def mark_empty(ax: Axes, text: str) -> None:
    """An axes with nothing to draw: `text` in grey at its centre, no ticks."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def phase_lines(ax: Axes, bounds: list[tuple[float, str]], extent: float) -> None:
    """A vertical line at each phase start, its name written along it at the top of the axes.

    Short phases put their starts close together; a label within 3% of the run from the previous
    one is written lower down so the names do not overprint each other.
    """
    y, last_x = 0.98, None
    for x, name in bounds:
        ax.axvline(x, color="0.55", lw=0.8, ls=":", zorder=1)
        close = last_x is not None and extent > 0 and (x - last_x) / extent < 0.03
        y = y - 0.3 if close and y > 0.4 else 0.98
        last_x = x
        ax.text(
            x,
            y,
            f" {name}",
            rotation=90,
            ha="right",
            va="top",
            fontsize=8,
            color="0.3",
            transform=ax.get_xaxis_transform(),
            clip_on=True,
        )


def phase_bounds_tokens(plan: Plan) -> list[tuple[float, str]]:
    """(tokens at its start, name) of each phase: phase_lines' bounds on a tokens axis."""
    return [(p.span.start_tokens, p.name) for p in plan.phases]


def phase_bounds_steps(plan: Plan) -> list[tuple[float, str]]:
    """(optimizer steps at its start, name) of each phase: phase_lines' bounds on a steps axis."""
    return [(p.span.start_step, p.name) for p in plan.phases]


def _step_in_phase(phase: PhasePlan, tokens: float) -> float:
    """Optimizer steps taken at `tokens`, read off the phase's constant-batch segments."""
    for seg in phase.span.segments:
        if tokens <= seg.end_tokens and seg.tokens_per_step > 0:
            return seg.start_step + max(0.0, tokens - seg.start_tokens) / seg.tokens_per_step
    return phase.span.end_step


def lr_curve(plan: Plan) -> tuple[list[float], list[float], list[float]]:
    """(tokens, steps, lr) sampled per phase, plus the schedule's corners so kinks are exact; the LR is the
    plan's (Plan.lr_at: the schedule times the phase's optimizer.lr_scale, as training applies it), each
    phase's samples with its own scale, so a phase boundary where the scale changes is drawn as a step."""
    sched = plan.schedule
    corners = [sched.warmup_tokens, sched.decay_start_tokens, sched.decay_end_tokens, *(t for t, _ in sched.levels)]
    tokens_out: list[float] = []
    steps_out: list[float] = []
    lr_out: list[float] = []
    for i, p in enumerate(plan.phases):
        start, end = float(p.span.start_tokens), float(p.span.end_tokens)
        if end <= start:
            xs = [start]
        else:
            n = SAMPLES_PER_PHASE
            xs = [start + (end - start) * i / (n - 1) for i in range(n)]
            xs += [c for c in corners if math.isfinite(c) and start < c < end]
            xs.sort()
        for x in xs:
            tokens_out.append(x)
            steps_out.append(_step_in_phase(p, x))
            lr_out.append(plan.lr_at(x, phase=i))
    return tokens_out, steps_out, lr_out


def lr_title(plan: Plan) -> str:
    """The schedule in words, with every phase that scales it (phases[].optimizer.lr_scale)."""
    s = plan.schedule
    text = f"{s.kind}, peak {s.peak_lr:.3g}, floor {s.floor_lr:.3g}"
    scaled = [f"{p.name} ×{p.lr_scale:g}" for p in plan.phases if p.lr_scale != 1.0]
    return text + (f"; lr_scale: {', '.join(scaled)}" if scaled else "")


# --- the plots -----------------------------------------------------------------------------------


def plot_lr(plan: Plan, path: Path) -> Path:
    """LR against tokens and against optimizer steps: a batch change bends one but not the other."""
    save_png(draw_lr(plan), path)
    return Path(path)


def draw_lr(plan: Plan) -> Figure:
    """plot_lr's figure, not yet saved: the planned LR (lr_curve) against tokens (top) and steps (bottom)."""
    fig, (ax_t, ax_s) = new_figure(rows=2, height=6.0)
    tokens, steps, lr = lr_curve(plan)
    if not tokens or plan.tokens_total <= 0:
        mark_empty(ax_t, "no tokens in the run")
        mark_empty(ax_s, "no steps in the run")
    else:
        ax_t.plot(tokens, lr, color="tab:blue", lw=1.5)
        ax_s.plot(steps, lr, color="tab:orange", lw=1.5)
        phase_lines(ax_t, phase_bounds_tokens(plan), plan.tokens_total)
        phase_lines(ax_s, phase_bounds_steps(plan), plan.steps_total)
        count_axis(ax_t.xaxis)
        count_axis(ax_s.xaxis)
        for ax in (ax_t, ax_s):
            ax.set_ylabel("learning rate")
            ax.set_ylim(bottom=0, top=max(lr) * 1.08 or 1.0)
            ax.grid(alpha=0.3)
            ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
        ax_t.set_xlabel("tokens seen")
        ax_s.set_xlabel("optimizer step")
    ax_t.set_title(f"Learning rate: {lr_title(plan)}", fontsize=11)
    return fig


def plot_tokens_per_step(plan: Plan, path: Path) -> Path:
    """The global batch in tokens, as a step function of tokens seen."""
    fig, (ax,) = new_figure()
    edges: list[float] = []
    values: list[float] = []
    for p in plan.phases:
        for seg in p.span.segments:
            if seg.steps <= 0:
                continue
            if edges and edges[-1] != seg.start_tokens:
                # not contiguous (should not happen on one timeline): close the gap with a zero
                values.append(0.0)
                edges.append(float(seg.start_tokens))
            if not edges:
                edges.append(float(seg.start_tokens))
            values.append(float(seg.tokens_per_step))
            edges.append(float(seg.end_tokens))
    if not values:
        mark_empty(ax, "no optimizer steps in the run")
    else:
        ax.stairs(values, edges, color="tab:green", lw=1.8, baseline=None)
        phase_lines(ax, phase_bounds_tokens(plan), plan.tokens_total)
        count_axis(ax.xaxis)
        count_axis(ax.yaxis)
        ax.set_ylim(0, max(values) * 1.2)
        ax.set_xlabel("tokens seen")
        ax.set_ylabel("tokens per optimizer step")
        ax.grid(alpha=0.3)
    ax.set_title("Tokens per optimizer step", fontsize=11)
    save_png(fig, path)
    return Path(path)


def plot_mixture(plan: Plan, path: Path) -> Path:
    """Stacked horizontal bars, one per phase (first phase on top), each normalised to 100%."""
    fig, (ax,) = new_figure(height=max(2.5, 1.2 + 0.55 * len(plan.phases)))
    names = _source_names(plan)
    colours = colour_map(names)
    if not plan.phases:
        mark_empty(ax, "no phases")
    else:
        labels = [p.name for p in plan.phases]
        ys = list(range(len(plan.phases)))
        for source in names:
            lefts, widths = [], []
            for p in plan.phases:
                mixture = p.settings.phase.mixture
                total = sum(max(0.0, w) for w in mixture.values())
                share = max(0.0, mixture.get(source, 0.0)) / total if total > 0 else 0.0
                before = sum(max(0.0, mixture.get(n, 0.0)) for n in names[: names.index(source)])
                lefts.append(before / total if total > 0 else 0.0)
                widths.append(share)
            if not any(widths):
                continue
            bars = ax.barh(ys, widths, left=lefts, color=colours[source], label=source, edgecolor="white", height=0.6)
            for bar, w in zip(bars, widths, strict=True):
                if w >= 0.06:
                    ax.text(
                        bar.get_x() + w / 2,
                        bar.get_y() + bar.get_height() / 2,
                        f"{w:.0%}",
                        ha="center",
                        va="center",
                        fontsize=8,
                        color="white",
                    )
        ax.set_yticks(ys, labels)
        ax.invert_yaxis()
        ax.set_xlim(0, 1)
        ax.xaxis.set_major_formatter(lambda x, _pos: f"{x:.0%}")
        ax.set_xlabel("share of the phase's tokens")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.set_title("Mixture per phase", fontsize=11)
    save_png(fig, path)
    return Path(path)


def format_bytes(n: float | None) -> str:
    """A size in binary units, 3 significant digits: '12.3 GiB', '45.0 MiB', '512 B'; '–' for none."""
    if n is None or not math.isfinite(n) or n <= 0:
        return "–"
    for unit, size in (("TiB", 2**40), ("GiB", GIB), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            value = n / size
            return f"{value:.3g} {unit}" if value < 1000 else f"{value:,.0f} {unit}"
    return f"{n:.0f} B"


def memory_parts(plan: Plan) -> list[tuple[str, str, list[float]]]:
    """(key, label, bytes per phase) of each part of the phases' MemoryBreakdown (as_dict: exactly the parts
    its `total` sums, so the bars, the table and the audit's total agree) that is not zero in every phase."""
    labels = dict(MEMORY_PARTS)
    parts = [p.memory.as_dict() for p in plan.phases]
    keys = list(dict.fromkeys(k for d in parts for k in d))
    out = []
    for key in keys:
        sizes = [_finite(d.get(key)) for d in parts]
        if any(sizes):
            out.append((key, labels.get(key, key.replace("_", " ")), sizes))
    return out


def memory_table(plan: Plan) -> tuple[list[str], list[list[str]]]:
    """(column headers, rows) of the memory plot's table: one row per component that is not zero in
    every phase (memory_parts), then the total (MemoryBreakdown.total) and its share of the device; one
    column per phase."""
    headers = ["component", *(p.name for p in plan.phases)]
    rows = [[label, *(format_bytes(x) for x in sizes)] for _, label, sizes in memory_parts(plan)]
    totals = [p.memory.total for p in plan.phases]
    rows.append(["total", *(format_bytes(t) for t in totals)])
    device = float(plan.accelerator.memory_gib or 0.0) * GIB
    if device > 0:
        rows.append([f"of {plan.accelerator.memory_gib:.3g} GiB", *(f"{t / device:.1%}" for t in totals)])
    return headers, rows


def plot_memory(plan: Plan, path: Path) -> Path:
    """Stacked memory components per phase against the device's memory and a 90% line, with a table
    of every component's size beneath (the bars show the proportions; the table, the small parts)."""
    draw_memory(plan).savefig(Path(path), format="png", dpi=DPI, metadata={"Software": None})
    return Path(path)


def draw_memory(plan: Plan) -> Figure:
    """plot_memory's figure (a matplotlib Figure on an Agg canvas), not yet saved."""
    headers, table_rows = memory_table(plan) if plan.phases else ([], [])
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.transforms import Bbox

    table_inches = 0.22 * (len(table_rows) + 1) + 0.15 if table_rows else 0.1
    fig = Figure(figsize=(FIGSIZE[0], FIGSIZE[1] + table_inches), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    grid = fig.add_gridspec(2, 1, height_ratios=[FIGSIZE[1], table_inches])
    ax, ax_table = fig.add_subplot(grid[0]), fig.add_subplot(grid[1])
    ax_table.axis("off")
    device_gib = float(plan.accelerator.memory_gib or 0.0)
    if not plan.phases:
        mark_empty(ax, "no phases")
    else:
        from matplotlib import colormaps

        cmap = colormaps["tab10"]
        xs = list(range(len(plan.phases)))
        bottoms = [0.0] * len(xs)
        colour = {}
        for i, (_, label, sizes) in enumerate(memory_parts(plan)):
            heights = [x / GIB for x in sizes]
            colour[label] = cmap(i % cmap.N)
            ax.bar(xs, heights, bottom=bottoms, color=colour[label], label=label, width=0.6, edgecolor="white", lw=0.5)
            bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
        for x, total in zip(xs, (p.memory.total / GIB for p in plan.phases), strict=True):  # the table's total
            ax.text(x, total, f"{total:.3g}", ha="center", va="bottom", fontsize=8)
        if device_gib > 0:
            ax.axhline(device_gib, color="black", lw=1.2, label=f"device {device_memory_text(plan.accelerator)}")
            ax.axhline(0.9 * device_gib, color="black", lw=1.0, ls="--", label="90% of device")
        top = max(bottoms + [device_gib])
        ax.set_ylim(0, top * 1.12 if top > 0 else 1.0)
        ax.set_xticks(xs, [p.name for p in plan.phases])
        ax.set_ylabel("GiB per device")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
        label_width = 0.22  # "optimizer states", "runtime overhead" whole at 8 pt
        widths = [label_width, *([(1.0 - label_width) / max(1, len(headers) - 1)] * (len(headers) - 1))]
        table = ax_table.table(
            cellText=table_rows,
            colLabels=headers,
            colWidths=widths,
            bbox=Bbox.from_bounds(0.0, 0.0, 1.0, 1.0),
            cellLoc="right",
        )
        table.auto_set_font_size(False)
        table.set_fontsize(8)
        for (row, col), cell in table.get_celld().items():
            cell.set_linewidth(0.4)
            cell.set_edgecolor("0.75")
            if row == 0:
                cell.set_facecolor("0.93")
            if col == 0:
                cell.get_text().set_horizontalalignment("left")
                label = table_rows[row - 1][0] if row > 0 else ""
                if label in colour:  # the component's colour as in the bars
                    cell.get_text().set_color(colour[label])
    ax.set_title(f"Peak memory per device ({plan.accelerator.key})", fontsize=11)
    return fig


def plot_epochs(plan: Plan, path: Path) -> Path:
    """Epochs per source; unknown availability and zero availability are labelled, not drawn as 0."""
    fig, (ax,) = new_figure()
    sources = plan.sources
    if not sources:
        mark_empty(ax, "no sources")
    else:
        colours = colour_map(_source_names(plan))
        finite = [s.epochs for s in sources if s.epochs is not None and math.isfinite(s.epochs)]
        top = max(finite + [EPOCH_LINES[-1][0]]) * 1.15
        xs = list(range(len(sources)))
        for x, s in zip(xs, sources, strict=True):
            if s.epochs is None:
                ax.text(x, top * 0.02, "unknown", ha="center", va="bottom", fontsize=9, color="0.35", rotation=90)
                continue
            if math.isinf(s.epochs):
                ax.bar(x, top, color=colours[s.name], hatch="//", alpha=0.5, width=0.6)
                ax.text(
                    x,
                    top * 0.5,
                    "none available",
                    ha="center",
                    va="center",
                    fontsize=9,
                    rotation=90,
                    bbox={"facecolor": "white", "alpha": 0.85, "lw": 0},
                )
                continue
            ax.bar(x, s.epochs, color=colours[s.name], width=0.6)
            ax.text(x, s.epochs, f"{s.epochs:.2f}", ha="center", va="bottom", fontsize=8)
        for y, label in EPOCH_LINES:
            ax.axhline(y, color="tab:red", ls="--", lw=1.0)
            ax.text(
                1.0,
                y,
                f" {label}",
                transform=ax.get_yaxis_transform(),
                va="center",
                ha="left",
                fontsize=8,
                color="tab:red",
            )
        ax.set_ylim(0, top)
        ax.set_xlim(-0.6, len(sources) - 0.4)
        ax.set_xticks(xs, [s.name for s in sources])
        ax.set_ylabel("epochs over the run")
        ax.grid(axis="y", alpha=0.3)
    ax.set_title("Epochs per source", fontsize=11)
    save_png(fig, path)
    return Path(path)
