"""What a mixture-of-experts model adds to one phase's plan: tokens per expert, the all-to-all traffic of
expert parallelism and its time, the share a capacity factor drops, and the activations of its layers.

All-to-all (GShard, Lepikhin et al. 2020, arXiv 2006.16668 section 2.2; DeepSeek-V3, arXiv 2412.19437
section 3.2.2): in each MoE layer every token's hidden state goes to the ranks of its top_k experts
(dispatch) and comes back weighted (combine), and the backward sends the gradients of both the other way:
4 x top_k x tokens x d_model values per layer and micro-batch leave a device for each MoE layer of its
pipeline stage, (ep - 1) / ep of them for another rank (a uniform spread of the experts chosen). A rank whose ep group spans nodes sends the
share bound for other nodes over the network, the rest over the node's links (Accelerator.link_gb_per_s
and network_gb_per_s); both run at once, so the slower sets the time. DeepSeek-V3 dispatches in FP8
(section 3.3); this counts the compute dtype's bytes. Node-limited routing (moe.groups_per_token) caps
the nodes a token reaches: the network share is at most groups_per_token / groups of the traffic when
the groups are the ep group's nodes (DeepSeek-V3: 4 of 8 nodes), which this applies.

Capacity (Switch Transformer, Fedus et al. 2021, arXiv 2101.03961 section 2.2): an expert takes at most
C = capacity_factor x T x top_k / E of a micro-batch's T x top_k assignments. Even a balanced router
assigns at random around its mean; with each assignment a draw over E experts an expert's load is
binomial(T x top_k, 1 / E), and the expected share dropped is E[(X - C)+] / mean (a normal approximation):
the least a capacity factor drops; a real router's imbalance drops more. Pure arithmetic: no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from runlib.plan.params import ParamCounts, moe_layers
from runlib.spec.models import ModelSpec

ROUTER_BYTES = 4  # the router's logits and probabilities are kept in fp32 (torchtitan's MoE, transformers' routers)


@dataclass(frozen=True, slots=True)
class MoePhasePlan:
    """One phase's expert traffic on one device (derived.phases[].moe)."""

    moe_layers: int  # MoE layers a token passes (MTP modules' included)
    moe_layers_per_device: float  # of them on one pipeline stage (the layers / pipeline degree)
    tokens_per_expert_per_step: float  # assignments one expert receives per optimizer step, all ranks, balanced
    all_to_all_bytes_per_step: float  # what one device sends per step (forward and backward, every MoE layer)
    all_to_all_seconds_per_step: float  # its time on the slower of the links it uses
    compute_seconds_per_step: float  # the step's model FLOPs on one device at the planned MFU
    ep_nodes: int  # nodes one expert-parallel group spans
    capacity_drop_share: float | None  # expected share of assignments a capacity factor drops (None: dropless)


def moe_hidden_width(model: ModelSpec) -> int:
    """The MLP hidden units one token passes through in an MoE layer: top_k routed experts and the shared ones."""
    moe = model.moe
    assert moe is not None
    shared = moe.shared_d_ff or moe.shared_experts * moe.expert_d_ff
    return moe.top_k * moe.expert_d_ff + shared


def activation_twin(model: ModelSpec) -> ModelSpec:
    """A dense model whose layers keep the same activations on average as this one's: d_ff the mean over the
    layers of the hidden units a token passes through (an MoE layer's moe_hidden_width, a dense layer's
    d_ff). The model itself when dense."""
    if model.moe is None:
        return model
    sparse = sum(moe_layers(model))
    mean = ((model.layers - sparse) * model.d_ff + sparse * moe_hidden_width(model)) / model.layers
    return model.model_copy(update={"d_ff": max(1, round(mean))})


def moe_dispatch_bytes_per_layer(model: ModelSpec, tokens: float, micro_batch: int, act_bytes: int) -> float:
    """What an MoE layer keeps beyond a dense MLP's activations, averaged over the layers: the top_k copies of
    each token sorted by expert (the experts' input) and the experts' outputs before the weighted combine
    (torchtitan's MoE, torchtitan/models/moe.py: routed_input and routed_output), and the router's fp32
    logits and probabilities."""
    moe = model.moe
    if moe is None:
        return 0.0
    share = sum(moe_layers(model)) / model.layers
    values = tokens * micro_batch * (2 * moe.top_k * model.d_model * act_bytes + 2 * moe.experts * ROUTER_BYTES)
    return share * values


def capacity_drop_share(capacity_factor: float, assignments: float, experts: int) -> float:
    """Expected share of `assignments` (T x top_k of one micro-batch) dropped by experts of capacity
    capacity_factor x assignments / experts, each expert's load binomial(assignments, 1 / experts) (module
    docstring), by the normal approximation: E[(X - C)+] = sigma phi(z) - (C - mu)(1 - Phi(z))."""
    mu = assignments / experts
    sigma = math.sqrt(assignments * (1 / experts) * (1 - 1 / experts))
    if mu <= 0:
        return 0.0
    if sigma == 0:
        return max(0.0, mu - capacity_factor * mu) / mu
    z = (capacity_factor * mu - mu) / sigma
    phi = math.exp(-z * z / 2) / math.sqrt(2 * math.pi)
    tail = 0.5 * math.erfc(z / math.sqrt(2))
    overflow = sigma * phi - (capacity_factor * mu - mu) * tail
    return max(0.0, overflow) / mu


def moe_phase_plan(
    model: ModelSpec,
    params: ParamCounts,
    *,
    seq_len: int,
    micro_batch: int,
    grad_accum: int,
    tokens_per_step: int,
    ep: int,
    cp: int,
    pp: int,
    devices_per_node: int,
    act_bytes: int,
    link_gb_per_s: float,
    network_gb_per_s: float,
    compute_seconds_per_step: float,
) -> MoePhasePlan | None:
    """The phase's expert traffic (module docstring); None for a dense model."""
    moe = model.moe
    if moe is None:
        return None
    layers = sum(moe_layers(model)) + (model.mtp.depth if model.mtp is not None and params.expert_per_layer else 0)
    tokens = seq_len / cp * micro_batch  # one device's tokens per micro-batch
    on_device = layers / pp  # a pipeline stage runs its own layers' all-to-alls
    sent = 4 * moe.top_k * tokens * model.d_model * act_bytes * (ep - 1) / ep * on_device * grad_accum
    ep_nodes = max(1, math.ceil(ep / devices_per_node))
    off_node = (ep - min(ep, devices_per_node)) / (ep - 1) if ep > 1 else 0.0
    if moe.groups_per_token is not None and moe.groups is not None and ep_nodes > 1:
        off_node = min(off_node, moe.groups_per_token / moe.groups)
    seconds = (
        max(
            sent * off_node / (network_gb_per_s * 1e9) if network_gb_per_s > 0 else math.inf,
            sent * (1 - off_node) / (link_gb_per_s * 1e9) if link_gb_per_s > 0 else math.inf,
        )
        if sent
        else 0.0
    )
    drop = None
    if moe.capacity_factor is not None:
        drop = capacity_drop_share(moe.capacity_factor, tokens * moe.top_k, moe.experts)
    return MoePhasePlan(
        moe_layers=layers,
        moe_layers_per_device=on_device,
        tokens_per_expert_per_step=tokens_per_step * moe.top_k / moe.experts,
        all_to_all_bytes_per_step=sent,
        all_to_all_seconds_per_step=seconds,
        compute_seconds_per_step=compute_seconds_per_step,
        ep_nodes=ep_nodes,
        capacity_drop_share=drop,
    )
