"""The parallel layout of one training run: a device mesh, tensor parallelism, recomputation, FSDP2 or DDP.

    mesh = build_mesh(parallel)                       # None on one process
    model = parallelize(model, mesh, parallel, precision)
    rank, size = data_parallel_rank_and_size(mesh)    # which slice of the batch this rank reads
    with forward_context(model): logits = model(...)  # autocast where FSDP2 does not cast (DDP, one process)
    grad_norm = clip_grad_norm_(model, max_norm)      # across DTensors of several meshes

`parallel` is any object with dp_replicate, dp_shard, tp, cp, pp (their product is the world size),
sharding (none | zero1 | zero2 | fsdp | hsdp), activation_checkpointing (none | selective | selective_op | mlp | full) and
offload (`Parallel`: runlib.train.config.ParallelConfig); `precision` any object with compute,
master_weights, grads, optimizer_states (runlib.spec.models.PrecisionSpec). Both are read through
runlib.plan.layout.Layout (`layout_of`): its mesh shape and names, its data-parallel wrapper, its
resharding, and its refusals, the same rules the audit and the stage's guard apply.

The mesh is torch's init_device_mesh with torchtitan's names and order (Layout.mesh_dim_names:
pp, dp_replicate, dp_shard, cp, tp, size-1 dimensions dropped; Accelerate's ParallelismConfig._get_mesh
in accelerate 1.15 has the same order without pp), plus the flattened "dp" (all data-parallel ranks). Accelerate's own
`ParallelismConfig(...).build_device_mesh("cpu")` builds the same mesh on CPU with gloo, but in
accelerate 1.15 a tp_size > 1 constructs a TorchTensorParallelConfig that requires the transformers
package (not a runlib dependency), and it refuses tensor parallelism beside pure replication
(dp_replicate > 1, dp_shard == 1); so the mesh is built here, one way for every layout. Accelerate's
`prepare` is not used on the model either: its tensor parallelism needs a transformers model with a
`tp_plan`, and its FSDP2 wrapping knows nothing of runlib's blocks. This module applies both itself,
as torchtitan does (torchtitan/models/llama3/infra/parallelize.py); the caller must not pass the
result to accelerator.prepare (Accelerate still launches the processes and owns the process group).

Data parallelism, by `sharding` (FSDP2: torch.distributed.fsdp.fully_shard, one group per block and
one for the root; ZeRO: Rajbhandari et al. 2019, arXiv 1910.02054):
  * none: DDP (torch.nn.parallel.DistributedDataParallel over the dp_replicate ranks): replicated
    weights, gradients and optimizer states, gradients all-reduced. With tensor parallelism (DDP
    cannot hold DTensor parameters) the same arithmetic runs through FSDP2's replicate
    (torch.distributed._composable.replicate_with_fsdp), which all-reduces DTensor gradients.
  * fsdp (= ZeRO-3): fully_shard with reshard_after_forward=True: weights, gradients and optimizer
    states sharded; weights all-gathered again in the backward pass.
  * zero2: fully_shard with reshard_after_forward=False: gradients and optimizer states sharded
    (reduce-scatter), weights stay gathered from the forward to the end of the backward pass, so
    there is no second all-gather. FSDP2 frees the gathered weights after the backward pass, so
    between steps the weights are sharded too (more saving than ZeRO-2's replicated weights).
  * zero1: the same as zero2. FSDP2 has no layout with replicated gradients and sharded optimizer
    states only (ZeRO-1); zero2 is the nearest, and it uses less memory than ZeRO-1 would.
  * hsdp: fully_shard on the 2-D (dp_replicate, dp_shard) mesh: sharded within a dp_shard group
    (within a node), replicated across dp_replicate groups, reshard_after_forward=True. With
    dp_shard 1 (one process per node) nothing is sharded: FSDP2's replicate, as for none with tp.
    zero1/zero2/fsdp with dp_replicate > 1 as well take the same 2-D mesh with their resharding.
A data-parallel degree of 1 (one process, or tensor parallelism only) wraps nothing.

Tensor parallelism (Megatron-LM, Shoeybi et al. 2019, arXiv 1909.08053; sequence parallelism,
Korthikanti et al. 2022, arXiv 2205.05198), the plan of torchtitan's llama3 for runlib's Block:
q/k/v projections and the MLP's w1 (gate) and w3 (up) column-wise (each rank computes heads/tp of the
heads, d_ff/tp of the hidden units), the attention output wo and the MLP's w2 (down) row-wise. The
norms run sequence-parallel: the residual stream between blocks is split along the sequence on the tp
ranks; each attention/MLP input is all-gathered, each row-wise output reduce-scattered. The token
embedding is split row-wise (by vocabulary; its output all-reduced, and the first block takes its
sequence slice) and the untied LM head column-wise (by vocabulary; the logits all-gathered, so every
tp rank computes the same loss on whole logits); with tied embeddings both stay replicated on the tp
ranks (one matrix cannot be split both ways), as do learned position embeddings. Needs heads, kv_heads, d_ff and the sequence length divisible
by tp, and no QK-norm (runlib's QK-norm normalises the whole q projection across heads, which a rank
holding heads/tp of them cannot compute locally).

Activation recomputation (torch.utils.checkpoint inside Block/Attention forward, so parameter names
do not change): full recomputes each block in the backward pass (Chen et al. 2016, arXiv
1604.06174), keeping only its input; selective recomputes only the attention core, softmax(qk^T)v
(Korthikanti et al. 2022, section 4.1), as runlib.plan.memory assumes; selective_op keeps the block's
input, the attention kernel's output and every other matmul's output and recomputes the rest
(torchtitan's op-level policy: op_selective_policy).

Precision: with FSDP2, MixedPrecisionPolicy(param_dtype=compute, reduce_dtype=fp32 or the compute
dtype per precision.grads): the sharded fp32 parameters are the master weights, the all-gathered copies
are in the compute dtype; the reduced gradient is kept in the parameters' dtype. master_weights none
casts the parameters themselves to the compute dtype (RoPE tables stay fp32); the gradients are then
in that dtype too, reduced in fp32 under FSDP2 when grads is fp32. Without FSDP2 (one process, DDP)
the compute dtype is torch.autocast (`forward_context`) over fp32 parameters; grads bf16 under DDP
is bf16_compress_hook (all-reduced in bf16, accumulated in fp32); under DDP with master_weights none
the gradients are all-reduced in the compute dtype whatever precision.grads says.

Context parallelism (cp > 1, runlib.model.context_parallel: Llama 3's all-gather form): the model's
context_parallel is the mesh's "cp" group; the cp ranks shard the states with the dp_shard ranks
(FSDP2 over the flattened dp_shard_cp, 2-D with dp_replicate for hsdp) and average gradients with every
data-parallel rank (DDP or replicate over the flattened dp_cp).

Expert parallelism (a model built on an expert mesh: runlib.model.expert_parallel): the routed experts
are DTensors on the expert mesh's "ep" dimension; each GroupedExperts is wrapped first, by FSDP2 on the
"edp" dimension (fully_shard under fsdp, replicate under none) with gradients divided by dp x cp, and
under sharding none the rest by FSDP2's replicate instead of DDP (DDP takes no DTensor parameters).
Sharding zero1/zero2/hsdp, tensor, pipeline or context parallelism with it raise NotImplementedError
(RUN008, runlib.plan.enact.sparse_model_refusals, as the gate).

Not enacted here (the gate refuses them: Layout.refusals, read by runlib.plan.enact): context parallelism
the sequence length does not divide into 2 x cp chunks, or with ALiBi; pipeline parallelism (pp > 1), tensor parallelism the model's shape does not divide, offload
where FSDP2 cannot offload, fp8 compute: build_mesh and parallelize raise NotImplementedError with the
refusal's code, field, reason and fix.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import bf16_compress_hook
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard
from torch.distributed.tensor import DTensor, Partial, Placement, Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

from runlib.model.context_parallel import ContextParallel
from runlib.model.expert_parallel import cast_experts, expert_parallel_degree, gradient_ranks, wrap_experts
from runlib.model.transformer import Transformer
from runlib.plan.enact import precision_refusals, sparse_model_refusals
from runlib.plan.layout import Layout, Refusal, Wrapper, data_parallel_wrapper
from runlib.spec.models import Sharding

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class Parallel(Protocol):
    """What this module reads of a phase's layout (runlib.train.config.ParallelConfig, or a test's namespace)."""

    @property
    def dp_replicate(self) -> int: ...
    @property
    def dp_shard(self) -> int: ...
    @property
    def tp(self) -> int: ...
    @property
    def cp(self) -> int: ...
    @property
    def pp(self) -> int: ...
    @property
    def sharding(self) -> Sharding: ...
    @property
    def activation_checkpointing(self) -> str: ...
    @property
    def offload(self) -> bool: ...


class Precision(Protocol):
    """What this module reads of precision.* (runlib.spec.models.PrecisionSpec)."""

    @property
    def compute(self) -> str: ...
    @property
    def master_weights(self) -> str: ...
    @property
    def grads(self) -> str: ...
    @property
    def optimizer_states(self) -> str: ...


# ----------------------------------------------------------------------------------------- mesh


def layout_of(parallel: Parallel) -> Layout:
    """The runlib.plan.layout.Layout of the mesh's degrees. The mesh does not know how its ranks spread
    over machines, so the layout is one machine's (hsdp's node rule, RUN004, is the stage's guard)."""
    degrees = (parallel.dp_replicate, parallel.dp_shard, parallel.tp, parallel.cp, parallel.pp)
    return Layout(
        nodes=1,
        devices_per_node=math.prod(degrees),
        dp_replicate=parallel.dp_replicate,
        dp_shard=parallel.dp_shard,
        cp=parallel.cp,
        tp=parallel.tp,
        pp=parallel.pp,
        sharding=parallel.sharding,
        offload=parallel.offload,
    )


