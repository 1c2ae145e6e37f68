"""The parallel layout of one training phase, in one place: degrees, world, device mesh, who shards what,
and what runlib's trainer can enact of it.

    layout = build_layout(settings.parallelism, nodes=hw.nodes, devices_per_node=hw.devices_per_node)
    layout.data_parallel, layout.model_parallel     # dp_replicate x dp_shard, tp x pp x cp
    layout.mesh_dim_names, layout.mesh_shape        # the DeviceMesh runlib.model.parallelize builds
    layout.shards("optimizer_states")               # ranks one copy of a state is split over
    layout.refusals("h100-sxm", model, seq_len)     # RUN001-RUN005: field, value, reason, fix

After torchtitan's ParallelDims (pytorch/torchtitan torchtitan/distributed/parallel_dims.py @
73bb964d8f66f585d977b40fe3de88301cdd03cd): degrees dp_replicate, dp_shard, cp, tp, pp, their mesh in the
order pp, dp_replicate, dp_shard, cp, tp (size-1 dimensions dropped), the flattened "dp" of the
data-parallel dimensions (which slice of the batch a rank reads), and states sharded over dp_shard x cp
(torchtitan's dp_shard_cp: context-parallel ranks hold different tokens of the same sequences, so they
shard the model states with the data-parallel ranks; Megatron-LM's data-parallel group with context
parallelism). ep (expert parallelism, parallelism.expert) borrows data-parallel and context-parallel ranks as
torchtitan's does (ep divides dp_shard x cp there; here the plan accepts any divisor of dp x cp, and the
MOE checks report the rest) and multiplies no degree into the world: each MoE layer's routed experts are
split over ep ranks, their states sharded over what is left of the shard group (expert_shards).

Unlike torchtitan's, a layout built from a spec need not fill its devices: the data-parallel degree is
devices // (tp x pp x cp), at least 1, and a remainder idles (PAR001 reports it); the trainer's mesh
checks the product against the launched world (`world_errors`). Names are tp/pp/cp throughout, as the
stage config (runlib.train.config.ParallelConfig) and the mesh spell them; the spec's fields stay
parallelism.tensor/pipeline/context. Pure: no torch, no RunSpec (plan sits below train and model).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from typing import Literal

from runlib.spec.models import ModelSpec, ParallelismSpec, Sharding

State = Literal["weights", "master_weights", "gradients", "optimizer_states"]
STATES: tuple[State, ...] = ("weights", "master_weights", "gradients", "optimizer_states")

# the layouts built with FSDP2's fully_shard (runlib.model.parallelize)
SHARDED: tuple[Sharding, ...] = ("zero1", "zero2", "fsdp", "hsdp")
# which model states each layout splits over its shard group, as planned (ZeRO, Rajbhandari et al. 2019,
# arXiv 1910.02054, section 5: stage 1 P_os the optimizer states with the fp32 master copy, stage 2 P_os+g
# also the gradients, stage 3 P_os+g+p also the weights; hsdp is stage 3 within a node, Zhao et al. 2023,
# arXiv 2304.11277, section 3.2.1). runlib's trainer enacts zero1 as zero2 (FSDP2 has no ZeRO-1 layout),
# which holds less than this plans, never more (runlib.model.parallelize's docstring)
SHARDED_STATES: Mapping[Sharding, frozenset[State]] = {
    "none": frozenset(),
    "zero1": frozenset({"master_weights", "optimizer_states"}),
    "zero2": frozenset({"master_weights", "optimizer_states", "gradients"}),
    "fsdp": frozenset(STATES),
    "hsdp": frozenset(STATES),
}
# FSDP2's reshard_after_forward per sharded layout: ZeRO-3 frees the gathered weights after the forward and
# gathers them again for the backward; zero1/zero2 keep them gathered to the end of the backward
RESHARD_AFTER_FORWARD: Mapping[Sharding, bool] = {"zero1": False, "zero2": False, "fsdp": True, "hsdp": True}
MESH_ORDER = ("pp", "dp_replicate", "dp_shard", "cp", "tp")  # torchtitan's ParallelDims.build_mesh
Wrapper = Literal["none", "fully_shard", "replicate", "ddp"]


@dataclass(frozen=True, slots=True)
class Refusal:
    """A spec value the trainer cannot enact on the run's hardware."""

    code: str  # the audit check that reports it (RUN001...)
    field: str  # the spec field, relative to the run: "parallelism.context", "precision.compute"
    value: object  # the refused value
    reason: str  # why the trainer cannot enact it here
    fix: str  # what to write instead

    def describe(self) -> str:
        return f"{self.code} {self.field}: {self.value}: {self.reason}; fix: {self.fix}"


