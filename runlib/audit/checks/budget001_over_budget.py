"""BUDGET001: the plan needs more GPU-hours, days or FLOPs than the budget gives.

Why it matters:
    A run that needs more compute than it has is stopped before its schedule ends: the LR never
    decays, the anneal phase never runs, and the checkpoint at hand is a mid-training one. The
    estimate is the model FLOPs (6N per token plus attention, PaLM convention) over the accelerator's
    dense peak at the assumed MFU; it is only as good as that MFU (BUDGET004).

Flagged:
    budget: {gpu_hours: 100K}
    tokens: 4T                  # needs ~145K GPU-hours at mfu 0.4

Preferred:
    budget: {gpu_hours: 150K}   # or tokens: 2.7T

How to fix:
    Cut the tokens to what the budget allows (the finding gives the number), add nodes (for a days
    budget), or raise the budget.
"""

import math
from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case
from runlib.spec.units import format_count

CODE = "BUDGET001"
NAME = "over-budget"
SEVERITY = "error"


def check(ctx: Context) -> Iterator[Finding]:
    budget, plan = ctx.spec.budget, ctx.plan
    tokens = plan.tokens_total
    if not plan.phases or tokens <= 0:
        return

    def fitting_tokens(limit: float, needed: float) -> str:
        return format_count(tokens * limit / needed) if needed > 0 else "?"

    if budget.gpu_hours is not None and math.isfinite(plan.gpu_hours) and plan.gpu_hours > budget.gpu_hours:
        yield ctx.finding(
            "budget.gpu_hours",
            f"the plan needs {format_count(plan.gpu_hours)} GPU-hours ({plan.devices} x {plan.accelerator.key} at mfu "
            f"{ctx.spec.hardware.mfu:g}), over the budget of {format_count(budget.gpu_hours)}",
            f"cut tokens to about {fitting_tokens(budget.gpu_hours, plan.gpu_hours)} (from {format_count(tokens)}), "
            f"or raise budget.gpu_hours to at least {math.ceil(plan.gpu_hours)}",
        )
    if budget.days is not None and math.isfinite(plan.wall_days) and plan.wall_days > budget.days:
        nodes = ctx.spec.hardware.nodes
        more = math.ceil(nodes * plan.wall_days / budget.days) if budget.days > 0 else None
        nodes_hint = f"use about {more} nodes instead of {nodes} (and re-check the batch), " if more else ""
        yield ctx.finding(
            "budget.days",
            f"the plan takes {plan.wall_days:.3g} days on {plan.devices} x {plan.accelerator.key} at mfu "
            f"{ctx.spec.hardware.mfu:g}, over the budget of {budget.days:g} days",
            f"{nodes_hint}cut tokens to about {fitting_tokens(budget.days, plan.wall_days)}, or raise budget.days",
        )
    if budget.flops is not None and plan.flops_total > budget.flops:
        yield ctx.finding(
            "budget.flops",
            f"the plan needs {plan.flops_total:.3g} FLOPs, over the budget of {budget.flops:.3g}",
            f"cut tokens to about {fitting_tokens(budget.flops, plan.flops_total)} (from {format_count(tokens)}), "
            "or raise budget.flops",
        )


PASS = [
    {},
    {"budget": {"gpu_hours": 5, "days": 0.03, "flops": 2.1e18}},  # plan: ~4.5 GPU-hours, 0.023 days, 2.01e18 FLOPs
]
FAIL = [
    case({"budget.gpu_hours": 4}, "error"),
    case({"budget.days": 0.02}, "error"),
    case({"budget.flops": 1.0e18}, "error"),
]
