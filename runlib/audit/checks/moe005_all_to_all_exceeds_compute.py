"""MOE005: expert parallelism across nodes spends longer in all-to-all than in computation.

Why it matters:
    Each MoE layer sends every token's hidden state to the ranks of its top_k experts and back (dispatch
    and combine), forward and backward (GShard, Lepikhin et al. 2020, arXiv 2006.16668, section 3.1).
    When the expert group spans nodes, the share bound for other nodes crosses the network, an order of
    magnitude slower than the links inside a node. DeepSeek-V3 (arXiv 2412.19437) trains its expert
    parallelism of 64 over 8 nodes only by keeping that traffic no longer than the computation it hides
    behind: section 3.2.1 (DualPipe) overlaps the all-to-all of one micro-batch chunk with the
    computation of another, at a computation-to-communication ratio of about 1:1, and section 3.2.2
    caps the network traffic by sending each token to at most 4 nodes (node-limited routing) over
    50 GB/s of InfiniBand per GPU, the rest over 160 GB/s of NVLink. Where the plan's all-to-all time
    per step (runlib.plan.moe: 4 x top_k x tokens x d_model values per MoE layer of the device's pipeline
    stage and micro-batch, the off-node share over the network) exceeds the step's compute time at the planned MFU, even a perfect
    overlap leaves the devices waiting on the network: the step is communication-bound and the planned
    MFU (and the budget built on it) will not be reached. Not checked on a TPU, whose chips share one
    interconnect across their hosts.

Flagged:
    hardware: {accelerator: a100-80gb, nodes: 4, devices_per_node: 8}
    model: {d_model: 768, moe: {experts: 64, top_k: 8, expert_d_ff: 256}}
    parallelism: {expert: 32}        # 4 nodes of 25 GB/s network for a small model's all-to-all

Preferred:
    parallelism: {expert: 8}         # each expert group inside one node's NVLink

How to fix:
    Keep each expert group within a node (expert <= devices_per_node: the finding estimates its
    all-to-all), or limit the nodes a token reaches (model.moe.groups: the nodes of an expert group,
    groups_per_token below it, as DeepSeek-V3's 4 of 8), or use a faster network.
"""

import math
from collections.abc import Iterator

from runlib.audit.checks._shared import overrides_parallelism, split_by_override, who
from runlib.audit.registry import Context, Finding, case
from runlib.plan import PhasePlan
from runlib.plan.layout import build_layout, divisors_above_one
from runlib.spec.hardware import interconnect_gb_per_s

CODE = "MOE005"
NAME = "all-to-all-exceeds-compute"
SEVERITY = "warning"


def _in_node_degree(p: PhasePlan, experts: int) -> int:
    """The largest expert degree within one node that divides the experts and the ranks the phase lends."""
    s = p.settings
    layout = build_layout(s.parallelism, nodes=s.nodes, devices_per_node=s.devices_per_node)
    ranks = layout.data_parallel * layout.cp
    valid = [1, *divisors_above_one(math.gcd(experts, ranks))]
    return max(d for d in valid if d <= s.devices_per_node)


