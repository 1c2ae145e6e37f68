"""MOE007: the experts' hidden units do not split evenly over the tensor-parallel degree.

Why it matters:
    Tensor parallelism splits an MLP by its hidden units: the first matmul by columns and the second by
    rows, each rank computing d_ff / tensor of them (Megatron-LM, Shoeybi et al. 2019, arXiv 1909.08053,
    section 3). Experts under tensor parallelism are split the same way, each expert's expert_d_ff
    hidden units over the tensor ranks (Megatron-LM's expert tensor parallelism,
    --expert-tensor-parallel-size, megatron/core/transformer/moe/experts.py; MoE parallel folding, Liu et
    al. 2025, arXiv 2504.14960, section 3), and the shared experts' MLP (shared_d_ff) with them: a width
    that does not divide cannot be sharded evenly, and the shards cannot be laid out.

Flagged:
    model: {moe: {experts: 64, top_k: 8, expert_d_ff: 1400}}
    parallelism: {tensor: 8}          # 1400 hidden units over 8 ranks

Preferred:
    model: {moe: {experts: 64, top_k: 8, expert_d_ff: 1408}}   # 176 per rank

How to fix:
    Use a tensor degree that divides expert_d_ff and shared_d_ff (the finding lists those within a node
    that also split the heads), or round the widths to a multiple of the tensor degree (the finding
    gives the nearest).
"""

import math
from collections.abc import Iterator

from runlib.audit.checks._shared import overrides_parallelism, split_by_override, who
from runlib.audit.registry import Context, Finding, case
from runlib.plan.layout import divisors_above_one
from runlib.spec.models.moe import MoeSpec

CODE = "MOE007"
NAME = "expert-d-ff-not-divisible-by-tensor"
SEVERITY = "error"


def _nearest_multiple(width: int, tensor: int) -> int:
    low = width // tensor * tensor
    high = low + tensor
    return low if low > 0 and width - low <= high - width else high


def _problem(moe: MoeSpec, tensor: int, heads: int, per_node: int) -> tuple[str, str] | None:
    if tensor <= 1:
        return None
    widths = {"expert_d_ff": moe.expert_d_ff}
    if moe.shared_d_ff is not None:
        widths["shared_d_ff"] = moe.shared_d_ff
    bad = {name: width for name, width in widths.items() if width % tensor}
    if not bad:
        return None
    message = "; ".join(
        f"{name} {width} does not split over tensor {tensor} ({width / tensor:g} hidden units per rank)"
        for name, width in bad.items()
    )
    # degrees within a node that also split the attention heads (PAR002)
    working = [t for t in divisors_above_one(math.gcd(*widths.values())) if t <= per_node and heads % t == 0]
    rounded = ", ".join(f"{name} {_nearest_multiple(width, tensor)}" for name, width in bad.items())
    degrees = ", ".join(str(t) for t in working)
    fix = (
        f"use tensor {degrees} (dividing the experts' widths and the heads)" if working else "use tensor 1"
    ) + f", or round the widths to a multiple of {tensor}: {rounded}"
    return message, fix


def check(ctx: Context) -> Iterator[Finding]:
    moe = ctx.spec.model.moe
    if moe is None:
        return
    phases = ctx.plan.phases
    own, global_names = split_by_override(ctx, overrides_parallelism("tensor"))
    heads = ctx.spec.model.heads
    for p in own:
        problem = _problem(moe, p.settings.parallelism.tensor, heads, p.settings.devices_per_node)
        if problem:
            yield ctx.finding(
                f"phases[{p.settings.index}].parallelism.tensor", f"phase {p.name!r}: {problem[0]}", problem[1]
            )
    if global_names or not phases:
        problem = _problem(moe, ctx.spec.parallelism.tensor, heads, ctx.spec.hardware.devices_per_node)
        if problem:
            yield ctx.finding("parallelism.tensor", f"{who(global_names, len(phases))}: {problem[0]}", problem[1])


_MOE = {"experts": 64, "top_k": 8, "expert_d_ff": 1408, "aux_loss": 0.01, "z_loss": 0.001}
PASS = [
    {},
    {"model.moe": {**_MOE, "expert_d_ff": 1400}},  # tensor 1
    {"model.moe": _MOE, "parallelism.tensor": 4},
    {"model.moe": {**_MOE, "shared_experts": 1, "shared_d_ff": 5632}, "parallelism.tensor": 4},
]
FAIL = [
    case({"model.moe": {**_MOE, "expert_d_ff": 1402}, "parallelism.tensor": 4}, "error"),
    case({"model.moe": {**_MOE, "shared_experts": 1, "shared_d_ff": 5630}, "parallelism.tensor": 4}, "error"),
    case({"model.moe": {**_MOE, "expert_d_ff": 1406}, "phases[2].parallelism": {"tensor": 4}}, "error"),
]
