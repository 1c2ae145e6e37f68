"""Pipeline parallelism: the model's blocks in stages over the ranks of a pipeline group.

    chunks = stage_chunks(model_spec, pp, virtual, first_layers, last_layers)   # layer ranges, in model order
    stages = [stage_module(build(), chunk, i, len(chunks)) for i, chunk in this rank's chunks]
    schedule = build_schedule(kind, stages, pp_group, micro_batches, loss_fn)

The split is Megatron-LM's (--decoder-first-pipeline-num-layers, --decoder-last-pipeline-num-layers:
the stated first and last stages, the rest evenly over the middle ones; runlib.plan.layout
pipeline_stage_layers), the schedules torch.distributed.pipelining's (GPipe: Huang et al. 2019, arXiv
1811.06965; 1F1B: Narayanan et al. 2019, PipeDream, arXiv 1806.03377 and Megatron-LM, arXiv
2104.04473 section 2.2.1; interleaved 1F1B with virtual stages: the same, section 2.2.2). Each stage
is the whole Transformer with the blocks of other stages replaced by `NotThisStage` (no parameters,
so parameter names and checkpoint keys stay the model's own: layers.7 is layers.7 on any layout), the
embeddings on the first stage only and the final norm and head on the last. Rank r holds chunks r,
r + pp, r + 2pp, ... (torchtitan's "loop" style for virtual stages).

Between stages travels one tensor, the residual stream [n, L, d] (a tensor-parallel rank's sequence
shard [n, L / tp, d] under sequence parallelism); position_ids and doc_ids reach every stage as
keyword arguments of the schedule's step, so each stage builds its own RoPE tables and mask.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

from runlib.model.transformer import Transformer
from runlib.plan.layout import pipeline_stage_layers

SCHEDULES = ("1f1b", "interleaved_1f1b", "gpipe")


class NotThisStage(nn.Module):
    """A block held by another pipeline stage: no parameters, never called (Transformer.blocks skips it)."""


def stage_chunks(
    layers: int, pipeline: int, virtual: int = 1, first: int | None = None, last: int | None = None
) -> list[range]:
    """The layer ranges of the pipeline's pipeline x virtual stages, in model order (ValueError when the
    layers do not split so: a remainder, an empty stage, or first and last adding up to more)."""
    counts = pipeline_stage_layers(layers, pipeline * virtual, first, last)
    if counts is None:
        raise ValueError(
            f"{layers} layers do not split into {pipeline * virtual} pipeline stages"
            + (f" with first {first}" if first is not None else "")
            + (f" and last {last}" if last is not None else "")
        )
    out, start = [], 0
    for n in counts:
        out.append(range(start, start + n))
        start += n
    return out


def rank_stage_indices(pp_rank: int, pipeline: int, virtual: int) -> list[int]:
    """The stages rank `pp_rank` holds: pp_rank, pp_rank + pipeline, ... (one per virtual stage)."""
    return [pp_rank + v * pipeline for v in range(virtual)]


def stage_module(model: Transformer, layers: range, is_first: bool, is_last: bool) -> Transformer:
    """`model` pruned, in place, to one stage: the blocks of `layers`; the embeddings on the first stage, the
    final norm and head on the last. Tied embeddings become two equal copies, the embedding on the first
    stage and the head on the last, whose gradients tied_gradient_sum adds (Megatron-LM's embedding group:
    megatron/core/distributed/finalize_model_grads.py, _allreduce_word_embedding_grads)."""
    for i in range(len(model.layers)):
        if i not in layers:
            model.layers[i] = NotThisStage()
    if not is_first:
        model.tok_embeddings = None  # type: ignore[assignment]  # a stage without the embedding
        model.pos_embeddings = None
        model.embedding_norm = None
        model.embedding_dropout = None
    if not is_last:
        model.norm = None  # type: ignore[assignment]  # a stage without the head
        model.lm_head = None  # type: ignore[assignment]
    return model


def tied_pair_group(mesh: Any) -> dist.ProcessGroup | None:
    """The process group of this rank's first and last pipeline stage (same data-, tensor-parallel place),
    for the tied embedding's gradient; None on a middle stage. Every rank must call it (new_group is
    collective)."""
    names = list(mesh.mesh_dim_names)
    ranks = mesh.mesh.movedim(names.index("pp"), -1).reshape(-1, mesh["pp"].size())
    mine = None
    for row in ranks.tolist():
        group = dist.new_group([row[0], row[-1]])
        if dist.get_rank() in (row[0], row[-1]):
            mine = group
    return mine


def tied_gradient_sum(stage: Transformer, group: dist.ProcessGroup | None) -> None:
    """Add the first stage's embedding gradient and the last stage's head gradient, on both: the gradient of
    the one tied matrix, so the two copies take the same update and stay equal."""
    if group is None:
        return
    module = stage.tok_embeddings if stage.tok_embeddings is not None else stage.lm_head
    grad = module.weight.grad
    if grad is None:
        return
    local = grad.to_local() if hasattr(grad, "to_local") else grad  # a sharded DTensor: its shard, same layout
    dist.all_reduce(local, group=group)


def build_schedule(
    kind: str,
    stages: Sequence[Any],
    micro_batches: int,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None,
) -> Any:
    """torch.distributed.pipelining's schedule `kind` over this rank's PipelineStage objects, with the loss
    as given (scale_grads off: the loss carries the step's normalization, runlib.train.step)."""
    if kind == "interleaved_1f1b":
        return ScheduleInterleaved1F1B(list(stages), micro_batches, loss_fn=loss_fn, scale_grads=False)
    if len(stages) != 1:
        raise ValueError(f"pipeline schedule {kind} runs one stage per rank, not {len(stages)}")
    if kind == "gpipe":
        return ScheduleGPipe(stages[0], micro_batches, loss_fn=loss_fn, scale_grads=False)
    if kind == "1f1b":
        return Schedule1F1B(stages[0], micro_batches, loss_fn=loss_fn, scale_grads=False)
    raise ValueError(f"pipeline schedule {kind!r}: runlib has {', '.join(SCHEDULES)}")


def pipeline_stage(module: nn.Module, index: int, stages: int, device: torch.device, group: dist.ProcessGroup) -> Any:
    """torch.distributed.pipelining.PipelineStage of one stage module."""
    return PipelineStage(module, index, stages, device, group=group)


_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


class PipelineForward(nn.Module):
    """The forward of the whole model through this rank's stage, for evaluation (no schedule, no backward):
    the first stage embeds, each stage sends the residual stream to the next (a header of shape and dtype,
    then the tensor, point to point over the pipeline group), the last returns the logits; the other
    stages return None. Every rank of the pipeline group must call it with the same rows."""

    def __init__(self, stage: nn.Module, group: dist.ProcessGroup) -> None:
        super().__init__()
        self.stage = stage
        self.group = group
        self.rank, self.size = dist.get_rank(group), dist.get_world_size(group)

    def forward(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor | None = None, doc_ids: torch.Tensor | None = None
    ) -> torch.Tensor | None:
        device = input_ids.device
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1], device=device).expand(input_ids.shape[0], -1)
        if self.rank == 0:
            x = input_ids
        else:
            header = torch.zeros(4, dtype=torch.long, device=device)
            dist.recv(header, group=self.group, group_src=self.rank - 1)
            x = torch.empty(tuple(header[:3].tolist()), dtype=_DTYPES[int(header[3])], device=device)
            dist.recv(x, group=self.group, group_src=self.rank - 1)
        out: torch.Tensor = self.stage(x, position_ids, doc_ids)
        if self.rank == self.size - 1:
            return out
        out = out.contiguous()
        header = torch.tensor([*out.shape, _DTYPES.index(out.dtype)], dtype=torch.long, device=device)
        dist.send(header, group=self.group, group_dst=self.rank + 1)
        dist.send(out, group=self.group, group_dst=self.rank + 1)
        return None