def _problem(ctx: Context, p: PhasePlan) -> tuple[float, str, str, int] | None:
    """(all-to-all / compute, message, fix, in-node degree) of a communication-bound phase, or None."""
    moe, plan = ctx.spec.model.moe, p.moe
    if moe is None or plan is None or plan.ep_nodes <= 1:
        return None
    a2a, compute = plan.all_to_all_seconds_per_step, plan.compute_seconds_per_step
    if not a2a > compute:
        return None
    s = p.settings
    ep = s.parallelism.expert
    link, network = interconnect_gb_per_s(ctx.spec.hardware.accelerator)
    message = (
        f"expert {ep} spans {plan.ep_nodes} nodes of {s.devices_per_node} devices: the all-to-all sends "
        f"{plan.all_to_all_bytes_per_step / 1e9:,.4g} GB per device and step ({plan.moe_layers_per_device:.3g} MoE "
        f"layers per pipeline stage, forward and backward), {a2a:.3g} s over the {network:g} GB/s network (and {link:g} GB/s links in a node) "
        f"against {compute:.3g} s of compute per step at hardware.mfu {ctx.spec.hardware.mfu:g}: "
        f"{a2a / compute:.2g}x, communication-bound even if all of it overlaps the computation"
    )
    degree = _in_node_degree(p, moe.experts)
    options = []
    if degree > 1:
        inside = plan.all_to_all_bytes_per_step * ((degree - 1) / degree) / ((ep - 1) / ep) / (link * 1e9)
        options.append(
            f"use expert {degree} to keep each expert group in one node (an estimated {inside:.3g} s per step over "
            f"the {link:g} GB/s links; {moe.experts // degree} experts per rank: check MEM001)"
        )
    else:
        options.append("use expert 1 (every rank holding every expert: check MEM001)")
    if moe.groups is None and moe.experts % plan.ep_nodes == 0:
        options.append(
            f"limit the nodes a token reaches: model.moe.groups {plan.ep_nodes}, groups_per_token "
            f"{max(1, plan.ep_nodes // 2)} (DeepSeek-V3: 4 of 8 nodes)"
        )
    elif moe.groups is not None and moe.groups_per_token is not None and moe.groups_per_token > 1:
        options.append(f"route each token to fewer groups (groups_per_token {moe.groups_per_token} of {moe.groups})")
    options.append("use a faster network")
    return a2a / compute, message, "; or ".join(options), degree


def check(ctx: Context) -> Iterator[Finding]:
    if ctx.spec.model.moe is None or ctx.spec.hardware.accelerator.lower().startswith("tpu"):
        return  # a TPU pod's chips share one interconnect across hosts: no bandwidth cliff at a host
    own, global_names = split_by_override(ctx, overrides_parallelism("expert"))
    for p in own:
        problem = _problem(ctx, p)
        if problem:
            yield ctx.finding(
                f"phases[{p.settings.index}].parallelism.expert",
                f"phase {p.name!r}: {problem[1]}",
                problem[2],
                value=problem[3],
            )
    flagged = [(problem, p.name) for p in ctx.plan.phases if p.name in global_names and (problem := _problem(ctx, p))]
    if flagged:
        (_, message, fix, degree), worst = max(flagged, key=lambda f: f[0][0])
        names = [name for _, name in flagged]
        at = f" (phase {worst!r}, the most bound)" if len(names) > 1 else ""
        yield ctx.finding("parallelism.expert", f"{who(names, len(ctx.plan.phases))}{at}: {message}", fix, value=degree)


_MOE = {"experts": 64, "top_k": 8, "expert_d_ff": 256, "aux_loss": 0.01, "z_loss": 0.001}
_FOUR_NODES = {"hardware.nodes": 4, "batch.micro_batch": 4, "batch.grad_accum": 1}
PASS = [
    {},
    {"model.moe": _MOE, **_FOUR_NODES},
    # each expert group inside one node
    {"model.moe": _MOE, **_FOUR_NODES, "parallelism.expert": 8},
    # a TPU pod: one interconnect across hosts
    {
        "model.moe": _MOE,
        "hardware.accelerator": "tpu-v4",
        "hardware.nodes": 8,
        "hardware.devices_per_node": 4,
        "parallelism.expert": 16,
        "batch.micro_batch": 4,
        "batch.grad_accum": 1,
    },
    # a wide model with node-limited routing: 8 groups, a token's experts on at most 2 of the 8 nodes
    {
        "model.moe": {**_MOE, "experts": 64, "top_k": 4, "expert_d_ff": 4096, "groups": 8, "groups_per_token": 2},
        "model.d_model": 8192,
        "model.heads": 64,
        "model.kv_heads": 8,
        "model.d_ff": 28672,
        "hardware.accelerator": "h100-sxm",
        "hardware.nodes": 8,
        "parallelism.expert": 64,
        "batch.micro_batch": 2,
        "batch.grad_accum": 1,
    },
]
FAIL = [
    case({"model.moe": _MOE, **_FOUR_NODES, "parallelism.expert": 32}, "warning"),
    case({"model.moe": _MOE, **_FOUR_NODES, "phases[0].parallelism": {"expert": 16}}, "warning"),
]
