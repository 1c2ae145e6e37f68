"""Peak memory per device for one phase: model states, activations, logits, buffers.

Model states (ZeRO, Rajbhandari et al. 2019, arXiv 1910.02054; Megatron distributed-optimizer
table): bytes per parameter of weights, fp32 master copy, gradients and Adam moments, each divided
by the data-parallel degree d (not the world size) when sharded: zero1 shards master + moments,
zero2 also gradients, fsdp everything; hsdp shards everything within a node and replicates across
nodes (Zhao et al. 2023, arXiv 2304.11277, section 3.2), so over d / nodes ranks. Parameters on a
device are N / (tensor * pipeline).

Activations per layer (Korthikanti et al. 2022, arXiv 2205.05198, Table 2 breakdown, re-derived for
gated MLPs, grouped-query attention and no dropout), assuming a fused (Flash) attention kernel so
no s^2 score matrix is stored; so selective recompute (which recomputes only the attention core)
saves nothing beyond it:
  2 norm inputs 4sbh, attention input 2sbh, q/k/v 2sb(a*hd + 2*kv*hd), attention output 2sbh,
  MLP input 2sbh, MLP hidden 6sbf (SwiGLU: gate, up, product) or 4sbf (GELU: pre, post)
in bytes for 16-bit activations (x2 for fp32). Tensor parallelism with sequence parallelism
divides all of it by t; context parallelism divides s by c. Full recompute keeps only each layer's
input (2sbh/t) plus one layer's activations while it is recomputed. A pipeline's first stage holds
p micro-batches of L/p layers: L layers' worth (Megatron theoretical_memory_usage.py).
Logits: fp32 logits of the micro-batch, 4*s*b*V/t (Megatron theoretical_memory_usage.py L369-377).
FSDP (and HSDP) gathers one layer ahead: 2 unsharded 16-bit layers. Plus the runtime overhead of
the device.
"""

from __future__ import annotations

from dataclasses import dataclass

from runlib.plan.effective import PhaseSettings
from runlib.plan.params import ParamCounts, head_dim, kv_heads
from runlib.spec.models import ModelSpec, PrecisionSpec

GIB = 2**30


@dataclass(frozen=True, slots=True)
class MemoryBreakdown:
    weights: float
    master_weights: float
    gradients: float
    optimizer_states: float
    activations: float
    logits: float
    buffers: float
    runtime_overhead: float

    @property
    def total(self) -> float:
        return (
            self.weights
            + self.master_weights
            + self.gradients
            + self.optimizer_states
            + self.activations
            + self.logits
            + self.buffers
            + self.runtime_overhead
        )

    def as_dict(self) -> dict[str, float]:
        return {
            "weights": self.weights,
            "master_weights": self.master_weights,
            "gradients": self.gradients,
            "optimizer_states": self.optimizer_states,
            "activations": self.activations,
            "logits": self.logits,
            "buffers": self.buffers,
            "runtime_overhead": self.runtime_overhead,
        }


def state_bytes_per_param(precision: PrecisionSpec) -> tuple[int, int, int, int]:
    """(weights, master, gradients, optimizer states) bytes per parameter."""
    optimizer = 8 if precision.optimizer_states == "fp32" else 4
    if precision.compute == "fp32":
        return 4, 0, 4, optimizer
    master = 4 if precision.master_weights == "fp32" else 0
    grads = 4 if precision.grads == "fp32" else 2
    return 2, master, grads, optimizer  # fp8 keeps 16-bit weights and casts per matmul


def activation_bytes_per_layer(
    model: ModelSpec, seq_len: int, micro_batch: int, tensor: int, context: int, act_bytes: int
) -> float:
    s, b, h, f = seq_len / context, micro_batch, model.d_model, model.d_ff
    hd = head_dim(model)
    values = (
        s
        * b
        * (
            2 * h  # two norm inputs
            + h  # attention input (norm output)
            + model.heads * hd
            + 2 * kv_heads(model) * hd  # q, k, v
            + h  # attention output (o-proj input)
            + h  # MLP input
            + (3 * f if model.activation == "swiglu" else 2 * f)  # MLP hidden
        )
    )
    return values * act_bytes / tensor


def shard_degree(sharding: str, data_parallel: int, nodes: int) -> int:
    """Ranks one copy of the sharded states is split over: d, or for hsdp the data-parallel ranks of one node."""
    return max(1, data_parallel // nodes) if sharding == "hsdp" else data_parallel


def phase_memory(
    model: ModelSpec,
    precision: PrecisionSpec,
    params: ParamCounts,
    vocab_rows: int,
    settings: PhaseSettings,
    runtime_overhead_gib: float,
    nodes: int = 1,
) -> MemoryBreakdown:
    par = settings.parallelism
    d = shard_degree(par.sharding, settings.data_parallel, nodes)
    n_local = params.total / (par.tensor * par.pipeline)
    weights_b, master_b, grads_b, optim_b = state_bytes_per_param(precision)
    shard_optim = par.sharding in ("zero1", "zero2", "fsdp", "hsdp")
    master = n_local * master_b / (d if shard_optim else 1)
    optimizer = n_local * optim_b / (d if shard_optim else 1)
    if par.offload:
        master = optimizer = 0.0
    gradients = n_local * grads_b / (d if par.sharding in ("zero2", "fsdp", "hsdp") else 1)
    weights = n_local * weights_b / (d if par.sharding in ("fsdp", "hsdp") else 1)
    layer_weight_bytes = params.per_layer * weights_b / par.tensor
    buffers = 2 * layer_weight_bytes if par.sharding in ("fsdp", "hsdp") else 0.0

    act_bytes = 4 if precision.compute == "fp32" else 2
    per_layer = activation_bytes_per_layer(
        model, settings.seq_len, settings.micro_batch, par.tensor, par.context, act_bytes
    )
    in_flight = min(1.0, settings.grad_accum / par.pipeline) if par.pipeline > 1 else 1.0
    if par.activation_checkpointing == "full":
        layer_input = settings.seq_len / par.context * settings.micro_batch * model.d_model * act_bytes / par.tensor
        activations = model.layers * layer_input * in_flight + per_layer
    else:
        activations = model.layers * per_layer * in_flight
    logits = 4.0 * settings.seq_len / par.context * settings.micro_batch * vocab_rows / par.tensor
    return MemoryBreakdown(
        weights, master, gradients, optimizer, activations, logits, buffers, runtime_overhead_gib * GIB
    )