def _refuse(refusals: list[Refusal]) -> None:
    if refusals:
        raise NotImplementedError("; ".join(r.describe() for r in refusals))


def _device_type() -> str:
    backend = dist.get_backend() if dist.is_initialized() else None
    if backend is not None and "nccl" in str(backend) and torch.cuda.is_available():
        return "cuda"
    return "cpu"


def build_mesh(parallel: Parallel) -> DeviceMesh | None:
    """The DeviceMesh of the layout's dims (Layout.mesh_dim_names: size-1 dims dropped) plus the flattened
    "dp"; None on one process. Raises what the layout refuses (NotImplementedError: context or pipeline
    parallelism, offload where it is not enacted) and a layout that is not the world (ValueError)."""
    layout = layout_of(parallel)
    _refuse(layout.refusals(_device_type()))
    world = dist.get_world_size() if dist.is_initialized() else int(os.environ.get("WORLD_SIZE", "1"))
    errors = layout.world_errors(world)
    if errors:
        raise ValueError("; ".join(errors))
    if world == 1:
        return None
    mesh = init_device_mesh(_device_type(), layout.mesh_shape, mesh_dim_names=layout.mesh_dim_names)
    if layout.data_parallel_dims:
        mesh[layout.data_parallel_dims]._flatten("dp")  # all data-parallel ranks, as accelerate's "dp"
    # context-parallel ranks hold other tokens of the same rows: they shard the states with the dp_shard
    # ranks and average gradients with all data-parallel ranks (torchtitan's dp_shard_cp and dp_cp)
    shard_dims = tuple(d for d in ("dp_shard", "cp") if d in layout.mesh_dim_names)
    if len(shard_dims) == 2:
        mesh[shard_dims]._flatten("dp_shard_cp")
    if layout.cp > 1 and len(layout.gradient_dims) > 1:
        mesh[layout.gradient_dims]._flatten("dp_cp")
    return mesh


