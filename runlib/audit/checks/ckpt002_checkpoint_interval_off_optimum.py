"""CKPT002: the checkpoint interval is far from Young's optimum.

Why it matters:
    Every failure loses the work since the last checkpoint (half an interval on average) and every
    checkpoint costs its write time. Young's first-order optimum (J. W. Young 1974, CACM 17(9))
    balances the two: interval = sqrt(2 * write_time * MTBF), with the job's MTBF = the node MTBF
    divided by the nodes. More than 3x longer loses much more work per failure than needed; more
    than 3x shorter spends write time (and storage traffic) for little protection. Given only
    when hardware.node_mtbf_hours and checkpoint.every are set.

Flagged:
    hardware: {nodes: 64, node_mtbf_hours: 50000}
    checkpoint: {every: 20000 steps}     # ~3 h between checkpoints, optimum ~0.6 h

Preferred:
    checkpoint: {every: 3800 steps}

How to fix:
    Set checkpoint.every to about the optimum the finding gives (in steps). The write time comes
    from the checkpoint size and hardware.checkpoint_write_gb_per_s per node.
"""

import math
from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "CKPT002"
NAME = "checkpoint-interval-off-optimum"
SEVERITY = "warning"
FACTOR = 3.0


def _round_steps(steps: float) -> int:
    """Two significant digits, at least 1: 3764 -> 3800."""
    if steps < 10:
        return max(1, round(steps))
    scale = 10 ** (math.floor(math.log10(steps)) - 1)
    return int(round(steps / scale) * scale)


def _hours(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def check(ctx: Context) -> Iterator[Finding]:
    spec, ck = ctx.spec, ctx.plan.checkpoint
    if not spec.hardware.node_mtbf_hours or spec.checkpoint.every is None:
        return
    hours, steps, young = ck.interval_hours, ck.interval_steps, ck.young_optimum_hours
    if not hours or not steps or not young or not all(math.isfinite(x) for x in (hours, steps, young)):
        return
    if hours <= 0 or steps <= 0 or young <= 0:
        return
    ratio = hours / young
    if 1 / FACTOR <= ratio <= FACTOR:
        return
    optimum = _round_steps(young * steps / hours)  # hours -> steps at the interval's tokens per hour
    side = f"{ratio:.1f}x longer" if ratio > 1 else f"{1 / ratio:.1f}x shorter"
    nodes = spec.hardware.nodes
    fix = f"set checkpoint.every: {optimum} steps (about {young:.3g} h)"
    run_steps = ctx.plan.steps_total
    if run_steps and optimum >= run_steps:
        fix += f"; that is beyond the run's {run_steps} steps, so the phase-end checkpoints alone would do"
    yield ctx.finding(
        "checkpoint.every",
        f"checkpoint.every: {spec.checkpoint.every} is {hours:.3g} h of training, {side} than Young's optimum "
        f"{young:.3g} h = sqrt(2 * write {ck.write_seconds:.3g} s * job MTBF {_hours(ck.job_mtbf_hours or 0)} h "
        f"(node MTBF {_hours(spec.hardware.node_mtbf_hours)} h / {nodes} node{'s' if nodes != 1 else ''}))",
        fix,
        value=f"{optimum} steps",
    )


PASS = [
    {},
    {"hardware.node_mtbf_hours": 20},  # optimum ~0.082 h, interval ~0.061 h
    {"hardware.node_mtbf_hours": 50000, "checkpoint.every": "__delete__"},
]
FAIL = [
    case({"hardware.node_mtbf_hours": 50000}, "warning"),  # optimum ~4.1 h: checkpoints far too often
    case({"hardware.node_mtbf_hours": 0.5}, "warning"),  # optimum ~0.013 h: far too rarely
]
