"""The run report's "Expert load" section for a mixture of experts (model.moe): how evenly each MoE layer's
router spread its assignments over the experts, from the training log's expert_load records
(runlib.train.experts: each layer's share of the logging interval's assignments per expert).

The imbalance max/mean is 1 for a perfectly balanced layer and `experts` when one expert takes
everything; balancing (moe.aux_loss, DeepSeek-V3's moe.bias_update_rate) should hold it near 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from runlib.audit.render import plots
from runlib.audit.render.report import Block, Heading, Image, Para
from runlib.report.collect import JsonObject, is_number, json_object

if TYPE_CHECKING:
    from runlib.report.collect import RunData

PLOT = "expert_load.png"
CAPTION = (
    "Top: each MoE layer's imbalance, max over mean of its experts' shares of the assignments in each "
    "logging interval (1: balanced), against tokens seen. Bottom: the last interval's share per expert "
    "(columns) of each layer (rows); 1 / experts each when balanced."
)


def load_series(records: list[JsonObject]) -> dict[str, list[tuple[float, list[float]]]]:
    """{layer: [(tokens, shares per expert)]} from the records that carry an expert_load."""
    series: dict[str, list[tuple[float, list[float]]]] = {}
    for r in records:
        tokens = r.get("tokens")
        if not is_number(tokens):
            continue
        for layer, shares in json_object(r.get("expert_load")).items():
            if isinstance(shares, list) and shares and all(is_number(v) for v in shares):
                series.setdefault(str(layer), []).append((float(tokens), [float(v) for v in shares]))
    return series


def imbalance(shares: list[float]) -> float:
    """max / mean of the experts' shares (1 when balanced)."""
    total = sum(shares)
    return max(shares) * len(shares) / total if total > 0 else 1.0


def plot_expert_load(run: RunData, path: Path) -> Path:
    """expert_load.png (CAPTION)."""
    fig, (top, bottom) = plots.new_figure(rows=2, height=7.0)
    series = load_series(run.records())
    if not series:
        plots.mark_empty(top, "no expert load logged yet")
        plots.mark_empty(bottom, "no expert load logged yet")
    else:
        for layer, points in series.items():
            top.plot([t for t, _ in points], [imbalance(s) for _, s in points], lw=1.2, marker=".", ms=3, label=layer)
        top.axhline(1.0, color="0.5", lw=0.8, ls="--")
        top.set_ylabel("max / mean load")
        top.set_xlabel("tokens seen")
        plots.count_axis(top.xaxis)
        top.legend(fontsize=7, loc="upper right")
        layers = list(series)
        width = max(len(series[name][-1][1]) for name in layers)
        grid = [series[name][-1][1] + [float("nan")] * (width - len(series[name][-1][1])) for name in layers]
        image = bottom.imshow(grid, aspect="auto", cmap="viridis", interpolation="nearest")
        bottom.set_yticks(range(len(layers)), layers, fontsize=7)
        bottom.set_xlabel("expert")
        bottom.set_xticks(range(0, width, max(1, width // 16)))  # experts are whole numbers
        fig.colorbar(image, ax=bottom, label="share of assignments")
    top.set_title("Expert load per MoE layer", fontsize=11)
    plots.save_png(fig, path)
    return Path(path)


def expert_blocks(run: RunData) -> list[Block]:
    """The section, for a spec with model.moe: the balancing as written and the plot."""
    moe = run.spec.model.moe
    if moe is None:
        return []
    rules = [
        f"an auxiliary loss of {moe.aux_loss:g} ({moe.aux_loss_scope.replace('_', '-')})" if moe.aux_loss else "",
        f"DeepSeek-V3's bias update at {moe.bias_update_rate:g} per step" if moe.bias_update_rate else "",
        f"router z-loss {moe.z_loss:g}" if moe.z_loss else "",
    ]
    written = ", ".join(r for r in rules if r) or "no balancing"
    return [
        Heading(2, "Expert load"),
        Para(f"{moe.experts} routed experts, top-{moe.top_k}, balanced by {written}."),
        Image(PLOT, "Expert load", CAPTION),
    ]
