"""The run report's scaling-ladder section: rungs, fits, the prediction and its test, and the plot.

Called by runlib.report.run_report for a spec with a `ladder` section; reads the fit_ladder artifact's
fit.json (runlib.ladder.stage). The plot's x axis is C = 6 N D with N the non-embedding parameters the
fit uses, the compute of Hoffmann et al. 2022's frontier; the table gives the plan's FLOPs too (with
the output head and attention, which dominate at a few thousand parameters).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, NotRequired, TypedDict

from runlib.audit.render import plots
from runlib.audit.render.report import Block, Cell, Heading, Image, Para, Table
from runlib.graph.build import StageGraph
from runlib.ladder.stage import OVERALL, rung_losses
from runlib.spec.units import format_count

if TYPE_CHECKING:
    from runlib.ladder.fit import LawFit
    from runlib.report.collect import RunData

__all__ = ["CAPTION", "PLOT", "FitJson", "fit_data", "ladder_blocks", "plot_ladder", "target_measured"]

PLOT = "ladder.png"
CAPTION = (
    "Held-out loss (pooled over every source's held-out tokens) of each rung against its compute C = 6 N D "
    "(N: non-embedding parameters); circles: fitted rungs, a line per width; squares: held-out rungs with "
    "their predicted loss (cross); black: the fitted compute-optimal frontier L(N_opt(C), D_opt(C)); "
    "star: the prediction for this run with its bootstrap interval."
)


class LawJson(TypedDict):
    E: float
    A: float
    B: float
    alpha: float
    beta: float
    objective: float
    points: int


class PredictionJson(TypedDict):
    value: float
    low: float
    high: float
    resamples: int


class RungJson(TypedDict):
    name: str
    params: float
    tokens: float
    flops: float
    measured: float | None  # None: the rung is not evaluated
    predicted: float
    held_out: bool


class SeriesFitJson(TypedDict):
    law: LawJson
    prediction: PredictionJson
    rungs: list[RungJson]
    problems: NotRequired[list[str]]  # why the law is not determined by the rungs


class TargetJson(TypedDict):
    params: float
    tokens: float


class FitJson(TypedDict):
    """fit.json as this section reads it (runlib.ladder.stage.fit_ladder writes it; its docstring has all)."""

    fits: dict[str, SeriesFitJson]  # series: a source, or OVERALL (pooled)
    target: TargetJson
    skipped: NotRequired[list[str]]


def fit_data(graph: StageGraph) -> FitJson | None:
    """fit.json of the spec's fit_ladder stage, or None while it is not built."""
    nodes = graph.of("fit_ladder")
    if not nodes or not (nodes[0].dir / "fit.json").exists():
        return None
    data: FitJson = json.loads((nodes[0].dir / "fit.json").read_text())
    return data


def _f(x: float | None, spec: str = ".4f") -> str:
    return format(x, spec) if isinstance(x, (int, float)) and math.isfinite(x) else "n/a"


def _law(fit: SeriesFitJson) -> LawFit:
    from runlib.ladder.fit import LawFit  # numpy: imported only when a ladder's plot is drawn

    return LawFit(**fit["law"])


def target_measured(run: RunData) -> float | None:
    """The run's own pooled held-out loss after its last evaluated phase (ladder.train_target)."""
    for p in reversed(run.phases):
        if p.eval_data:
            return rung_losses(p.eval_data).get(OVERALL)
    return None


