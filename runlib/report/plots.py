"""The run report's plots: loss, learning rate and throughput against tokens seen, one PNG each.

Drawn with the audit plots' helpers (runlib.audit.render.plots: an Agg canvas, no pyplot, matplotlib
imported only when a plot is drawn) from a collected run (runlib.report.collect). The loss plot draws the
raw logged loss and an EMA over tokens (runlib.report.smoothing) beside it, with the uniform-guess loss
ln(vocabulary) as a reference line; the LR plot draws the logged LR over the plan's schedule.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from runlib.audit.render import plots as audit_plots
from runlib.report.collect import JsonObject, RunData, is_number, json_object
from runlib.report.curation_section import PLOT as QUALITY_PLOT
from runlib.report.curation_section import plot_quality
from runlib.report.experts_section import PLOT as EXPERT_PLOT
from runlib.report.experts_section import plot_expert_load
from runlib.report.ladder_section import PLOT as LADDER_PLOT
from runlib.report.ladder_section import plot_ladder
from runlib.report.smoothing import ema_over_tokens
from runlib.spec.units import format_count

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "PLOTS",
    "PLOTTERS",
    "SMOOTH_HALF_LIFE_FRACTION",
    "draw_lr",
    "plot_loss",
    "plot_lr",
    "plot_throughput",
    "smoothed_loss",
    "smoothing_half_life_tokens",
    "write_plots",
]

# the smoothed loss curve's memory: an EMA over tokens with a half-life of 2% of the run's tokens
# (a 2M-token run: 41K tokens, 10 steps of 4Ki; a 2T-token run: 40B tokens), restarted at each
# phase so a phase's new data or context length is not blurred into the previous phase's curve
SMOOTH_HALF_LIFE_FRACTION = 0.02

# (file, title, caption): the report shows the plots in this order.
PLOTS = (
    (
        "loss.png",
        "Loss",
        "Training loss against tokens seen. Thin grey: the raw logged loss, one point per logging "
        "interval (the interval's mean where the log records interval_tokens, else the logged step's "
        "loss); black and coloured: the loss in total and per source smoothed by "
        "an exponential moving average over tokens (half-life 2% of the run's tokens, each record "
        "weighted by the tokens of its logging interval, restarted at each phase). Diamonds: held-out "
        "loss per source after each evaluated phase; dashed: ln(vocabulary), the loss of a uniform "
        "guess; dotted lines mark phase starts.",
    ),
    (
        "lr.png",
        "Learning rate",
        "Learning rate logged by training, against tokens seen; thin grey line: the plan's schedule, each "
        "phase's optimizer.lr_scale applied (the LR training sets).",
    ),
    (
        "throughput.png",
        "Throughput",
        "Tokens per second and MFU at each logging point: the phase's average so far (its training time "
        "only: evaluation and checkpoints excluded), against tokens seen.",
    ),
)

Getter = Callable[[JsonObject], object]  # a record's value to plot


def _loss(r: JsonObject) -> object:
    return r.get("loss")


def _finite_xy(records: list[JsonObject], get: Getter) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for r in records:
        x, y = r.get("tokens"), get(r)
        if is_number(x) and is_number(y):
            xs.append(float(x))
            ys.append(float(y))
    return xs, ys


def _extent(run: RunData, xs: list[float]) -> float:
    return max([float(run.plan.tokens_total), *xs, 1.0])


def _token_axis(ax: Axes, run: RunData, xs: list[float]) -> None:
    extent = _extent(run, xs)
    audit_plots.phase_lines(ax, audit_plots.phase_bounds_tokens(run.plan), extent)
    audit_plots.count_axis(ax.xaxis)
    ax.set_xlim(0, extent * 1.02)  # room for the markers at the run's end
    ax.grid(alpha=0.3)


def _heldout_points(run: RunData, source: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for p in run.phases:
        data = p.eval_data or {}
        loss = json_object(json_object(data.get("heldout")).get(source)).get("loss")
        tokens = data.get("tokens")
        x = float(tokens) if is_number(tokens) else float(p.plan.span.end_tokens)
        if is_number(loss):
            xs.append(x)
            ys.append(float(loss))
    return xs, ys


def smoothing_half_life_tokens(run: RunData) -> float:
    """The loss EMA's half-life in tokens: SMOOTH_HALF_LIFE_FRACTION of the run's planned tokens."""
    return max(SMOOTH_HALF_LIFE_FRACTION * float(run.plan.tokens_total), 1.0)


def smoothed_loss(run: RunData, get: Getter = _loss) -> tuple[list[float], list[float]]:
    """(tokens, EMA of get(record)) over every phase's records, the EMA restarted at each phase start."""
    half_life = smoothing_half_life_tokens(run)
    xs_out: list[float] = []
    ys_out: list[float] = []
    for p in run.phases:
        xs: list[float] = []
        ys: list[float] = []
        covered: list[float | None] = []
        for r in p.records:
            tokens, value, interval = r.get("tokens"), get(r), r.get("interval_tokens")
            if is_number(tokens) and is_number(value):
                xs.append(float(tokens))
                ys.append(float(value))
                covered.append(float(interval) if is_number(interval) else None)
        xs_out += xs
        ys_out += ema_over_tokens(xs, ys, half_life, float(p.plan.span.start_tokens), covered)
    return xs_out, ys_out


def _by_source(source: str) -> Getter:
    def get(r: JsonObject) -> object:
        return json_object(r.get("loss_by_source")).get(source)

    return get