def _one_dim(mesh: DeviceMesh, dims: tuple[str, ...], flattened: str) -> DeviceMesh:
    """mesh[dims] as one dimension: the dimension itself, or the one build_mesh flattened them into."""
    return mesh[dims[0]] if len(dims) == 1 else mesh[flattened]


def pipeline_rank_and_group(mesh: DeviceMesh | None) -> tuple[int, dist.ProcessGroup | None]:
    """(this rank's pipeline stage rank, the pipeline group); (0, None) without pipeline parallelism."""
    if mesh is None or "pp" not in _dims(mesh):
        return 0, None
    return mesh["pp"].get_local_rank(), mesh["pp"].get_group()


def gradient_group(mesh: DeviceMesh | None) -> dist.ProcessGroup | None:
    """The process group of every rank whose gradients are averaged with this one's (data-parallel and
    context-parallel ranks); None when there is none."""
    dims = tuple(d for d in ("dp_replicate", "dp_shard", "cp") if d in _dims(mesh))
    if mesh is None or not dims:
        return None
    return _one_dim(mesh, dims, "dp_cp" if "cp" in dims else "dp").get_group()


def _dims(mesh: DeviceMesh | None) -> tuple[str, ...]:
    return tuple(mesh.mesh_dim_names or ()) if mesh is not None else ()