def ladder_blocks(run: RunData) -> list[Block]:
    """The "Scaling ladder" section of a spec with a ladder: the rungs and the fit, or how far the rungs are."""
    spec = run.spec
    ladder = spec.ladder
    assert ladder is not None  # called for a spec with a ladder only
    tokens_rule = (
        f"{', '.join(f'{k:g}' for k in ladder.tokens_per_param)} tokens per non-embedding parameter"
        if ladder.tokens_per_param
        else f"IsoFLOP budgets {', '.join(f'{c:.3g}' for c in ladder.compute_flops or [])} FLOPs"
    )
    blocks: list[Block] = [
        Heading(2, "Scaling ladder"),
        Para(
            f"Rungs: widths {', '.join(map(str, sorted(set(ladder.widths))))} at the target's aspect ratio "
            f"d_model/layers, head_dim and d_ff/d_model (Kaplan et al. 2020, section 3.1), trained on {tokens_rule}, "
            "with this run's data, tokenizer, batch, mixtures and schedule shape. Fit per series: "
            "L(N, D) = E + A/N^alpha + B/D^beta (Hoffmann et al. 2022, Approach 3: Huber loss, delta 1e-3, on "
            "log-loss, from the best of a 4,500-point grid of initialisations), N = non-embedding parameters; "
            f"the {ladder.holdout} largest-compute rung(s) are held out of the fit to test its extrapolation."
        ),
    ]
    data = fit_data(run.graph)
    if data is None:
        evals = [n for n in run.graph.of("eval_phase") if "rung" in n.params]
        done = sum(1 for n in evals if n.manifest_path.exists())
        blocks.append(Para(f"The fit is not built yet: {done} of {len(evals)} rungs evaluated."))
        return blocks
    overall = data["fits"][OVERALL]
    rows: list[tuple[Cell, ...]] = []
    for r in overall["rungs"]:
        rows.append(
            (
                r["name"],
                format_count(r["params"]),
                format_count(r["tokens"]),
                f"{r['flops']:.3g}",
                _f(r["measured"]),
                _f(r["predicted"]),
                "held out" if r["held_out"] else "fitted",
            )
        )
    blocks.append(Table(("rung", "N (non-emb.)", "tokens", "FLOPs", "measured loss", "fit's loss", "role"), rows))
    blocks.append(Para(_prediction_text(overall, data["target"], target_measured(run))))
    blocks.append(_fits_table(data))
    skipped = data.get("skipped")
    if skipped:
        blocks.append(Para("Rungs left out: " + "; ".join(skipped) + "."))
    blocks.append(Image(PLOT, "Scaling ladder", CAPTION))
    return blocks


def _prediction_text(overall: SeriesFitJson, target: TargetJson, measured: float | None) -> str:
    """The pooled fit's prediction for this run (or why it is withheld), how it did on the held-out rungs,
    and the run's own measured loss."""
    prediction = overall["prediction"]
    problems = overall.get("problems", [])
    where = f"(N = {format_count(target['params'])}, D = {format_count(target['tokens'])} tokens)"
    if problems:
        text = (
            f"No prediction of this run's held-out loss {where}: the fit's law is not determined by the rungs "
            f"({'; '.join(problems)}). Add rungs along that axis (ladder.widths or ladder.tokens_per_param)."
        )
    else:
        text = (
            f"Predicted held-out loss of this run {where}: {_f(prediction['value'])}, 95% bootstrap interval "
            f"[{_f(prediction['low'])}, {_f(prediction['high'])}] ({prediction['resamples']} resamples of the "
            "fitted rungs; the interval does not include the error of extrapolating the law)."
        )
    for r in overall["rungs"]:
        seen = r["measured"]
        if not r["held_out"] or seen is None:
            continue
        error = (r["predicted"] - seen) / seen * 100
        text += (
            f" Held-out rung {r['name']} (not seen by the fit): predicted {_f(r['predicted'])}, measured "
            f"{_f(seen)} ({error:+.1f}%)."
        )
    if measured is not None:
        text += f" This run's measured held-out loss: {_f(measured)}."
    return text


