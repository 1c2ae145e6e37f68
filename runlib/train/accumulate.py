"""Gradient accumulation whose loss is the token mean over the whole optimizer step.

The intended loss of one update is sum(token losses) / (scored tokens of all micro-batches on all
ranks), so each micro-batch backpropagates its *summed* token loss divided by that one total
(handout #16, section 4.2). Averaging micro-batch means instead weights a token of a short
micro-batch more than one of a long micro-batch (section 7.1: gradient 32/3 instead of 15).
DDP averages gradients over ranks, so each rank scales its contribution by the world size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch
import torch.nn.functional as F


def token_loss_sum(logits: torch.Tensor, targets: torch.Tensor, z_loss: float = 0.0) -> torch.Tensor:
    """Sum of cross-entropy over scored targets (-100 ignored), plus z_loss * sum(log Z^2) (PaLM)."""
    flat_logits = logits.reshape(-1, logits.size(-1)).float()
    flat_targets = targets.reshape(-1)
    loss = F.cross_entropy(flat_logits, flat_targets, ignore_index=-100, reduction="sum")
    if z_loss:
        scored = flat_targets != -100
        log_z = torch.logsumexp(flat_logits[scored], dim=-1)
        loss = loss + z_loss * (log_z**2).sum()
    return loss


def accumulate(
    micro_batches: Sequence,
    loss_sum: Callable[[object], torch.Tensor],
    scored: Callable[[object], int],
    total_scored: int | None = None,
    world_size: int = 1,
    backward: Callable[[torch.Tensor], None] = lambda t: t.backward(),
    contexts: Iterable | None = None,
) -> float:
    """Backpropagate every micro-batch's summed loss / the step's scored tokens; return the step loss.

    total_scored: scored tokens of the whole step on all ranks (default: these micro-batches').
    contexts: one context manager per micro-batch (e.g. DDP no_sync for all but the last)."""
    total = total_scored if total_scored is not None else sum(scored(mb) for mb in micro_batches)
    if total <= 0:
        return 0.0
    contexts = list(contexts) if contexts is not None else [None] * len(micro_batches)
    step_loss = 0.0
    for mb, ctx in zip(micro_batches, contexts, strict=True):
        if ctx is None:
            value = loss_sum(mb)
            backward(value * (world_size / total))
        else:
            with ctx:
                value = loss_sum(mb)
                backward(value * (world_size / total))
        step_loss += float(value.detach()) / total
    return step_loss