def _size(mesh: DeviceMesh | None, name: str) -> int:
    return mesh[name].size() if mesh is not None and name in _dims(mesh) else 1


def data_parallel_rank_and_size(mesh: DeviceMesh | None) -> tuple[int, int]:
    """(this rank's index among the data-parallel ranks, their count); the ranks of one tp group share it."""
    if mesh is None:
        if dist.is_initialized() and dist.get_world_size() > 1:
            raise ValueError("a multi-process run needs its mesh (build_mesh)")
        return 0, 1
    dims = [d for d in ("dp_replicate", "dp_shard") if d in _dims(mesh)]
    rank, size = 0, 1
    for d in dims:  # row-major over (dp_replicate, dp_shard), as the flattened "dp" dimension
        rank, size = rank * mesh[d].size() + mesh[d].get_local_rank(), size * mesh[d].size()
    return rank, size


def data_parallel_group(mesh: DeviceMesh | None) -> dist.ProcessGroup | None:
    """The process group of this rank's data-parallel peers (None: no data parallelism)."""
    if mesh is None or data_parallel_rank_and_size(mesh)[1] == 1:
        return None
    return mesh["dp"].get_group()


# ----------------------------------------------------------------------------------------- parallelize


def parallelize(model: Transformer, mesh: DeviceMesh | None, parallel: Parallel, precision: Precision) -> nn.Module:
    """Cast, tensor-parallelise, set recomputation, then shard (FSDP2) or replicate (DDP) the model, in place.

    Returns the module to train: the model itself, or its DDP wrapper under sharding none. On a cuda
    mesh the model moves to the current device first; with no mesh it stays where it is. The data-parallel
    wrapper follows the mesh's data-parallel dimensions (a caller may hand a 1-process dp_shard mesh, as
    runlib.bench.gpu_check does, to run FSDP2 on one device): runlib.plan.layout.data_parallel_wrapper."""
    layout = layout_of(parallel)
    device = mesh.device_type if mesh is not None else next(model.parameters()).device.type
    _refuse(
        layout.refusals(device, model.spec)
        + [r for r in precision_refusals(**_precision_fields(precision)) if r.field == "precision.compute"]
    )
    compute = DTYPES[precision.compute]
    if mesh is not None and mesh.device_type == "cuda":  # Accelerate has set each rank's current device
        model.to(torch.device("cuda", torch.cuda.current_device()))
    if precision.master_weights == "none" and compute != torch.float32:
        for p in model.parameters():  # parameters only: the RoPE tables stay fp32
            if not isinstance(p, DTensor):  # the expert-parallel DTensors: cast_experts
                p.data = p.data.to(compute)
        cast_experts(model, compute)
    tp = _size(mesh, "tp")
    ep = expert_parallel_degree(model)  # the MoE layers built on an expert mesh (runlib.model.expert_parallel)
    if ep > 1:  # the layouts expert parallelism is enacted in, as the gate's RUN008 says
        _refuse(sparse_model_refusals(model.spec, tp, layout.pp, layout.cp, ep, layout.sharding))
    if mesh is not None and tp > 1:
        apply_tensor_parallel(model, mesh["tp"])
    if mesh is not None and "cp" in _dims(mesh):
        model.context_parallel = ContextParallel(mesh["cp"].get_group())
    set_recompute(model, parallel.activation_checkpointing)

    dp_dims = tuple(d for d in ("dp_replicate", "dp_shard", "cp") if d in _dims(mesh))
    wrapper: Wrapper = data_parallel_wrapper(layout.sharding, dp_dims, tp, layout.pp)
    if ep > 1 and wrapper == "ddp":
        wrapper = "replicate"  # DTensor experts: DDP's arithmetic through FSDP2 (runlib.model.expert_parallel)
    fsdp = wrapper in ("fully_shard", "replicate")  # FSDP2's policy casts; DDP and one process autocast
    model.runlib_autocast = None if fsdp or compute == torch.float32 or precision.master_weights == "none" else compute
    if layout.offload and wrapper != "fully_shard":
        raise NotImplementedError(
            "parallelism.offload is FSDP2's CPU offload policy: it needs fully_shard (dp_shard > 1)"
        )
    if mesh is None or wrapper == "none":
        return model
    if ep > 1:  # the routed experts first, on the expert mesh's edp ranks; the blocks then leave them to it
        offload_policy = CPUOffloadPolicy() if layout.offload else OffloadPolicy()
        sharded = wrapper == "fully_shard"
        policy = _mixed_precision(precision)
        wrap_experts(model, sharded, gradient_ranks(mesh), policy, layout.reshard_after_forward, offload_policy)
    if wrapper == "fully_shard":
        shard_dims = tuple(d for d in ("dp_shard", "cp") if d in dp_dims)
        shard = shard_dims[0] if len(shard_dims) == 1 else "dp_shard_cp"
        fsdp_mesh = mesh[("dp_replicate", shard)] if "dp_replicate" in dp_dims else mesh[shard]
        apply_fsdp(model, fsdp_mesh, precision, layout.reshard_after_forward, layout.offload)
        return model
    replicas = _one_dim(mesh, dp_dims, "dp_cp")  # the replicating ranks: dp_replicate, with cp its flattened dp_cp
    if wrapper == "replicate":  # hsdp with one process per shard group, or DDP arithmetic under tp
        apply_replicate(model, replicas, precision)
        return model
    return apply_ddp(model, replicas, precision)


