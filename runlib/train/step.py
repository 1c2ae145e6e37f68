"""One optimizer step's gradients: the LR, the micro-batches, forward and backward with the step's
normalization (accumulate.py), the all-reduced loss and the gradient clip.

The update itself (Engine.step) is the loop's call, after the spike policy saw the loss (spikes.py): a
skipped batch's gradients are dropped instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from runlib.data.loader import Batch, PhaseLoader
from runlib.train.accumulate import IGNORE_INDEX, accumulate, token_losses
from runlib.train.config import TrainPhaseConfig
from runlib.train.engine import Engine


@dataclass(frozen=True)
class StepResult:
    loss: float  # the step's loss on all ranks (data.loss_normalization's mean)
    by_source: torch.Tensor  # [2, sources]: cross-entropy sum and scored tokens per source, all ranks
    scored_tokens: int  # scored tokens of the step on all ranks
    grad_norm: float  # before clipping
    lr: float
    tokens: int  # the step's tokens (sequences * seq_len), scored or not


def train_step(engine: Engine, loader: PhaseLoader, cfg: TrainPhaseConfig, data: int, tokens: int) -> StepResult:
    """Backpropagate data step `data` on this rank; `tokens`: the run's tokens before the step."""
    dp_rank, dp_size = engine.dp_rank, engine.dp_size
    batch_sequences = loader.batch_size(data)  # a batch ramp may change it within the phase
    accum = batch_sequences // (cfg.micro_batch * dp_size)  # micro-steps per update on this rank
    tokens_per_step = batch_sequences * cfg.seq_len
    # the one schedule, in tokens, across phases; at the step's end so the first update's LR is not 0
    lr = cfg.schedule.lr_at(tokens + tokens_per_step)
    follows = cfg.optimizer.weight_decay_follows_lr  # PaLM's lr^2 decay: the decay scaled as the LR is
    for group, weight_decay in zip(engine.optimizer.param_groups, engine.base_weight_decay, strict=True):
        group["lr"] = lr
        if follows:
            group["weight_decay"] = weight_decay * lr / cfg.optimizer.lr
    batches = [loader.micro_batch(data, m, dp_rank, dp_size, cfg.micro_batch) for m in range(accum)]
    by_source = torch.zeros(2, len(loader.source_names))  # [loss sum, scored tokens] per source

    def loss_sum(b: Batch) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        # one pass over the logits: the loss (CE + z-loss) and the CE per source (accumulate.py); under
        # context parallelism the logits and targets are this rank's tokens of the rows
        targets = engine.local(b.targets)
        scored = (targets != IGNORE_INDEX).sum(1, dtype=torch.float32)
        if engine.expert_load:  # the MoE losses (token means) weighted as this micro-batch's tokens are
            global_tokens = cfg.loss_normalization == "global_tokens"
            engine.set_aux_loss_scale(
                float(scored.sum()) * grad_ranks / max(total_scored, 1) if global_tokens else 1.0 / len(batches)
            )
        loss, cross_entropy = token_losses(engine.forward(b), targets, cfg.optimizer.z_loss)
        by_source[0].index_add_(0, b.source_index, cross_entropy.sum(1))
        by_source[1].index_add_(0, b.source_index, scored)
        aux = engine.aux_loss  # the MTP loss: a token mean, weighted as the tokens are
        return loss.sum() if aux is None else (loss.sum(), aux * scored.sum())

    engine.train_mode()
    # the ranks whose gradients the wrapper averages: data-parallel x context-parallel
    grad_ranks = dp_size * engine.cp_size
    # global_tokens: one token mean over the whole step on all ranks; micro_batch_mean: mean of means
    local_scored = sum(int((engine.local(b.targets) != IGNORE_INDEX).sum()) for b in batches)
    total_scored = int(engine.dp_sum(torch.tensor([float(local_scored)])).item())
    if engine.pipeline is not None:
        local_loss = pipeline_backward(engine, batches, cfg, total_scored, grad_ranks, by_source)
    else:
        local_loss = accumulate(
            batches,
            loss_sum,
            # micro_batch_mean: a context-parallel rank's share of its micro-batch's mean (whole rows' tokens)
            lambda b: b.scored_tokens / engine.cp_size,
            total_scored,
            grad_ranks,
            engine.backward,
            engine.sync_contexts(accum),
            cfg.loss_normalization,
        )
    # one all-reduce for the step's loss and the per-source sums (under a pipeline: the last stage's)
    summed = engine.dp_sum(
        torch.cat([torch.tensor([local_loss]), by_source.flatten()]), last_stage_only=engine.pipeline is not None
    )
    loss = float(summed[0])
    if cfg.loss_normalization == "micro_batch_mean":
        loss /= grad_ranks  # the mean over ranks of each rank's mean of micro-batch means
    grad_norm = engine.clip_gradients(cfg.optimizer.grad_clip)
    return StepResult(loss, summed[1:].view_as(by_source), total_scored, grad_norm, lr, tokens_per_step)


def pipeline_backward(
    engine: Engine,
    batches: list[Batch],
    cfg: TrainPhaseConfig,
    total_scored: int,
    grad_ranks: int,
    by_source: torch.Tensor,
) -> float:
    """The step's micro-batches through the pipeline schedule (runlib.model.pipeline): the last stage's loss
    of each micro-batch carries the step's normalization, as accumulate.py's; returns this rank's step loss
    (the last stage's; 0 elsewhere) and adds the last stage's per-source sums to by_source."""
    records: list[tuple[torch.Tensor, torch.Tensor]] = []
    global_tokens = cfg.loss_normalization == "global_tokens"

    def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        loss, cross_entropy = token_losses(logits, targets, cfg.optimizer.z_loss)
        scored = (targets != IGNORE_INDEX).sum(1, dtype=torch.float32)
        records.append((cross_entropy.sum(1).detach(), scored))
        if global_tokens:
            return loss.sum() * (grad_ranks / max(total_scored, 1))
        return loss.sum() / (max(float(scored.sum()), 1.0) * len(batches))

    losses: list[torch.Tensor] = []
    engine.pipeline_step(batches, loss_fn, losses)
    if not engine.is_last_stage:
        return 0.0
    # the schedule's first step also calls loss_fn once to infer the stages' shapes: the step's are the last
    for b, (cross_entropy, scored) in zip(batches, records[-len(batches) :], strict=True):
        by_source[0].index_add_(0, b.source_index, cross_entropy.cpu())
        by_source[1].index_add_(0, b.source_index, scored.cpu())
    value = float(sum(float(x.detach()) for x in losses))
    return value / grad_ranks if global_tokens else value
