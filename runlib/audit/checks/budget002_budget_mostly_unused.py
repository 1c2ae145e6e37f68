"""BUDGET002: the plan uses less than half of a budget it is given.

Why it matters:
    A budget far above the plan usually means that one of the two is stale: the budget was set for
    another plan, a unit is off (days vs hours, gpu_hours vs node-hours), or the plan's tokens or
    MFU are not what was intended. If the budget is real, the spare compute could train on more
    tokens or a larger model.

Flagged:
    budget: {gpu_hours: 500K}
    tokens: 4T                   # needs ~145K GPU-hours

Preferred:
    budget: {gpu_hours: 160K}

How to fix:
    Lower the budget to what the plan needs (with a margin), or use it: the finding gives the tokens
    the budget would allow.
"""

import math
from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case
from runlib.spec.units import format_count

CODE = "BUDGET002"
NAME = "budget-mostly-unused"
SEVERITY = "warning"
MIN_USE = 0.5


def check(ctx: Context) -> Iterator[Finding]:
    budget, plan = ctx.spec.budget, ctx.plan
    tokens = plan.tokens_total
    if not plan.phases or tokens <= 0:
        return
    items = (
        ("gpu_hours", budget.gpu_hours, plan.gpu_hours, "GPU-hours", format_count),
        ("days", budget.days, plan.wall_days, "days", lambda x: f"{x:.3g}"),
        ("flops", budget.flops, plan.flops_total, "FLOPs", lambda x: f"{x:.3g}"),
    )
    for key, limit, needed, unit, fmt in items:
        if limit is None or limit <= 0 or not math.isfinite(needed) or needed <= 0:
            continue
        use = needed / limit
        if use >= MIN_USE:
            continue
        yield ctx.finding(
            f"budget.{key}",
            f"the plan needs {fmt(needed)} {unit}, {use:.0%} of the budget of {fmt(limit)} {unit}",
            f"lower budget.{key} to what the plan needs (with a margin), or use it: the budget allows about "
            f"{format_count(tokens * limit / needed)} tokens (now {format_count(tokens)})",
        )


PASS = [
    {},
    {"budget": {"gpu_hours": 8, "days": 0.046, "flops": 4.0e18}},  # each just over half used
]
FAIL = [
    case({"budget.gpu_hours": 10}, "warning"),
    case({"budget.days": 1}, "warning"),
    case({"budget.flops": 1.0e19}, "warning"),
]