def _fits_table(data: FitJson) -> Table:
    """One row per series: the fitted law's constants and its prediction (or why it is withheld)."""
    fit_rows: list[tuple[Cell, ...]] = []
    for series, fit in data["fits"].items():
        law, p = fit["law"], fit["prediction"]
        fit_rows.append(
            (
                series,
                _f(law["E"], ".3f"),
                f"{law['A']:.3g}",
                _f(law["alpha"], ".3f"),
                f"{law['B']:.3g}",
                _f(law["beta"], ".3f"),
                "withheld" if fit.get("problems") else _f(p["value"]),
                "; ".join(fit.get("problems", [])) or f"[{_f(p['low'])}, {_f(p['high'])}]",
            )
        )
    header = ("series", "E", "A", "alpha", "B", "beta", "predicted", "95% interval (or why withheld)")
    return Table(header, fit_rows)


def plot_ladder(run: RunData, path: Path) -> Path:
    """ladder.png: each rung's held-out loss against its compute, the fitted frontier and this run's
    prediction (CAPTION)."""
    fig, (ax,) = plots.new_figure(height=5.0)
    data = fit_data(run.graph)
    if data is None:
        plots.mark_empty(ax, "the ladder's fit is not built yet")
    else:
        overall = data["fits"][OVERALL]
        law = _law(overall)
        measured_rungs = [(r, loss) for r in overall["rungs"] if (loss := r["measured"]) is not None]
        rungs = [r for r, _ in measured_rungs]
        params = sorted({r["params"] for r in rungs})
        colours = plots.colour_map([str(n) for n in params])
        for n in params:
            same = sorted(((r, loss) for r, loss in measured_rungs if r["params"] == n), key=lambda m: m[0]["tokens"])
            xs = [6 * r["params"] * r["tokens"] for r, _ in same]
            ax.plot(xs, [loss for _, loss in same], color=colours[str(n)], lw=0.8, alpha=0.7)
            for (r, loss), x in zip(same, xs, strict=True):
                marker = "s" if r["held_out"] else "o"
                ax.scatter([x], [loss], color=colours[str(n)], marker=marker, s=36, edgecolors="black", zorder=3)
                if r["held_out"]:
                    ax.scatter([x], [r["predicted"]], color="black", marker="x", s=40, zorder=4)
            ax.plot([], [], color=colours[str(n)], marker="o", label=f"N = {format_count(n)}")
        target = data["target"]
        pred = overall["prediction"]
        target_c = 6 * target["params"] * target["tokens"]
        lo = min([6 * r["params"] * r["tokens"] for r in rungs] + [target_c]) / 2
        hi = max([6 * r["params"] * r["tokens"] for r in rungs] + [target_c]) * 2
        grid = [lo * (hi / lo) ** (i / 60) for i in range(61)]
        frontier = [law.frontier(c) for c in grid]
        keep = [(c, y) for c, y in zip(grid, frontier, strict=True) if math.isfinite(y)]
        if keep:
            ax.plot(*zip(*keep, strict=True), color="black", lw=1.4, label="fitted frontier")
        if math.isfinite(pred["value"]) and not overall.get("problems"):
            err = None
            if math.isfinite(pred["low"]) and math.isfinite(pred["high"]):
                err = [[max(pred["value"] - pred["low"], 0)], [max(pred["high"] - pred["value"], 0)]]
            ax.errorbar(
                [target_c],
                [pred["value"]],
                yerr=err,
                fmt="*",
                ms=12,
                color="tab:red",
                capsize=4,
                label=f"this run: predicted {pred['value']:.3f}",
            )
        measured = target_measured(run)
        if measured is not None:
            ax.scatter(
                [target_c],
                [measured],
                marker="D",
                color="tab:red",
                edgecolors="black",
                zorder=5,
                label=f"this run: measured {measured:.3f}",
            )
        ax.set_xscale("log")
        ax.set_xlabel("compute C = 6 N D (FLOPs)")
        ax.set_ylabel("held-out loss (nats per token)")
        ax.legend(fontsize=8, loc="upper right")
    ax.set_title(f"Scaling ladder: {run.spec.name}", fontsize=11)
    plots.save_png(fig, path)
    return Path(path)