def plot_loss(run: RunData, path: Path) -> Path:
    """loss.png: the raw and smoothed training loss, per-source EMAs, held-out points, ln(vocabulary)."""
    fig, (ax,) = audit_plots.new_figure(height=5.0)
    records = run.records()
    sources = run.source_names()
    colours = audit_plots.colour_map(sources)
    xs, ys = _finite_xy(records, _loss)
    heldout = {s: _heldout_points(run, s) for s in sources}
    if not xs and not any(hx for hx, _ in heldout.values()):
        audit_plots.mark_empty(ax, "no training metrics or evaluations yet")
    else:
        all_x = list(xs)
        half_life = format_count(smoothing_half_life_tokens(run))
        if xs:
            ax.plot(xs, ys, color="0.6", lw=0.7, marker=".", ms=2, label="train: total, raw", zorder=2)
            sx, sy = smoothed_loss(run)
            ax.plot(sx, sy, color="black", lw=1.6, label=f"train: total, EMA (half-life {half_life} tokens)", zorder=3)
        for s in sources:
            sx, sy = smoothed_loss(run, _by_source(s))
            if sx:
                ax.plot(sx, sy, color=colours[s], lw=1.0, alpha=0.9, label=f"train: {s}, EMA", zorder=2)
        for s in sources:
            hx, hy = heldout[s]
            if hx:
                all_x += hx
                ax.scatter(
                    hx, hy, marker="D", s=40, color=colours[s], edgecolors="black", zorder=4, label=f"held-out: {s}"
                )
        uniform = math.log(run.plan.vocab_rows) if run.plan.vocab_rows > 1 else None
        if uniform is not None:
            ax.axhline(
                uniform, color="tab:red", lw=0.9, ls="--", zorder=1, label=f"uniform guess ln({run.plan.vocab_rows})"
            )
        _token_axis(ax, run, all_x)
        ax.set_xlabel("tokens seen")
        ax.set_ylabel("loss (nats per token)")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    ax.set_title(f"Loss: {run.spec.name}", fontsize=11)
    audit_plots.save_png(fig, path)
    return Path(path)


def plot_lr(run: RunData, path: Path) -> Path:
    """lr.png: draw_lr, saved."""
    audit_plots.save_png(draw_lr(run), path)
    return Path(path)


def draw_lr(run: RunData) -> Figure:
    """plot_lr's figure, not yet saved: the logged LR over the plan's (plots.lr_curve, lr_scale applied)."""
    fig, (ax,) = audit_plots.new_figure()
    records = run.records()
    xs, ys = _finite_xy(records, lambda r: r.get("lr"))
    sched_x, _, sched_y = audit_plots.lr_curve(run.plan)
    if not xs and not sched_x:
        audit_plots.mark_empty(ax, "no learning rates logged and no schedule")
    else:
        if sched_x:
            ax.plot(sched_x, sched_y, color="0.45", lw=0.8, label="plan schedule", zorder=2)
        if xs:
            ax.plot(xs, ys, color="tab:blue", lw=1.6, marker=".", ms=3, label="logged", zorder=3)
        else:
            ax.text(0.5, 0.5, "no learning rate logged yet", ha="center", transform=ax.transAxes, color="0.4")
        _token_axis(ax, run, xs)
        top = max([*ys, *sched_y, 0.0])
        ax.set_ylim(0, top * 1.08 or 1.0)
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
        ax.set_xlabel("tokens seen")
        ax.set_ylabel("learning rate")
        ax.legend(fontsize=8, loc="lower left")
    ax.set_title("Learning rate: logged and planned", fontsize=11)
    return fig


def plot_throughput(run: RunData, path: Path) -> Path:
    """throughput.png: tokens per second (top) and MFU (bottom), each the phase's average so far."""
    fig, (ax_t, ax_m) = audit_plots.new_figure(rows=2, height=6.0)
    records = run.records()
    tx, ty = _finite_xy(records, lambda r: r.get("tokens_per_s"))
    mx, my = _finite_xy(records, lambda r: r.get("mfu"))
    for ax, x, y, label, colour in (
        (ax_t, tx, ty, "tokens / s", "tab:green"),
        (ax_m, mx, my, "MFU", "tab:purple"),
    ):
        if not x:
            audit_plots.mark_empty(ax, f"no {label} logged yet")
            continue
        ax.plot(x, y, color=colour, lw=1.2, marker=".", ms=4)
        _token_axis(ax, run, x)
        ax.set_ylim(bottom=0, top=max(y) * 1.15 or 1.0)
        ax.set_ylabel(label)
    if ty:
        audit_plots.count_axis(ax_t.yaxis)
    ax_m.set_xlabel("tokens seen")
    ax_t.set_title("Throughput: the phase's average so far", fontsize=11)
    audit_plots.save_png(fig, path)
    return Path(path)


PLOTTERS: dict[str, Callable[[RunData, Path], Path]] = {
    "loss.png": plot_loss,
    "lr.png": plot_lr,
    "throughput.png": plot_throughput,
}


def write_plots(run: RunData, out_dir: Path) -> list[Path]:
    """Every plot of PLOTS into out_dir (by PLOTTERS), then the ladder's for a spec with a ladder, the
    quality scores' for a spec with quality filters and the expert load for a mixture of experts."""
    paths = [PLOTTERS[name](run, Path(out_dir) / name) for name, _, _ in PLOTS]
    if run.spec.ladder is not None:
        paths.append(plot_ladder(run, Path(out_dir) / LADDER_PLOT))
    if run.graph.of("filter_quality"):
        paths.append(plot_quality(run, Path(out_dir) / QUALITY_PLOT))
    if run.spec.model.moe is not None:
        paths.append(plot_expert_load(run, Path(out_dir) / EXPERT_PLOT))
    return paths