def _precision_fields(precision: Precision) -> dict[str, str]:
    return {
        "compute": precision.compute,
        "master_weights": precision.master_weights,
        "optimizer_states": precision.optimizer_states,
    }


def forward_context(model: nn.Module) -> contextlib.AbstractContextManager[Any]:
    """torch.autocast in the compute dtype where no FSDP2 policy casts (one process, DDP); else nothing."""
    inner = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
    dtype = getattr(inner, "runlib_autocast", None)
    if dtype is None:
        return contextlib.nullcontext()
    device = next(inner.parameters()).device.type
    return torch.autocast(device_type=device, dtype=dtype)


def _kept_ops() -> frozenset[Any]:
    """The ops whose outputs op-level selective recomputation keeps: the attention kernels and the matmuls."""
    aten = torch.ops.aten
    names = (
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
    )
    kernels = {getattr(aten, n).default for n in names if hasattr(aten, n)}
    if hasattr(torch.ops.higher_order, "flex_attention"):
        kernels.add(torch.ops.higher_order.flex_attention)
    return frozenset(kernels | {aten.mm.default, aten.addmm.default})


def op_selective_policy() -> Callable[..., Any]:
    """The policy of op-level selective recomputation, torchtitan's `selective` activation checkpointing in
    "op" mode (pytorch/torchtitan torchtitan/distributed/activation_checkpoint.py, _get_custom_policy): the
    outputs of the attention kernel and of every other matmul (the 1st, 3rd, ... of the block: q, v, the
    MLP's gate, its down projection) are kept; norms, RoPE, activations and the other matmuls are
    recomputed in the backward pass. Matmuls are counted per block call and per mode (forward,
    recompute), so the recomputed forward keeps the same ones."""
    kept, mm = _kept_ops(), {torch.ops.aten.mm.default, torch.ops.aten.addmm.default}
    counts = {"forward": 0, "recompute": 0}

    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        if op in mm:
            mode = "recompute" if ctx.is_recompute else "forward"
            counts[mode] += 1
            keep = counts[mode] % 2 == 1
        else:
            keep = op in kept
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def op_selective_context() -> tuple[contextlib.AbstractContextManager[Any], contextlib.AbstractContextManager[Any]]:
    """torch.utils.checkpoint's context_fn for one block call under op_selective_policy."""
    contexts: tuple[Any, Any] = create_selective_checkpoint_contexts(op_selective_policy())  # type: ignore[no-untyped-call]  # torch leaves it untyped
    return contexts


