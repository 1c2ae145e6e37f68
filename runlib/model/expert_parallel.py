"""Expert parallelism (parallelism.expert) in the trainer: the expert mesh, and how the data-parallel wrapper
takes the routed experts.

    ep_mesh = build_expert_mesh(mesh, ep)                   # None without expert parallelism
    model = Transformer(spec, vocab_rows, max_seq_len, ep=ep_mesh)
    parallelize(model, mesh, parallel, precision)           # wraps the experts on ep_mesh["edp"] first

The mesh (torchtitan borrows ep from dp_shard x cp: torchtitan/distributed/parallel_dims.py). The ep ranks
are ep consecutive ranks of the data-parallel x context ranks, the rows of a 2-D DeviceMesh ("edp", "ep")
over them: "ep" holds the ranks that split every MoE layer's routed experts (runlib.model.moe, the
all-to-all and the DTensor weights, Shard(0)), "edp" the ranks that hold the same experts (the expert
data-parallel group, dp x cp / ep ranks; torchtitan's dp_shard_mod_ep). Expert parallelism is built
beside data (and context) parallelism only: a mesh with tensor or pipeline dimensions is refused
(runlib.plan.enact.sparse_model_refusals, RUN008).

Gradients. Each rank scales its loss by (dp x cp) / (the step's scored tokens) and the wrapper averages
over the dp x cp ranks (runlib.train.accumulate), so a replicated parameter ends with one process's
gradient. A local expert's gradient after the backward all-to-all already sums the tokens of its whole ep
group; the other ep groups' tokens reach the same experts on the edp ranks. So the experts' gradients are
summed over "edp" and divided by dp x cp, not by the edp size: each GroupedExperts is wrapped by FSDP2
on the "edp" dimension with set_gradient_divide_factor(dp x cp), as torchtitan's parallelize does for its
experts (torchtitan/models/llama4/infra/parallelize.py, apply_fsdp: "the gradient division factor should
be consistent with data"). FSDP2 takes DTensor parameters of another dimension of the same root mesh
(the TP/EP path: torch/distributed/fsdp/_fully_shard/_fsdp_param.py, _init_sharding_spec_tp), so the
experts become DTensors on the 2-D (edp, ep) mesh: sharded over edp as well under sharding fsdp
(fully_shard), replicated over it under sharding none (FSDP2's replicate, replicate_with_fsdp: DDP's
arithmetic). Under sharding none the rest of the model is then wrapped by replicate too, not by DDP:
DDP's reducer takes plain tensors only, and plain parameters beside DTensor experts in one optimizer
param group break torch's foreach kernels on CUDA (torch/distributed/tensor/_dispatch.py: "got mixed
torch.Tensor and DTensor"); with replicate every parameter is a DTensor, on gloo and on NCCL alike.
With edp > 1, fully_shard reduce-scatters by a sum and divides afterwards (set_force_sum_reduction_for_comms):
a divide factor other than the group's size is otherwise NCCL's PREMUL_SUM, which gloo does not have.

Clipping (runlib.model.parallelize.clip_grad_norm_) sums the squares of sharded DTensor gradients over
their mesh and counts replicated ones once: each expert once, over ep (and edp under fsdp). Checkpoints
(DCP) save each rank's experts as shards of one [E, ...] tensor; a full state dict gathers them.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, OffloadPolicy, fully_shard
from torch.distributed.tensor import DTensor

from runlib.model.moe import MoE

GRADIENT_DIMS = ("dp_replicate", "dp_shard", "cp")  # the ranks ep borrows (Layout.gradient_dims)


def build_expert_mesh(mesh: DeviceMesh | None, ep: int) -> DeviceMesh | None:
    """The ("edp", "ep") DeviceMesh of `ep` consecutive data-parallel x context ranks (every rank calls it,
    after build_mesh); None for ep 1 or one process. ValueError: ep does not divide them; NotImplementedError:
    a mesh with tensor or pipeline dimensions (RUN008 refuses them with a mixture of experts)."""
    if mesh is None or ep == 1:
        return None
    names = tuple(mesh.mesh_dim_names or ())
    other = [n for n in names if n not in GRADIENT_DIMS]
    if other:
        raise NotImplementedError(
            f"RUN008 parallelism.expert: {ep}: expert parallelism beside {', '.join(other)} is not enacted; "
            "fix: use tensor 1 and pipeline 1 with expert parallelism"
        )
    ranks = mesh.mesh.flatten()  # row-major over (dp_replicate, dp_shard, cp): ep consecutive ranks
    if ranks.numel() % ep:
        raise ValueError(f"expert parallelism {ep} must divide the {ranks.numel()} data-parallel x context ranks")
    expert_mesh = DeviceMesh(mesh.device_type, ranks.reshape(-1, ep), mesh_dim_names=("edp", "ep"))
    if expert_mesh["edp"].size() > 1:
        # one all-reduce for a sum over both dimensions (the clipped norm of fully sharded experts), where
        # DTensor would otherwise run one per dimension (torch/distributed/tensor/_redistribute.py)
        expert_mesh[("edp", "ep")]._flatten("edp_ep")
    return expert_mesh


def expert_parallel_layers(model: nn.Module) -> list[MoE]:
    """The MoE layers whose routed experts are split over an expert mesh (the MTP modules' included)."""
    return [m for m in model.modules() if isinstance(m, MoE) and m.ep_mesh is not None]


def expert_parallel_degree(model: nn.Module) -> int:
    """The model's expert-parallel degree (1 without expert parallelism)."""
    return max((m.ep_size for m in expert_parallel_layers(model)), default=1)


def wrap_experts(
    model: nn.Module,
    shard: bool,
    gradient_ranks: int,
    policy: MixedPrecisionPolicy,
    reshard_after_forward: bool,
    offload_policy: OffloadPolicy,
) -> None:
    """FSDP2 on each expert-parallel GroupedExperts over its mesh's "edp" dimension, before the blocks and the
    root are wrapped (they then leave the experts' parameters to it): fully_shard when `shard` (sharding fsdp),
    else replicate; gradients summed over edp and divided by `gradient_ranks` (dp x cp): module docstring."""
    # a private module (torch 2.13), as runlib.model.parallelize.apply_replicate imports it
    from torch.distributed._composable.replicate_with_fsdp import replicate

    for layer in expert_parallel_layers(model):
        assert layer.ep_mesh is not None
        edp = layer.ep_mesh["edp"]
        wrapped: FSDPModule
        if shard:
            wrapped = fully_shard(
                layer.experts,
                mesh=edp,
                reshard_after_forward=reshard_after_forward,
                mp_policy=policy,
                offload_policy=offload_policy,
            )
            # a reduce-scatter over more than one rank: a sum, then the division (gloo has no PREMUL_SUM); one
            # rank divides without a collective (FSDP2 would divide twice with the flag set there)
            wrapped.set_force_sum_reduction_for_comms(edp.size() > 1)
        else:
            wrapped = replicate(layer.experts, mesh=edp, mp_policy=policy)
        wrapped.set_gradient_divide_factor(float(gradient_ranks))


def cast_experts(model: nn.Module, dtype: torch.dtype) -> None:
    """The expert-parallel weights in `dtype` (master_weights none), as new DTensor parameters: assigning a
    DTensor parameter's .data changes its dtype but not its local tensor (torch 2.13), which FSDP2 shards."""
    for layer in expert_parallel_layers(model):
        for name, p in list(layer.experts.named_parameters(recurse=False)):
            assert isinstance(p, DTensor)
            local = p.to_local().detach().to(dtype)
            cast = DTensor.from_local(local, p.device_mesh, p.placements, run_check=False)
            setattr(layer.experts, name, nn.Parameter(cast, requires_grad=p.requires_grad))


def gradient_ranks(mesh: DeviceMesh | None) -> int:
    """dp x cp: the ranks whose gradients the wrapper averages (1 without a mesh)."""
    if mesh is None:
        return 1
    names = tuple(mesh.mesh_dim_names or ())
    return math.prod(mesh[n].size() for n in names if n in GRADIENT_DIMS)
