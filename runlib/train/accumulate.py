"""Gradient accumulation whose loss is the token mean over the whole optimizer step.

The intended loss of one update is sum(token losses) / (scored tokens of all micro-batches on all
ranks), so each micro-batch backpropagates its *summed* token loss divided by that one total
(handout #16, section 4.2). Averaging micro-batch means instead weights a token of a short
micro-batch more than one of a long micro-batch (section 7.1: gradient 32/3 instead of 15).
DDP averages gradients over ranks, so each rank scales its contribution by the world size.

data.loss_normalization: micro_batch_mean enacts that other rule on purpose (each micro-batch's own
token mean, averaged over the step's micro-batches and ranks: what many trainers do by default);
global_tokens (the default) is the token mean above.
"""

from __future__ import annotations

import contextlib
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
    normalization: str = "global_tokens",
) -> float:
    """Backpropagate every micro-batch's loss with the step's normalization; return this rank's step loss.

    global_tokens: each micro-batch's summed loss / the step's scored tokens on all ranks (total_scored,
    default: these micro-batches'); micro_batch_mean: each micro-batch's token mean / the micro-batches
    on this rank (every rank has as many). world_size: ranks whose gradients the data-parallel wrapper
    averages. contexts: one context manager per micro-batch (e.g. DDP no_sync for all but the last)."""
    if normalization not in ("global_tokens", "micro_batch_mean"):
        raise ValueError(f"loss normalization must be global_tokens or micro_batch_mean, not {normalization!r}")
    contexts = list(contexts) if contexts is not None else [None] * len(micro_batches)
    if normalization == "global_tokens":
        total = total_scored if total_scored is not None else sum(scored(mb) for mb in micro_batches)
        if total <= 0:
            return 0.0
        scales = [world_size / total] * len(micro_batches)
    else:  # each micro-batch's mean; the wrapper's average over ranks completes the mean of means
        scales = [1.0 / (max(scored(mb), 1) * len(micro_batches)) for mb in micro_batches]
    step_loss = 0.0
    for mb, ctx, scale in zip(micro_batches, contexts, scales, strict=True):
        with ctx if ctx is not None else contextlib.nullcontext():
            value = loss_sum(mb)
            backward(value * scale)
        step_loss += float(value.detach()) * (scale / world_size if normalization == "global_tokens" else scale)
    return step_loss
