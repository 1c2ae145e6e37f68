"""The model, its parallel layout, optimizer and checkpoints for one phase, as its TrainPhaseConfig says.

runlib.model.parallelize lays the model on the device mesh (TP plan, activation checkpointing, then
FSDP2 `fully_shard` with its mixed-precision policy, or DDP for sharding none); Accelerate launched the
processes and keeps the process group, the optimizer wrapper and the fp16 GradScaler.
Expert parallelism (parallelism.expert, with model.moe): the expert mesh of ep consecutive data-parallel
ranks is built before the model (runlib.model.expert_parallel), each MoE layer holds its share of the
routed experts as DTensors, and parallelize wraps them so their gradients are summed over the ranks that
hold the same experts; the clipped norm counts each expert once, and checkpoints hold whole expert tensors.
Checkpoints: inside a phase, sharded resumable states through torch.distributed.checkpoint
(runlib.train.dist_checkpoint: each rank writes its shard, any world size can read them); at the
phase's end, one consolidated file (final.pt: full model and optimizer state dicts keyed by parameter
name) that the next phase (on any layout) and the eval stage load.
"""

from __future__ import annotations

import contextlib
import math
import resource
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from accelerate import Accelerator

from runlib.data.loader import Batch
from runlib.data.shards import TokenDirs, open_split
from runlib.model.expert_parallel import build_expert_mesh
from runlib.model.parallelize import (
    build_mesh,
    clip_grad_norm_,
    data_parallel_rank_and_size,
    forward_context,
    no_sync,
    parallelize,
    pipeline_rank_and_group,
)
from runlib.model.pipeline import (
    PipelineForward,
    build_schedule,
    pipeline_stage,
    rank_stage_indices,
    rank_stage_parts,
    stage_chunks,
    tied_gradient_sum,
    tied_pair_group,
)
from runlib.model.transformer import Transformer
from runlib.train import checkpoint as ckpt
from runlib.train import dist_checkpoint as dcp_ckpt
from runlib.train.accumulate import token_loss_sum
from runlib.train.config import ParallelConfig, TrainPhaseConfig
from runlib.train.experts import ExpertLoad, moe_layers_of
from runlib.train.heldout import heldout_metrics
from runlib.train.optim import build_optimizer


def effective_parallel(parallel: ParallelConfig, world: int) -> ParallelConfig:
    """The config's layout on the processes actually launched: RUNLIB_PROCESSES may give another world
    size on one machine; model-parallel degrees stay, the data-parallel degree follows the world
    (runlib.plan.layout.Layout.on_processes)."""
    layout = parallel.layout.on_processes(world)
    if layout == parallel.layout:
        return parallel
    update = {"nodes": layout.nodes, "processes_per_node": layout.devices_per_node}
    return parallel.model_copy(update={**update, "dp_replicate": layout.dp_replicate, "dp_shard": layout.dp_shard})


def mesh_dims(parallel: ParallelConfig) -> dict[str, int]:
    return parallel.layout.degrees()


