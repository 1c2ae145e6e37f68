"""The experts' load over a training step: counted per MoE layer over the step's micro-batches, summed over
the data-parallel ranks, then used twice: DeepSeek-V3's auxiliary-loss-free balancing moves each layer's
expert bias by moe.bias_update_rate against its load after the optimizer step (arXiv 2412.19437 section
2.1.2: "at the end of each step"), and the interval's load per expert is logged (metrics.jsonl's
expert_load: each layer's share of the assignments per expert; MLflow's train/expert_load/<layer>/<expert>).

A skipped batch (monitor.spike) makes no update: its counts are dropped with its gradients (`discard`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from runlib.model.moe import MoE, update_expert_bias


def moe_layers_of(model: nn.Module) -> dict[str, MoE]:
    """The MoE modules of a model by their module names ("layers.3.mlp", "mtp.layers.0.block.mlp")."""
    return {name: m for name, m in model.named_modules() if isinstance(m, MoE)}


class ExpertLoad:
    """Per-expert assignment counts of the MoE layers: the step's (for the bias update) and the interval's
    (for the log)."""

    def __init__(self, layers: dict[str, MoE], bias_update_rate: float) -> None:
        self.layers, self.rate = layers, bias_update_rate
        self.step_counts: dict[str, torch.Tensor] = {}
        self.interval_counts: dict[str, torch.Tensor] = {}

    def __bool__(self) -> bool:
        return bool(self.layers)

    def after_forward(self) -> None:
        """Add each layer's counts of the forward just run (one micro-batch on this rank)."""
        for name, layer in self.layers.items():
            counts = layer.tokens_per_expert.detach().to("cpu", torch.float64)
            self.step_counts[name] = self.step_counts.get(name, torch.zeros_like(counts)) + counts

    def discard(self) -> None:
        """A batch that makes no update: its counts go with it."""
        self.step_counts = {}

    def after_step(self, dp_sum: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """The step's counts summed over the data-parallel ranks (`dp_sum`), then each layer's bias moved
        against its load (moe.bias_update_rate; every rank moves its copy alike) and the counts added to the
        interval's."""
        if not self.step_counts:
            return
        names = list(self.step_counts)
        summed = dp_sum(torch.stack([self.step_counts[n] for n in names]))
        for name, counts in zip(names, summed, strict=True):
            if self.rate > 0:
                update_expert_bias(self.layers[name].router, counts, self.rate)
            self.interval_counts[name] = self.interval_counts.get(name, torch.zeros_like(counts)) + counts
        self.step_counts = {}

    def interval_record(self) -> dict[str, list[float]]:
        """Each layer's share of the interval's assignments per expert (1 / experts each when balanced);
        the interval starts over."""
        record = {
            name: [round(float(c), 6) for c in counts / counts.sum().clamp(min=1)]
            for name, counts in self.interval_counts.items()
        }
        self.interval_counts = {}
        return record