RECOMPUTE_MODES = ("none", "selective", "selective_op", "mlp", "full")


def set_recompute(model: Transformer, mode: str) -> None:
    """Activation recomputation per block: none | selective (the attention core) | mlp (the MLP module) |
    selective_op (op-level:
    op_selective_context) | full (the whole block)."""
    if mode not in RECOMPUTE_MODES:
        raise ValueError(f"activation_checkpointing {mode!r}: expected one of {', '.join(RECOMPUTE_MODES)}")
    for block in model.blocks():
        block.recompute = mode in ("full", "selective_op")
        block.recompute_mlp = mode == "mlp"  # module-selective: the MLP only (OLMo-core's feed_forward)
        block.recompute_context_fn = op_selective_context if mode == "selective_op" else None
        block.attention.recompute_core = mode == "selective"


def compile_blocks(model: Transformer) -> None:
    """torch.compile each block's forward, in place (torchtitan compiles per transformer block too:
    pytorch/torchtitan torchtitan/models/llama3/infra/parallelize.py, apply_compile). The blocks run one
    code object, so dynamo compiles it once and reuses it for the others (parameters are graph inputs);
    the forward alone is compiled, so FSDP2's hooks on the block, and the names of its parameters, stay as
    they are. The loss and the head stay eager."""
    for block in model.blocks():
        block.forward = torch.compile(block.forward)  # type: ignore[method-assign]  # an instance attribute


