"""BUDGET004: the assumed MFU is outside what real runs reach.

Why it matters:
    Every time and cost estimate divides by the assumed model FLOPs utilization. Large dense runs
    reach about 0.35-0.45 (Llama 3, arXiv 2407.21783: 38-43% on H100; MegaScale, arXiv 2402.15627:
    55% at best); above 0.6 the plan is optimistic and the budget will run out early. Below 0.1
    the estimate is either pessimistic by a large factor or describes a setup that wastes most of
    the hardware.

Flagged:
    hardware: {mfu: 0.8}

Preferred:
    hardware: {mfu: 0.4}   # or the MFU measured in a short benchmark of this setup

How to fix:
    Use the MFU measured on this model and layout (a few hundred steps suffice), or about 0.35-0.45
    for a plan on modern GPUs.
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "BUDGET004"
NAME = "implausible-mfu"
SEVERITY = "warning"
LOW, HIGH = 0.1, 0.6


def check(ctx: Context) -> Iterator[Finding]:
    mfu = ctx.spec.hardware.mfu
    if mfu > HIGH:
        message = f"mfu {mfu:g} is above {HIGH:g}: large runs reach about 0.35-0.45, so the time and cost estimates are too low"
    elif mfu < LOW:
        message = f"mfu {mfu:g} is below {LOW:g}: the estimates assume most of the hardware idles"
    else:
        return
    yield ctx.finding(
        "hardware.mfu",
        message,
        "use the MFU measured on this model and layout, or about 0.35-0.45 for planning",
    )


PASS = [{}, {"hardware.mfu": 0.6}, {"hardware.mfu": 0.1}]
FAIL = [
    case({"hardware.mfu": 0.65}, "warning"),
    case({"hardware.mfu": 0.05}, "warning"),
]