class Engine:
    def __init__(self, cfg: TrainPhaseConfig, accelerator: Accelerator) -> None:
        self.cfg, self.accelerator = cfg, accelerator
        self.rank: int = accelerator.process_index
        self.world: int = accelerator.num_processes
        self.parallel = effective_parallel(cfg.parallel, self.world)
        self.mesh = build_mesh(self.parallel)  # None on one process
        # expert parallelism: the MoE layers' routed experts split over ep of the data-parallel ranks
        ep = self.parallel.ep if cfg.model.moe is not None else 1
        self.expert_mesh = build_expert_mesh(self.mesh, ep)  # None without it
        torch.manual_seed(cfg.seed)  # after the meshes: the same initialisation on every layout
        model = Transformer(cfg.model, cfg.vocab_rows, cfg.position_rows, ep=self.expert_mesh)
        if cfg.model.position == "rope":
            model.set_rope(cfg.rope_theta, cfg.seq_len, cfg.rope_scaling)
        self.dp_rank, self.dp_size = data_parallel_rank_and_size(self.mesh)
        # pipeline parallelism: this rank's stage of the model (runlib.model.pipeline), its PipelineStage
        self.pp_rank, self.pipeline_group = pipeline_rank_and_group(self.mesh)
        self.pipeline: list[Any] | None = None  # this rank's PipelineStage objects, in schedule order
        self.parts: list[Transformer] = []  # their modules
        pp, virtual = self.parallel.pp, self.parallel.pipeline_virtual_stages
        self.stage_ids: list[int] = []
        if pp > 1:
            chunks = stage_chunks(
                cfg.model.layers,
                pp,
                virtual,
                self.parallel.pipeline_first_stage_layers,
                self.parallel.pipeline_last_stage_layers,
            )
            self.stage_ids = rank_stage_indices(self.pp_rank, pp, virtual)
            # the parts share the model's modules, so it moves to the device before they are made
            self.parts, model = rank_stage_parts(model.to(accelerator.device), chunks, self.stage_ids)
            for part in self.parts:  # in place: under a pipeline the wrapper is FSDP2 or none, never DDP
                parallelize(part, self.mesh, self.parallel, cfg.precision)
            self.model: torch.nn.Module = model  # the parts' parameters under the model's own names
        else:
            self.model = parallelize(model.to(accelerator.device), self.mesh, self.parallel, cfg.precision)
        self._schedules: dict[int, Any] = {}  # pipeline schedules by micro-batches per step
        self._loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = token_loss_sum
        # a tied embedding split over the first and last stage: two copies whose gradients are added
        self.tied_group: dist.ProcessGroup | None = None
        self.tied_copy: list[torch.Tensor] = []  # the last stage's copy: not counted twice in the gradient norm
        if pp > 1:
            assert self.pipeline_group is not None  # a pp mesh dimension has a group
            stages = pp * virtual
            self.pipeline = [
                pipeline_stage(part, s, stages, accelerator.device, self.pipeline_group)
                for part, s in zip(self.parts, self.stage_ids, strict=True)
            ]
            if cfg.model.tie_embeddings:
                self.tied_group = tied_pair_group(self.mesh)
                if self.is_last_stage:
                    self.tied_copy = [model.lm_head.weight]
        # the ranks of one row's tokens (None without context parallelism): train_step scores their share
        self.context_parallel = model.context_parallel
        self.cp_size = self.context_parallel.size if self.context_parallel is not None else 1
        # Accelerate's optimizer wrapper steps the fp16 GradScaler
        self.optimizer = accelerator.prepare(build_optimizer(self.model, cfg.optimizer, cfg.precision))
        # checkpoint.async_save: the background writer (started at the first save) and its save in flight
        self.writer: dcp_ckpt.BackgroundWriter | None = None
        self.pending: dcp_ckpt.PendingSave | None = None
        # the MoE layers' load per expert: DeepSeek-V3's bias update after each step, and the interval's log
        moe = cfg.model.moe
        self.expert_load = ExpertLoad(moe_layers_of(model), moe.bias_update_rate if moe is not None else 0.0)
        # each group's own weight decay, before any state is loaded over it (optimizer.weight_decay_follows_lr)
        self.base_weight_decay = [float(g["weight_decay"]) for g in self.optimizer.param_groups]

    def mesh_dims(self) -> dict[str, int]:
        return mesh_dims(self.parallel)

    # ---- restore

    def restore(self, init_checkpoint: Path | None, scratch: Path) -> dict[str, Any]:
        """Load the previous phase's consolidated state (into this phase's layout), then resume this
        phase's newest sharded checkpoint that verifies (dist_checkpoint.latest_checkpoint: corrupt newer
        ones are skipped with a warning) if there is one; returns the loop state to continue from (empty:
        the start of the phase)."""
        if init_checkpoint is not None:
            saved = ckpt.load(init_checkpoint)
            optimizer_state = saved.get("optimizer") if "optimizer" in self.cfg.checkpoint.state else None
            if optimizer_state is not None and self._tied_alias():
                # the one tied matrix's optimizer state, under the name the last stage's copy has
                optimizer_state = dcp_ckpt.renamed_optimizer_state(
                    optimizer_state, {v: k for k, v in self._tied_alias().items()}
                )
            dcp_ckpt.load_full_state_dicts(self.model, self.optimizer_for_state(), saved["model"], optimizer_state)
        resume = dcp_ckpt.latest_checkpoint(scratch)
        return self._load_resumable(resume) if resume is not None else {}

    def _load_resumable(self, path: Path) -> dict[str, Any]:
        extra = dcp_ckpt.load_checkpoint(path, self.model, self.optimizer_for_state(), staged=self.pipeline is not None)
        keep = set(self.cfg.checkpoint.state)
        if "rng" in keep and extra.get("rng") is not None:
            torch.set_rng_state(extra["rng"])
        if "scaler" in keep and self.accelerator.scaler is not None and extra.get("scaler"):
            self.accelerator.scaler.load_state_dict(extra["scaler"])
        state: dict[str, Any] = extra.get("state", {})
        if not {"data", "scheduler"} <= keep:  # without the data and LR position, the phase starts over
            state = {k: v for k, v in state.items() if k not in ("step", "tokens", "skipped")}
        return state

    # ---- one step

    def forward(self, b: Batch) -> torch.Tensor:
        """The logits of a micro-batch; the model keeps its auxiliary loss (`aux_loss`) and the MoE layers
        their load, which expert_load adds up. MTP modules read the targets."""
        with forward_context(self.model):
            if self.stage_model.mtp is not None:
                logits: torch.Tensor = self.model(b.input_ids, b.position_ids, b.doc_ids, b.targets)
            else:
                logits = self.model(b.input_ids, b.position_ids, b.doc_ids)
        if self.expert_load:
            self.expert_load.after_forward()
        return logits

    def set_aux_loss_scale(self, scale: float) -> None:
        """The weight of the next micro-batch's MoE balancing and z-losses in the step's loss (MoE.aux_loss_scale)."""
        for layer in self.expert_load.layers.values():
            layer.aux_loss_scale = scale

    @property
    def aux_loss(self) -> torch.Tensor | None:
        """The last forward's auxiliary loss to add to the token loss (the MTP loss), a mean over its tokens."""
        return self.stage_model.aux_loss

    def train_mode(self) -> None:
        """Training mode on the model and on each pipeline part (a part's own flag is not its holder's)."""
        self.model.train()
        for part in self.parts:
            part.train()

    def backward(self, loss: torch.Tensor) -> None:
        self.accelerator.backward(loss)

    def pipeline_step(
        self, batches: list[Batch], loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], losses: list[Any]
    ) -> None:
        """Forward and backward of the step's micro-batches through the pipeline schedule (one per number of
        micro-batches: a batch ramp changes it); the loss of the last stage's micro-batches into `losses`."""
        n = len(batches)
        if self.pipeline is None:
            raise RuntimeError("pipeline_step on a layout without pipeline parallelism")
        if n not in self._schedules:
            # the audit checks the phase's grad_accum against the schedule (RUN002); a batch ramp's smaller
            # steps are not checked there, and torch's ValueError names the count
            self._schedules[n] = build_schedule(
                self.parallel.pipeline_schedule, self.pipeline, n, lambda out, target: self._loss_fn(out, target)
            )
        self._loss_fn = loss_fn
        device = self.accelerator.device

        def rows(name: str) -> torch.Tensor:
            return torch.cat([getattr(b, name) for b in batches]).to(device)

        self._schedules[n].step(
            rows("input_ids"),
            target=rows("targets"),
            losses=losses,
            position_ids=rows("position_ids"),
            doc_ids=rows("doc_ids"),
        )
        tied_gradient_sum(self.stage_model, self.tied_group)

    @property
    def stage_model(self) -> Transformer:
        """The Transformer (or this rank's pipeline stage of it) under any wrapper."""
        inner = self.model.module if isinstance(self.model, torch.nn.parallel.DistributedDataParallel) else self.model
        assert isinstance(inner, Transformer)
        return inner

    def sync_contexts(self, accum: int) -> list[contextlib.AbstractContextManager[Any]]:
        """DDP all-reduces only on a step's last micro-batch (no_sync before it); FSDP2 reduce-scatters every
        micro-batch, which keeps its gradients sharded (runlib.model.parallelize.no_sync)."""
        return [no_sync(self.model) if m < accum - 1 else contextlib.nullcontext() for m in range(accum)]

    def local(self, rows: torch.Tensor) -> torch.Tensor:
        """This rank's tokens of rows [n, L] (all of them without context parallelism)."""
        return self.context_parallel.local(rows) if self.context_parallel is not None else rows

    @property
    def is_last_stage(self) -> bool:
        """Whether this rank computes the logits and the loss (always, without pipeline parallelism)."""
        return self.pp_rank == self.parallel.pp - 1

    def dp_sum(self, tensor: torch.Tensor, last_stage_only: bool = False) -> torch.Tensor:
        """Sum over the data-parallel and context-parallel ranks, whose numbers are of different tokens (the
        ranks of one tensor-parallel or pipeline group hold the same numbers; `last_stage_only`: the
        numbers only the last pipeline stage computed, the loss, 0 on the other stages)."""
        if self.world == 1:
            return tensor
        total: torch.Tensor = self.accelerator.reduce(tensor.clone(), reduction="sum")
        layout = self.parallel.layout
        # each data-parallel and context-parallel rank counted once
        return total / (layout.tp * (1 if last_stage_only else layout.pp))

    def clip_gradients(self, max_norm: float | None) -> float:
        if self.accelerator.scaler is not None:
            self.accelerator.unscale_gradients()
        return clip_grad_norm_(self.model, max_norm or math.inf, self.pipeline_group, self.tied_copy)

    def step(self) -> None:
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.expert_load:
            self.expert_load.after_step(self.dp_sum)

    def skip(self) -> None:
        """Drop the step's gradients (and the experts' load counted with them): the batch makes no update."""
        self.optimizer.zero_grad(set_to_none=True)
        self.expert_load.discard()

    # ---- checkpoints

    def _extra(self, state: dict[str, Any]) -> dict[str, Any]:
        keep = set(self.cfg.checkpoint.state)
        extra: dict[str, Any] = {"state": dict(state)}
        if "rng" in keep:
            extra["rng"] = torch.get_rng_state()
        if "scaler" in keep and self.accelerator.scaler is not None:
            extra["scaler"] = self.accelerator.scaler.state_dict()
        return extra

    def save_resumable(self, scratch: Path, state: dict[str, Any]) -> None:
        """A resumable checkpoint of this step; with checkpoint.async_save, its shards are written while
        training goes on, and committed by finish_saves (at the next save, a rollback or the phase's end)."""
        self.accelerator.wait_for_everyone()
        self.finish_saves(scratch)  # one write in flight at a time
        if self.cfg.checkpoint.async_save and self.writer is None:
            self.writer = dcp_ckpt.BackgroundWriter.start()
        self.pending = dcp_ckpt.save_checkpoint(
            scratch / f"step-{state['step']}",
            self.model,
            self.optimizer_for_state(),
            self._extra(state),
            staged=self.pipeline is not None,
            background=self.writer,
        )
        if self.pending is None:
            dcp_ckpt.prune_checkpoints(scratch, self.cfg.checkpoint.keep)
        self.accelerator.wait_for_everyone()

    def finish_saves(self, scratch: Path) -> None:
        """Commit the checkpoint being written in the background, if any (every rank)."""
        if self.pending is not None:
            pending, self.pending = self.pending, None
            pending.commit()
            dcp_ckpt.prune_checkpoints(scratch, self.cfg.checkpoint.keep)

    def save_final(self, path: Path, state: dict[str, Any]) -> None:
        """The consolidated end-of-phase state (checkpoint.state decides what it holds)."""
        keep = set(self.cfg.checkpoint.state) | {"model"}  # the next phase and eval need the weights
        self.accelerator.wait_for_everyone()
        model_sd, optim_sd = dcp_ckpt.full_state_dicts(
            self.model, self.optimizer_for_state(), self.pipeline_group, optimizer_alias=self._tied_alias()
        )
        if self.rank == 0:
            payload: dict[str, Any] = {"model": model_sd, **self._extra(state)}
            if "optimizer" in keep:
                payload["optimizer"] = optim_sd
            ckpt.save(path, payload)
        self.accelerator.wait_for_everyone()

    def _tied_alias(self) -> dict[str, str]:
        """The last stage's copy of a tied embedding -> the tied matrix's name in a whole model's optimizer state."""
        return {"lm_head.weight": "tok_embeddings.weight"} if self.tied_copy else {}

    def optimizer_for_state(self) -> torch.optim.Optimizer:
        # AcceleratedOptimizer -> torch optimizer
        inner: torch.optim.Optimizer = getattr(self.optimizer, "optimizer", self.optimizer)
        return inner

    def rollback(self, scratch: Path, state: dict[str, Any], rollback_steps: int | None) -> dict[str, Any]:
        """Back to the newest verified checkpoint at least rollback_steps before this step, keeping the
        offending data steps skipped from now on (the loop bounds the rollbacks: monitor.spike.max_retries)."""
        self.finish_saves(scratch)  # a checkpoint still being written is one to roll back to
        rollbacks = state["rollbacks"] + 1
        limit = state["step"] - (rollback_steps or 0)
        path = dcp_ckpt.latest_checkpoint(scratch, at_most_step=limit)
        if path is None:
            return {"rollbacks": rollbacks}  # nothing saved early enough in this phase: the skip alone applies
        restored = self._load_resumable(path)
        restored["skipped"] = sorted(set(state["skipped"]))
        restored["rollbacks"] = rollbacks
        return restored

    # ---- evaluation and measurements

    def heldout_losses(self, dirs: Mapping[str, TokenDirs], eos_id: int, max_tokens: int) -> dict[str, float]:
        out: dict[str, float] = {}
        length = self.cfg.seq_len
        for name in sorted(dirs):
            available = min(max_tokens, open_split(dirs[name], "heldout").n_tokens)
            # whole windows only: sequence parallelism splits every window's length over the tp ranks
            usable = (available - 1) // length * length + 1
            if usable <= length:
                continue  # fewer held-out tokens than one sequence: nothing comparable to report
            out[name] = heldout_metrics(self.forward_model, dirs[name], length, eos_id, 1.0, max_tokens=usable)["loss"]
        if self.pipeline_group is not None:  # the last stage computed them: every rank logs the same
            last = dist.get_global_rank(self.pipeline_group, self.parallel.pp - 1)
            box = [out]
            dist.broadcast_object_list(box, src=last, group=self.pipeline_group)
            out = box[0]
        return out

    @property
    def forward_model(self) -> torch.nn.Module:
        """The whole model's forward for evaluation: the model, or under pipeline parallelism the stages in turn."""
        if self.pipeline_group is None:
            return self.model
        return PipelineForward(self.parts, self.stage_ids, len(self.stage_ids) * self.parallel.pp, self.pipeline_group)

    def measurements(self, seconds: float, tokens: int, cfg: TrainPhaseConfig) -> dict[str, Any]:
        if torch.cuda.is_available() and self.accelerator.device.type == "cuda":
            peak, kind = float(torch.cuda.max_memory_allocated()), "cuda_max_memory_allocated"
        else:
            peak, kind = float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024), "cpu_max_rss"
        peaks: list[float | None] = [peak]
        if dist.is_available() and dist.is_initialized():
            peaks = [None] * self.world
            dist.all_gather_object(peaks, peak)
        tokens_per_s = tokens / seconds if seconds > 0 else 0.0
        return {
            "world": self.world,
            "mesh": self.mesh_dims(),
            "seconds": seconds,
            "tokens": tokens,
            "tokens_per_s": tokens_per_s,
            "mfu": tokens_per_s * cfg.estimates.flops_per_token / (cfg.estimates.peak_flops_per_device * self.world),
            "peak_memory_bytes": peaks,
            "memory_kind": kind,
            "memory_estimate_bytes": cfg.estimates.memory_bytes_per_device,
        }