def apply_tensor_parallel(model: Transformer, tp_mesh: DeviceMesh) -> None:
    """torchtitan's llama3 plan with sequence-parallel norms (see the module docstring); the model's shape
    is checked against the degree by the layout's refusals (runlib.plan.layout, RUN003) before."""

    tp = tp_mesh.size()
    # a pipeline stage (runlib.model.pipeline) holds the embedding only on the first stage and the head only on
    # the last; a later stage receives the residual stream as this rank's sequence shard already
    first, last = model.tok_embeddings is not None, model.lm_head is not None
    tied = first and last and model.lm_head.weight is model.tok_embeddings.weight
    plan: dict[str, ParallelStyle] = {}
    if first:
        # the residual stream enters the first block split along the sequence (a local slice, no traffic)
        plan["layers.0"] = PrepareModuleInput(
            input_layouts=(Replicate(), None, None),
            desired_input_layouts=(Shard(1), None, None),
            use_local_output=True,
        )
    if last:
        plan["norm"] = SequenceParallel()
    if tied or model.vocab_rows % tp:
        if last:
            plan["lm_head"] = PrepareModuleInput(
                input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_output=True
            )
    else:
        if first:
            plan["tok_embeddings"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate())
        if last:
            plan["lm_head"] = ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())
    parallelize_module(model, tp_mesh, plan)
    block_plan: dict[str, ParallelStyle] = {
        "attention_norm": SequenceParallel(),
        "attention": PrepareModuleInput(
            input_layouts=(Shard(1), None, None), desired_input_layouts=(Replicate(), None, None)
        ),
        "attention.wq": ColwiseParallel(),
        "attention.wk": ColwiseParallel(),
        "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
        "mlp_norm": SequenceParallel(),
        "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "mlp.w1": ColwiseParallel(),
        "mlp.w2": RowwiseParallel(output_layouts=Shard(1)),
    }
    if model.spec.activation in ("swiglu", "geglu"):
        block_plan["mlp.w3"] = ColwiseParallel()
    for block in model.blocks():
        parallelize_module(block, tp_mesh, block_plan)

    def check_length(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        input_ids = args[0] if args else kwargs["input_ids"]
        if input_ids.shape[1] % tp:
            raise ValueError(f"sequence parallelism: sequence length {input_ids.shape[1]} is not divisible by tp {tp}")

    if first:
        model.register_forward_pre_hook(check_length, with_kwargs=True)


def _mixed_precision(precision: Precision) -> MixedPrecisionPolicy:

    compute = DTYPES[precision.compute]
    reduce = torch.float32 if precision.grads == "fp32" else torch.bfloat16
    if precision.master_weights == "none" or compute == torch.float32:
        return MixedPrecisionPolicy(param_dtype=None, reduce_dtype=reduce if reduce != compute else None)
    return MixedPrecisionPolicy(param_dtype=compute, reduce_dtype=reduce)


def apply_fsdp(
    model: Transformer, dp_mesh: DeviceMesh, precision: Precision, reshard_after_forward: bool, offload: bool
) -> None:
    """fully_shard each block, then the root (embeddings, final norm, head); 2-D dp_mesh: HSDP. Offload
    on cpu is refused before (runlib.plan.layout, RUN005)."""
    policy = _mixed_precision(precision)
    offload_policy = CPUOffloadPolicy() if offload else OffloadPolicy()
    blocks = model.blocks()
    for i, block in enumerate(blocks):
        # the last block is needed first in the backward pass: keep it gathered (torchtitan)
        last = i == len(blocks) - 1
        fully_shard(
            block,
            mesh=dp_mesh,
            reshard_after_forward=reshard_after_forward and not last,
            mp_policy=policy,
            offload_policy=offload_policy,
        )
    fully_shard(model, mesh=dp_mesh, reshard_after_forward=False, mp_policy=policy, offload_policy=offload_policy)


def apply_replicate(model: Transformer, replicas: DeviceMesh, precision: Precision) -> None:
    """DDP arithmetic for a tensor-parallel model (DTensor parameters): FSDP2's replicate over the replicas."""
    # a private module (torch 2.13): imported only where this layout is built
    from torch.distributed._composable.replicate_with_fsdp import replicate

    for block in model.blocks():
        replicate(block, mesh=replicas, mp_policy=_mixed_precision(precision))
    replicate(model, mesh=replicas, mp_policy=_mixed_precision(precision))


def apply_ddp(model: nn.Module, dp_mesh: DeviceMesh, precision: Precision) -> nn.Module:
    ddp = nn.parallel.DistributedDataParallel(model, process_group=dp_mesh.get_group())
    if precision.grads == "bf16":
        ddp.register_comm_hook(dp_mesh.get_group(), bf16_compress_hook)
    return ddp


# ----------------------------------------------------------------------------------------- gradients


def _grad_norm_squared(grads: list[torch.Tensor]) -> torch.Tensor:
    """sum of squares of all gradients, identical on every rank: one reduction per (mesh, placements) group."""

    groups: dict[
        tuple[DeviceMesh, tuple[Placement, ...]] | None, list[torch.Tensor]
    ] = {}  # insertion order = parameter order, the same on every rank
    for g in grads:
        key = (g.device_mesh, tuple(g.placements)) if isinstance(g, DTensor) else None
        groups.setdefault(key, []).append(g)
    total = torch.zeros((), dtype=torch.float32)
    for key, members in groups.items():
        local = [g.to_local() if isinstance(g, DTensor) else g for g in members]
        squares = torch.stack([torch.linalg.vector_norm(t, dtype=torch.float32) ** 2 for t in local]).sum()
        if key is not None:
            mesh, placements = key
            # shards (Shard, and FSDP's _StridedShard, whose is_shard() is False) add up across their
            # mesh dims; replicas are counted once (partial gradients were reduced by the caller)
            summed: list[Placement] = [Replicate() if p.is_replicate() else Partial() for p in placements]
            if any(p.is_partial() for p in summed):
                squares = DTensor.from_local(squares, mesh, summed, run_check=False).full_tensor()
        total = total + squares.to(total.device)
    return total


@torch.no_grad()
def clip_grad_norm_(
    model: nn.Module | Sequence[nn.Module],
    max_norm: float,
    pipeline_group: dist.ProcessGroup | None = None,
    counted_elsewhere: Sequence[torch.Tensor] = (),
) -> float:
    """Scale the gradients to a global L2 norm of at most max_norm; return the norm before clipping.

    Works when gradients are DTensors of different meshes (FSDP x TP parameters beside FSDP-only
    ones), where torch.nn.utils.clip_grad_norm_ cannot combine the per-parameter norms. Partial
    gradients (tensor parallelism without FSDP) are all-reduced first, so call it every step (with
    max_norm inf for no clipping). Under pipeline parallelism `model` is this rank's stage modules and
    the squares are summed over the pipeline group (each stage holds other parameters); a parameter in
    `counted_elsewhere` (the last stage's copy of a tied embedding) is scaled but not counted."""

    modules = [model] if isinstance(model, nn.Module) else list(model)
    params = [p for m in modules for p in m.parameters()]
    for p in params:
        g = p.grad
        if isinstance(g, DTensor) and any(pl.is_partial() for pl in g.placements):
            # a replicated weight used on sequence shards (sequence-parallel norms) gets partial sums
            p.grad = g.redistribute(g.device_mesh, [Replicate() if pl.is_partial() else pl for pl in g.placements])
    grads = [p.grad for p in params if p.grad is not None]
    skip = {id(p) for p in counted_elsewhere}
    counted = [p.grad for p in params if p.grad is not None and id(p) not in skip]
    squares = _grad_norm_squared(counted) if counted else torch.zeros((), dtype=torch.float32)
    if pipeline_group is not None:
        squares = squares.to(params[0].device if params else "cpu")  # NCCL reduces device tensors
        dist.all_reduce(squares, group=pipeline_group)
    total = float(squares.sqrt())
    coef = max_norm / (total + 1e-6)  # torch.nn.utils.clip_grad_norm_'s formula
    if coef < 1.0:
        for g in grads:
            g.mul_(coef)
    return total


def no_sync(model: nn.Module) -> contextlib.AbstractContextManager[Any]:
    """For all micro-batches but a step's last: DDP skips its all-reduce; FSDP2 reduce-scatters every
    micro-batch (keeping gradients sharded), so nothing is skipped there."""
    if isinstance(model, nn.parallel.DistributedDataParallel):
        return model.no_sync()
    return contextlib.nullcontext()
