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

from collections.abc import Callable, Collection, Sequence
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


def stage_module(model: Transformer, layers: Collection[int], is_first: bool, is_last: bool) -> Transformer:
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


def _sharing_part(model: Transformer) -> Transformer:
    """A second Transformer object over `model`'s modules, parameters and buffers, with registries of its
    own (hooks included, so FSDP2's root hooks on one part do not fire on another) and its own layer list:
    pruning it leaves `model` as it was."""
    part = Transformer.__new__(Transformer)
    nn.Module.__init__(part)
    registries = set(part.__dict__)
    for key, value in model.__dict__.items():
        if key not in registries:
            part.__dict__[key] = value
    part._parameters.update(model._parameters)
    part._buffers.update(model._buffers)
    part._non_persistent_buffers_set.update(model._non_persistent_buffers_set)
    part._modules.update(model._modules)
    part.layers = nn.ModuleList(list(model.layers))
    return part


def rank_stage_parts(
    model: Transformer, chunks: Sequence[range], stage_ids: Sequence[int]
) -> tuple[list[Transformer], Transformer]:
    """This rank's stages of `model` (`stage_ids` into `chunks`, in schedule order) and the module that holds
    them all under the model's own parameter names, for the optimizer, the gradient norm and the
    checkpoints. One stage: `model` pruned in place, both. Several (interleaved 1F1B's virtual stages):
    each a part sharing `model`'s modules (_sharing_part) pruned to its chunk, and `model` pruned to their
    union: embeddings when this rank holds the first stage, the head when it holds the last."""
    last = len(chunks) - 1
    if len(stage_ids) == 1:
        i = stage_ids[0]
        stage = stage_module(model, chunks[i], i == 0, i == last)
        return [stage], stage
    parts = [stage_module(_sharing_part(model), chunks[i], i == 0, i == last) for i in stage_ids]
    union = {layer for i in stage_ids for layer in chunks[i]}
    holder = stage_module(model, union, 0 in stage_ids, last in stage_ids)
    return parts, holder


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
        if micro_batches < stages[0].num_stages:
            # torch's Schedule1F1B refuses fewer micro-batches than stages (a batch ramp's first steps); 1F1B would
            # hold all of them in flight then, as GPipe does, and the arithmetic is the same
            return ScheduleGPipe(stages[0], micro_batches, loss_fn=loss_fn, scale_grads=False)
        return Schedule1F1B(stages[0], micro_batches, loss_fn=loss_fn, scale_grads=False)
    raise ValueError(f"pipeline schedule {kind!r}: runlib has {', '.join(SCHEDULES)}")


def pipeline_stage(module: nn.Module, index: int, stages: int, device: torch.device, group: dist.ProcessGroup) -> Any:
    """torch.distributed.pipelining.PipelineStage of one stage module."""
    return PipelineStage(module, index, stages, device, group=group)


_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


class PipelineForward(nn.Module):
    """The forward of the whole model through this rank's stages, for evaluation (no schedule, no backward):
    stage 0 embeds, each stage sends the residual stream to the next stage's rank (a header of shape and
    dtype, then the tensor, point to point over the pipeline group), the last stage returns the logits;
    the other ranks return None. Stage s is on rank s mod pipeline (rank_stage_indices), so the stages run
    one after another around the ranks. Every rank of the pipeline group must call it with the same rows."""

    def __init__(
        self, parts: Sequence[nn.Module], stage_ids: Sequence[int], stages: int, group: dist.ProcessGroup
    ) -> None:
        super().__init__()
        self.parts = nn.ModuleList(parts)
        self.stage_ids, self.stages, self.group = list(stage_ids), stages, group
        self.size = dist.get_world_size(group)

    def forward(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor | None = None, doc_ids: torch.Tensor | None = None
    ) -> torch.Tensor | None:
        device = input_ids.device
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1], device=device).expand(input_ids.shape[0], -1)
        for part, s in zip(self.parts, self.stage_ids, strict=True):
            x = input_ids if s == 0 else self._receive((s - 1) % self.size, device)
            out: torch.Tensor = part(x, position_ids, doc_ids)
            if s == self.stages - 1:
                return out
            self._send(out.contiguous(), (s + 1) % self.size)
        return None

    def _receive(self, source: int, device: torch.device) -> torch.Tensor:
        header = torch.zeros(4, dtype=torch.long, device=device)
        dist.recv(header, group=self.group, group_src=source)
        x = torch.empty(tuple(header[:3].tolist()), dtype=_DTYPES[int(header[3])], device=device)
        dist.recv(x, group=self.group, group_src=source)
        return x

    def _send(self, out: torch.Tensor, target: int) -> None:
        header = torch.tensor([*out.shape, _DTYPES.index(out.dtype)], dtype=torch.long, device=out.device)
        dist.send(header, group=self.group, group_dst=target)
        dist.send(out, group=self.group, group_dst=target)