def divisors_above_one(g: int) -> list[int]:
    """The divisors of g above 1, ascending, by trial division up to sqrt(g): the tensor degrees that
    divide heads, kv_heads, d_ff and seq_len are those of their gcd (a loop up to heads would run a
    million times for heads: 1048576, the schema's bound)."""
    low = [d for d in range(1, math.isqrt(g) + 1) if g % d == 0]
    return sorted({x for d in low for x in (d, g // d) if x > 1})


def split_data_parallel(sharding: Sharding, data_parallel: int, nodes: int, shard_nodes: int = 1) -> tuple[int, int]:
    """(dp_replicate, dp_shard) of `data_parallel` ranks: none replicates (DDP), hsdp replicates across
    groups of `shard_nodes` nodes and shards within one (Zhao et al. 2023, arXiv 2304.11277, section 3.2.1;
    OLMo-core's 32B run shards over 8 nodes), the others shard over all. Where hsdp's groups do not divide
    the ranks, the split holds fewer (RUN004 refuses it)."""
    if sharding == "none":
        return data_parallel, 1
    if sharding == "hsdp":
        replicate = max(1, min(nodes // max(1, shard_nodes), data_parallel))
        return replicate, max(1, data_parallel // replicate)
    return 1, data_parallel


def data_parallel_wrapper(sharding: Sharding, dp_dims: tuple[str, ...], tp: int, pp: int = 1) -> Wrapper:
    """How runlib.model.parallelize wraps a model whose mesh has the gradient-averaging dimensions `dp_dims`
    ("dp_replicate", "dp_shard", "cp" present: Layout.gradient_dims) and tensor degree `tp`: FSDP2's
    fully_shard over them (the shard group dp_shard x cp; 2-D with dp_replicate: HSDP), FSDP2's replicate
    (DDP arithmetic for DTensor parameters or pipeline stages, or hsdp with one rank per shard group), DDP, or nothing (no
    data parallelism). ValueError: a sharded layout other than hsdp without a shard dimension
    (Layout.world_errors says so first)."""
    if not dp_dims:
        return "none"
    if sharding in SHARDED and ("dp_shard" in dp_dims or "cp" in dp_dims):
        return "fully_shard"
    if sharding in SHARDED and sharding != "hsdp":
        raise ValueError(f"sharding {sharding} needs dp_shard > 1 (the mesh has {', '.join(dp_dims)})")
    if sharding == "hsdp" or tp > 1 or pp > 1:  # DDP's reducer breaks on pipeline stages (torch 2.13)
        return "replicate"
    return "ddp"


@dataclass(frozen=True, slots=True)
class Layout:
    """One phase's parallel layout. world_size = nodes x devices_per_node (the devices the run has);
    data_parallel x model_parallel of them train (used_devices)."""

    nodes: int
    devices_per_node: int
    dp_replicate: int
    dp_shard: int
    cp: int = 1
    tp: int = 1
    pp: int = 1
    ep: int = 1
    sharding: Sharding = "none"
    offload: bool = False
    # with pp > 1: the schedule, model chunks per rank and the stated first/last stage layers
    pp_schedule: str = "1f1b"
    pp_virtual: int = 1
    pp_first_layers: int | None = None
    pp_last_layers: int | None = None
    hsdp_shard_nodes: int = 1  # hsdp: the nodes one shard group spans (parallelism.hsdp_shard_nodes)

    def __post_init__(self) -> None:
        for name in ("dp_replicate", "dp_shard", "cp", "tp", "pp", "ep"):
            if getattr(self, name) < 1:
                raise ValueError(f"parallel degree {name} must be at least 1, not {getattr(self, name)}")
        if (self.data_parallel * self.cp) % self.ep:
            raise ValueError(
                f"expert parallelism {self.ep} must divide data parallel x cp = {self.data_parallel * self.cp}"
            )

    # ---- degrees

    @property
    def world_size(self) -> int:
        return self.nodes * self.devices_per_node

    @property
    def model_parallel(self) -> int:
        """tp x pp x cp: the devices one model replica spans (torchtitan's non_data_parallel_size)."""
        return self.tp * self.pp * self.cp

    @property
    def data_parallel(self) -> int:
        return self.dp_replicate * self.dp_shard

    @property
    def used_devices(self) -> int:
        return self.data_parallel * self.model_parallel

    def degrees(self) -> dict[str, int]:
        """The degrees by mesh name, as a worker records its mesh (run.json); ep only when it is not 1."""
        out = {
            "dp_replicate": self.dp_replicate,
            "dp_shard": self.dp_shard,
            "tp": self.tp,
            "cp": self.cp,
            "pp": self.pp,
        }
        if self.ep != 1:
            out["ep"] = self.ep
        return out

    # ---- the device mesh

    @property
    def mesh_dim_names(self) -> tuple[str, ...]:
        """The mesh's dimensions of size > 1, outermost first (MESH_ORDER); () on one process."""
        sizes = self.degrees()
        return tuple(name for name in MESH_ORDER if sizes[name] > 1)

    @property
    def mesh_shape(self) -> tuple[int, ...]:
        sizes = self.degrees()
        return tuple(sizes[name] for name in self.mesh_dim_names)

    @property
    def data_parallel_dims(self) -> tuple[str, ...]:
        """The mesh dimensions a data-parallel wrapper spans (flattened into "dp"): 2-D for hsdp."""
        return tuple(name for name in self.mesh_dim_names if name.startswith("dp_"))

    @property
    def gradient_dims(self) -> tuple[str, ...]:
        """The mesh dimensions whose ranks average gradients: the data-parallel ones and cp (context-parallel
        ranks compute the gradient of other tokens of the same rows)."""
        return tuple(name for name in self.mesh_dim_names if name.startswith("dp_") or name == "cp")

    def world_errors(self, world: int) -> list[str]:
        """Why this layout cannot be built as a mesh of `world` processes ([] when it can)."""
        errors = []
        if self.used_devices != world:
            errors.append(f"dp_replicate x dp_shard x tp x cp x pp = {self.used_devices} is not the world size {world}")
        if self.sharding == "none" and self.dp_shard > 1:
            errors.append(f"sharding none (DDP) replicates: dp_shard must be 1, not {self.dp_shard}")
        if self.sharding in SHARDED and self.sharding != "hsdp" and self.dp_replicate > 1 and self.dp_shard == 1:
            errors.append(f"sharding {self.sharding} needs dp_shard > 1 (got dp_replicate {self.dp_replicate})")
        return errors

    def on_processes(self, world: int) -> Layout:
        """This layout on `world` processes of one machine (RUNLIB_PROCESSES): the model-parallel degrees
        stay, the data-parallel degree follows the world."""
        if world == self.world_size:
            return self
        if world % self.model_parallel:
            raise ValueError(
                f"{world} processes cannot hold tensor x context x pipeline = {self.model_parallel}; "
                "set RUNLIB_PROCESSES to a multiple of it (or unset it)"
            )
        replicate, shard = split_data_parallel(self.sharding, world // self.model_parallel, 1)
        return replace(self, nodes=1, devices_per_node=world, dp_replicate=replicate, dp_shard=shard)

    # ---- who holds what

    @property
    def shard_group_ranks(self) -> int:
        """Ranks one copy of the sharded states is split over: dp_shard x cp (torchtitan's dp_shard_cp)."""
        return self.dp_shard * self.cp

    def is_sharded(self, state: State) -> bool:
        """Whether this layout splits `state` over its shard group (SHARDED_STATES)."""
        return state in SHARDED_STATES[self.sharding]

    def shards(self, state: State) -> int:
        """Ranks one copy of `state` is split over (1: each rank holds it whole, over its tp x pp share)."""
        return self.shard_group_ranks if self.is_sharded(state) else 1

    def expert_shards(self, state: State) -> int:
        """Ranks one copy of the routed experts' `state` is split over: the ep ranks each hold experts / ep of
        them, sharded further over the rest of the shard group (FSDP over dp_shard x cp / ep, torchtitan's
        dp_shard_mod_ep); at least ep."""
        return max(self.shards(state), self.ep)

    @property
    def reshard_after_forward(self) -> bool:
        return RESHARD_AFTER_FORWARD.get(self.sharding, False)

    @property
    def wrapper(self) -> Wrapper:
        """How the data-parallel ranks hold the model (data_parallel_wrapper over this layout's mesh)."""
        return data_parallel_wrapper(self.sharding, self.gradient_dims, self.tp, self.pp)

    # ---- what the trainer enacts

    def refusals(
        self,
        accelerator: str,
        model: ModelSpec | None = None,
        seq_len: int | None = None,
        micro_batches: Collection[int] = (),
    ) -> list[Refusal]:
        """What runlib's trainer cannot enact of this layout on `accelerator` (hardware.accelerator, or the
        mesh's device type), for `model` at `seq_len` (None: not checked here): RUN001 context, RUN002
        pipeline (with `micro_batches`: the counts per step the phase takes, its grad_accum and a batch
        ramp's; empty: not checked here), RUN003
        tensor, RUN004 hsdp, RUN005 offload. The audit, the trainer's last guard
        (runlib.plan.enact.train_config_refusals) and runlib.model.parallelize all read these."""
        return [
            *self._context_refusals(model, seq_len),
            *self._pipeline_refusals(model, micro_batches),
            *(self._tensor_refusals(model, seq_len) if model is not None else []),
            *self._hsdp_refusals(),
            *self._offload_refusals(accelerator),
        ]

    def _context_refusals(self, model: ModelSpec | None, seq_len: int | None) -> list[Refusal]:
        """Context parallelism (runlib.model.context_parallel) cuts each sequence into 2 x cp chunks (a
        length that does not cut is PAR004's error, and the model's ValueError), and under tensor
        parallelism a rank's share into tp more for sequence parallelism; its mask has no ALiBi bias."""
        if self.cp == 1:
            return []
        out = []
        if seq_len is not None and seq_len % (2 * self.cp) == 0 and (seq_len // self.cp) % self.tp:
            need = 2 * self.cp * self.tp // math.gcd(2, self.tp)
            out.append(
                Refusal(
                    "RUN001",
                    "parallelism.context",
                    self.cp,
                    f"context parallelism {self.cp} gives each rank 1/{self.cp} of the sequence, which sequence "
                    f"parallelism splits again over tensor {self.tp}: seq_len {seq_len} is not divisible by {need}",
                    f"use a seq_len divisible by {need} (2 x context x tensor), or degrees that divide it",
                )
            )
        if model is not None and model.sliding_window is not None:
            out.append(
                Refusal(
                    "RUN001",
                    "parallelism.context",
                    self.cp,
                    f"context parallelism {self.cp} with model.sliding_window is not enacted: the context-parallel "
                    "mask has no window",
                    "use context: 1 with sliding windows (shard with fsdp, recompute activations)",
                )
            )
        if model is not None and model.position == "alibi":
            out.append(
                Refusal(
                    "RUN001",
                    "parallelism.context",
                    self.cp,
                    f"context parallelism {self.cp} with position alibi is not enacted: the context-parallel "
                    "mask carries no ALiBi bias",
                    "use context: 1 with ALiBi (shard with fsdp, recompute activations), or position: rope",
                )
            )
        return out

    def _pipeline_refusals(self, model: ModelSpec | None, micro_batches: Collection[int]) -> list[Refusal]:
        """runlib.model.pipeline splits the blocks into stages, one per rank or, with interleaved 1F1B,
        pipeline_virtual_stages per rank; torch's interleaved schedule runs the micro-batches in equal
        rounds (interleaved_rounds_ok); context with pipeline is not built. (A 1F1B step with fewer
        micro-batches than stages runs as GPipe, runlib.model.pipeline.build_schedule.)"""
        if self.pp == 1:
            return []
        out = []
        interleaved = self.pp_schedule == "interleaved_1f1b"
        if interleaved != (self.pp_virtual > 1):
            out.append(
                Refusal(
                    "RUN002",
                    "parallelism.pipeline_virtual_stages",
                    self.pp_virtual,
                    f"pipeline_schedule {self.pp_schedule} runs "
                    + ("at least 2 model chunks per rank" if interleaved else "one model chunk per rank")
                    + f", not {self.pp_virtual}",
                    "use pipeline_virtual_stages: 2 or more with interleaved_1f1b, 1 with 1f1b and gpipe",
                )
            )
        elif (
            model is not None
            and pipeline_stage_layers(
                model.layers, self.pp * self.pp_virtual, self.pp_first_layers, self.pp_last_layers
            )
            is None
            and self.pp_virtual > 1
        ):
            out.append(
                Refusal(
                    "RUN002",
                    "parallelism.pipeline_virtual_stages",
                    self.pp_virtual,
                    f"{model.layers} layers do not split into pipeline {self.pp} x {self.pp_virtual} virtual stages",
                    "use a number of virtual stages whose product with pipeline divides the layers",
                )
            )
        uneven = sorted(n for n in set(micro_batches) if not interleaved_rounds_ok(n, self.pp))
        if interleaved and uneven:
            n, rounds = uneven[0], max(1, uneven[0] // self.pp)
            out.append(
                Refusal(
                    "RUN002",
                    "parallelism.pipeline_schedule",
                    self.pp_schedule,
                    f"interleaved 1F1B runs a step's {n} micro-batches in {rounds} rounds of micro-batches // "
                    f"pipeline (torch.distributed.pipelining ScheduleInterleaved1F1B), and {rounds} does not "
                    f"divide {n}",
                    f"use a grad_accum that is a multiple of pipeline {self.pp} (or below {2 * self.pp}), "
                    "or pipeline_schedule: 1f1b",
                )
            )
        if self.cp > 1:
            out.append(
                Refusal(
                    "RUN002",
                    "parallelism.pipeline",
                    self.pp,
                    f"pipeline parallelism {self.pp} with context parallelism {self.cp} is not enacted",
                    "use one of them: context for long sequences, pipeline for models whose layers do not fit",
                )
            )
        return out

    def _tensor_refusals(self, model: ModelSpec, seq_len: int | None) -> list[Refusal]:
        tp = self.tp
        if tp == 1:
            return []
        out = []
        kv = model.kv_heads or model.heads
        sizes = [("heads", model.heads), ("kv_heads", kv), ("d_ff", model.d_ff)]
        if seq_len is not None:
            sizes.append(("seq_len", seq_len))
        bad = [f"{name} {n}" for name, n in sizes if n % tp]
        if bad:
            working = divisors_above_one(math.gcd(*(n for _, n in sizes)))
            out.append(
                Refusal(
                    "RUN003",
                    "parallelism.tensor",
                    tp,
                    f"tensor parallelism {tp} splits q/k/v by whole heads, the MLP by hidden units and the "
                    f"sequence between blocks (sequence parallelism), and {', '.join(bad)} "
                    f"{'is' if len(bad) == 1 else 'are'} not divisible by {tp}"
                    + (" (replicating key/value heads is not enacted)" if kv % tp else ""),
                    "use a tensor degree dividing heads, kv_heads, d_ff and seq_len"
                    + (f" ({', '.join(map(str, working))})" if working else " (only 1 does)"),
                )
            )
        if model.qk_norm:
            out.append(
                Refusal(
                    "RUN003",
                    "parallelism.tensor",
                    tp,
                    f"tensor parallelism {tp} with model.qk_norm is not enacted: runlib's tensor-parallel plan has no "
                    "QK-norm (over the whole q and k projections it spans heads on different ranks; per head it "
                    "is not written yet)",
                    "use tensor: 1 with qk_norm (shard with fsdp instead), or qk_norm: false",
                )
            )
        if model.norm_position != "pre":
            out.append(
                Refusal(
                    "RUN003",
                    "parallelism.tensor",
                    tp,
                    f"tensor parallelism {tp} with model.norm_position {model.norm_position} is not enacted: the "
                    "sequence-parallel plan places each norm before its sublayer",
                    "use tensor: 1 (shard with fsdp instead)",
                )
            )
        return out

    def _hsdp_refusals(self) -> list[Refusal]:
        if self.sharding != "hsdp":
            return []
        k = self.hsdp_shard_nodes
        if self.nodes % k:
            return [
                Refusal(
                    "RUN004",
                    "parallelism.hsdp_shard_nodes",
                    k,
                    f"hsdp replicates over groups of hsdp_shard_nodes {k} nodes, which do not divide nodes "
                    f"{self.nodes}",
                    f"use an hsdp_shard_nodes dividing {self.nodes}",
                )
            ]
        if self.nodes == 1:
            return []
        where = "a node" if k == 1 else f"a group of {k} nodes"
        if self.devices_per_node % self.model_parallel:
            return [
                Refusal(
                    "RUN004",
                    "parallelism.sharding",
                    self.sharding,
                    f"hsdp shards within {where} and replicates across them, but tensor x pipeline x context = "
                    f"{self.model_parallel} does not divide devices_per_node {self.devices_per_node}, so no "
                    "shard group is whole nodes",
                    "use sharding: fsdp, or a tensor degree dividing devices_per_node",
                )
            ]
        if self.dp_shard == 1:
            return [
                Refusal(
                    "RUN004",
                    "parallelism.sharding",
                    self.sharding,
                    f"hsdp shards within {where} and replicates across them, but {where} holds one data-parallel "
                    "rank, so there is nothing to shard",
                    "use sharding: none (DDP across the nodes), fsdp (sharded across the nodes), or a larger "
                    "hsdp_shard_nodes",
                )
            ]
        return []

    def _offload_refusals(self, accelerator: str) -> list[Refusal]:
        if not self.offload:
            return []
        if accelerator == "cpu":
            reason = "offload moves states to host memory, and on cpu the device memory is host memory already"
            fix = "use offload: false"
        elif self.data_parallel == 1:
            reason = (
                "offload is enacted through FSDP2's CPU offload policy on the data-parallel ranks, and this "
                "layout has a data-parallel degree of 1 (nothing is wrapped by FSDP2)"
            )
            fix = "use offload: false, or more devices than tensor x pipeline x context with sharding: fsdp"
        elif self.sharding not in SHARDED:
            reason = (
                f"offload is enacted through FSDP2's CPU offload policy, which needs a sharded layout, "
                f"and sharding: {self.sharding} trains with DDP"
            )
            fix = "use sharding: zero2 or fsdp with offload, or offload: false"
        else:
            return []
        return [Refusal("RUN005", "parallelism.offload", True, reason, fix)]


def interleaved_rounds_ok(micro_batches: int, pipeline: int) -> bool:
    """Whether torch's interleaved 1F1B takes `micro_batches` per step over `pipeline` ranks: it runs them
    in max(1, micro_batches // pipeline) rounds of equal size (torch/distributed/pipelining/schedules.py,
    ScheduleInterleaved1F1B, torch 2.13), so the rounds must divide the micro-batches."""
    rounds = max(1, micro_batches // pipeline)
    return micro_batches % rounds == 0


def pipeline_stage_layers(
    layers: int, pipeline: int, first: int | None = None, last: int | None = None
) -> list[int] | None:
    """Transformer layers per pipeline stage, first to last, as Megatron-LM splits them
    (--decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers: the stated first and
    last stages, the rest evenly over the middle ones); None when they do not split: a remainder, a
    stage left empty, or first/last adding up to more than the layers."""
    if pipeline <= 1:
        return [layers] if first is None and last is None or pipeline == 1 else None
    head = [first] if first is not None else []
    tail = [last] if last is not None else []
    rest = layers - sum(head) - sum(tail)
    middle = pipeline - len(head) - len(tail)
    if rest < 0 or (middle == 0 and rest != 0) or (middle > 0 and (rest % middle or rest // middle < 1)):
        return None
    if any(n < 1 for n in head + tail):
        return None
    return head + [rest // middle] * middle + tail if middle else head + tail


def planned_degrees(parallelism: ParallelismSpec, devices: int) -> tuple[int, int]:
    """(data parallel, model parallel) of a parallelism on `devices` devices: model parallel = tensor x
    pipeline x context, data parallel = devices // that, at least 1 (a remainder idles: PAR001; fewer
    devices than one replica still plan one). PhaseSettings.data_parallel and .model_parallel hold these."""
    model_parallel = parallelism.tensor * parallelism.pipeline * parallelism.context
    return max(1, devices // model_parallel), model_parallel


def build_layout(parallelism: ParallelismSpec, *, nodes: int, devices_per_node: int) -> Layout:
    """The layout of a phase's effective parallelism on the run's hardware: the degrees of
    planned_degrees, the data-parallel ranks split by the sharding (split_data_parallel)."""
    data_parallel, _ = planned_degrees(parallelism, nodes * devices_per_node)
    # meaningful under hsdp only (a phase may override the sharding and keep the run's groups)
    shard_nodes = (parallelism.hsdp_shard_nodes or 1) if parallelism.sharding == "hsdp" else 1
    replicate, shard = split_data_parallel(parallelism.sharding, data_parallel, nodes, shard_nodes)
    # a degree that does not divide the data x context ranks plans no expert parallelism (MOE001 says so)
    expert = parallelism.expert if (replicate * shard * parallelism.context) % parallelism.expert == 0 else 1
    return Layout(
        nodes=nodes,
        devices_per_node=devices_per_node,
        dp_replicate=replicate,
        dp_shard=shard,
        cp=parallelism.context,
        tp=parallelism.tensor,
        pp=parallelism.pipeline,
        ep=expert,
        sharding=parallelism.sharding,
        offload=parallelism.offload,
        pp_schedule=parallelism.pipeline_schedule,
        pp_virtual=parallelism.pipeline_virtual_stages,
        pp_first_layers=parallelism.pipeline_first_stage_layers,
        pp_last_layers=parallelism.pipeline_last_stage_layers,
        hsdp_shard_nodes=shard_nodes,
    )
