"""Gradient accumulation whose loss is the token mean over the whole optimizer step.

The intended loss of one update is sum(token losses) / (scored tokens of all micro-batches on all
ranks), so each micro-batch backpropagates its *summed* token loss divided by that one total
(handout #16, section 4.2). Averaging micro-batch means instead weights a token of a short
micro-batch more than one of a long micro-batch (section 7.1: gradient 32/3 instead of 15).
DDP averages gradients over ranks, so each rank scales its contribution by the world size.

data.loss_normalization: micro_batch_mean enacts that other rule on purpose (each micro-batch's own
token mean, averaged over the step's micro-batches and ranks: what many trainers do by default);
global_tokens (the default) is the token mean above.

Token losses (`token_losses`): one pass over the logits gives every token's cross-entropy and z-loss
from one log-partition log Z = logsumexp(logits): CE = log Z - logit[target], z-loss = z * (log Z)^2
(PaLM, Chowdhery et al. 2022, arXiv 2204.02311, section 5). The loop reports the same per-token CE per
source, so no second cross-entropy runs, and no [N, V] copy is made (no boolean-mask indexing, no
transpose). The gradient is written out (`_TokenLosses.backward`): softmax * g (1 + 2 z log Z), minus g
at the target: one [N, V] tensor, where autograd through logsumexp and gather builds three. Both passes
walk the logits in row chunks of about CHUNK_ELEMENTS, so the temporaries stay one chunk whatever the
vocabulary, and on a CPU a chunk stays in cache (one core, 2048 x 4096 fp32: 16 ms chunked against
36 ms for one whole-tensor logsumexp).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import torch

MicroBatch = TypeVar("MicroBatch")

IGNORE_INDEX = -100  # targets that score nothing (padding, masked document boundaries)
CHUNK_ELEMENTS = {"cpu": 1 << 19, "cuda": 1 << 26}  # logits per chunk: 2 MiB (in cache) / 256 MiB of fp32


def _rows_per_chunk(vocab: int, device: torch.device) -> int:
    return max(1, CHUNK_ELEMENTS.get(device.type, CHUNK_ELEMENTS["cuda"]) // max(vocab, 1))


class _TokenLosses(torch.autograd.Function):
    """(loss, cross_entropy) per row of logits [N, V] (fp32) for targets [N]; loss = CE + z (log Z)^2,
    both 0 where the target is IGNORE_INDEX; cross_entropy is not differentiable (reporting only)."""

    @staticmethod
    def forward(
        ctx: Any, logits: torch.Tensor, targets: torch.Tensor, z_loss: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        rows, vocab = logits.shape
        log_z = torch.empty(rows, dtype=logits.dtype, device=logits.device)
        step = _rows_per_chunk(vocab, logits.device)
        for i in range(0, rows, step):
            torch.logsumexp(logits[i : i + step], dim=-1, out=log_z[i : i + step])
        scored = targets != IGNORE_INDEX
        # other out-of-range targets still fail in gather, as in F.cross_entropy
        target_logit = logits.gather(1, torch.where(scored, targets, 0).unsqueeze(1)).squeeze(1)
        cross_entropy = torch.where(scored, log_z - target_logit, 0.0)
        loss = cross_entropy + z_loss * torch.where(scored, log_z * log_z, 0.0) if z_loss else cross_entropy.clone()
        ctx.save_for_backward(logits, targets, log_z)
        ctx.z_loss = z_loss
        ctx.mark_non_differentiable(cross_entropy)
        return loss, cross_entropy

    @staticmethod
    def backward(
        ctx: Any, grad_loss: torch.Tensor, _grad_cross_entropy: torch.Tensor
    ) -> tuple[torch.Tensor, None, None]:
        logits, targets, log_z = ctx.saved_tensors
        scored = targets != IGNORE_INDEX
        g = torch.where(scored, grad_loss, 0.0)
        # d(log Z)/d logits = softmax; d CE = softmax - onehot(target); d (log Z)^2 = 2 log Z softmax
        coef = g * (1.0 + 2.0 * ctx.z_loss * log_z) if ctx.z_loss else g
        grad = torch.empty_like(logits)
        rows, vocab = logits.shape
        step = _rows_per_chunk(vocab, logits.device)
        for i in range(0, rows, step):
            part = grad[i : i + step]
            torch.sub(logits[i : i + step], log_z[i : i + step, None], out=part)
            part.exp_().mul_(coef[i : i + step, None])
        grad.scatter_add_(1, torch.where(scored, targets, 0).unsqueeze(1), -g.unsqueeze(1))
        return grad, None, None


def token_losses(logits: torch.Tensor, targets: torch.Tensor, z_loss: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, cross_entropy), each shaped like targets: per-token CE plus z_loss * (log Z)^2 (PaLM), and
    the CE alone (no gradient: for per-source reporting); 0 where the target is -100. Half-precision
    logits [..., V] are read in float32 (the model's output already is fp32: no copy)."""
    flat = logits.reshape(-1, logits.size(-1))
    if flat.dtype in (torch.float16, torch.bfloat16):
        flat = flat.float()
    loss, cross_entropy = _TokenLosses.apply(flat, targets.reshape(-1), float(z_loss))  # type: ignore[no-untyped-call]
    return loss.view(targets.shape), cross_entropy.view(targets.shape)


def token_loss_sum(logits: torch.Tensor, targets: torch.Tensor, z_loss: float = 0.0) -> torch.Tensor:
    """Sum of cross-entropy over scored targets (-100 ignored), plus z_loss * sum(log Z^2) (PaLM)."""
    return token_losses(logits, targets, z_loss)[0].sum()


def accumulate(
    micro_batches: Sequence[MicroBatch],
    loss_sum: Callable[[MicroBatch], torch.Tensor | tuple[torch.Tensor, torch.Tensor]],
    scored: Callable[[MicroBatch], float],
    total_scored: int | None = None,
    world_size: int = 1,
    backward: Callable[[torch.Tensor], None] = torch.autograd.backward,
    contexts: Iterable[contextlib.AbstractContextManager[Any] | None] | None = None,
    normalization: str = "global_tokens",
) -> float:
    """Backpropagate every micro-batch's loss with the step's normalization; return this rank's step loss.

    global_tokens: each micro-batch's summed loss / the step's scored tokens on all ranks (total_scored,
    default: these micro-batches'); micro_batch_mean: each micro-batch's token mean / the micro-batches
    on this rank (every rank has as many). world_size: ranks whose gradients the data-parallel wrapper
    averages. contexts: one context manager per micro-batch (e.g. DDP no_sync for all but the last).
    loss_sum may return (token loss sum, auxiliary loss): both are backpropagated with the micro-batch's
    scale, and the step loss reports the first only (an MoE's balancing loss, the MTP loss)."""
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
            out = loss_sum(mb)
            value, extra = out if isinstance(out, tuple) else (out, None)
            backward((value + extra) * scale if extra is not None else value * scale)
        step_loss += float(value.detach()) * (scale / world_size if normalization == "global_tokens" else scale)
    return step_loss
