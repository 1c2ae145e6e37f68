"""CKPT002: the checkpoint interval is far from Young's optimum, at a material cost.

Why it matters:
    Every failure loses the work since the last checkpoint (half an interval on average) and every
    checkpoint costs its write time. Young's first-order model (J. W. Young 1974, CACM 17(9))
    gives the fraction of the run lost as write / interval + interval / (2 * MTBF), smallest at
    interval = sqrt(2 * write * MTBF), with the job's MTBF = the node MTBF / nodes. Without
    hardware.node_mtbf_hours a GPU job is given Llama 3's published rate: 419 unexpected
    interruptions in 54 days on 16,384 GPUs (Dubey et al. 2024, section 3.3.4), one per ~50,700
    GPU-hours, so a job on 2,048 GPUs fails about once a day. The write time is the checkpoint
    (weights at their highest precision + optimizer states) over nodes x
    hardware.checkpoint_write_gb_per_s (default 1 GB/s a node: Llama 3's storage sustains 2 TB/s
    for 2,048 nodes, Dubey et al. 2024 section 3.3.1), or hardware.storage_write_gb_per_s when
    given and smaller. A warning when the interval is more than 3x off the optimum and that costs
    at least 2% more of the run's time than the optimum does.

    Young's formula is first-order: with failures at random (exponential, mean M), the expected
    time to get through an interval of work t is M x (exp(t / M) - 1) (Daly 2006, FGCS 22(3),
    without the write and restart times), so an interval several times the job's MTBF almost never
    completes: at 13x, one attempt in 440,000 does. An error when the expected progress, t over
    that time, is under half: the run spends more time redoing work than doing it.

Flagged:
    hardware: {nodes: 256, devices_per_node: 8}       # 2,048 GPUs: a failure about every 25 h
    checkpoint: {every: 10 h of steps}                 # ~20% of the run redone after failures

Preferred:
    checkpoint: {every: 1.6 h of steps}                # Young's optimum for a 96 GB write at 0.5 GB/s

    With checkpoint.async_save the write overlaps training, which waits only when the next save comes
    before the last one is written: the optimum is then the write time itself, and the cost counted is
    the wait (the copy in memory before the write is not modelled).

How to fix:
    Set checkpoint.every to about the optimum the finding gives (in steps), or state your
    cluster's hardware.node_mtbf_hours and hardware.storage_write_gb_per_s so the optimum is yours.
"""

import math
from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "CKPT002"
NAME = "checkpoint-interval-off-optimum"
SEVERITY = "warning"
FACTOR = 3.0
LEAST_PROGRESS = 0.5  # expected work done over time spent, under exponential failures: below it, an error
MATERIAL_FRACTION = 0.02  # of the run's time lost beyond the optimum's loss (a week-long run: 3.4 h)


def _round_steps(steps: float) -> int:
    """Two significant digits, at least 1: 3764 -> 3800."""
    if steps < 10:
        return max(1, round(steps))
    scale = 10 ** (math.floor(math.log10(steps)) - 1)
    return int(round(steps / scale) * scale)


def _span(hours: float) -> str:
    """A duration for a message: '1.63 h', '39 min', '12 s'."""
    if hours >= 100:
        return f"{hours:,.0f} h"
    if hours >= 1:
        return f"{hours:.3g} h"
    if hours * 60 >= 1:
        return f"{hours * 60:.3g} min"
    return f"{hours * 3600:.3g} s"


def _pct(fraction: float) -> str:
    return f"{fraction * 100:,.0f}%" if fraction >= 1 else f"{fraction * 100:.2g}%"


def lost_fraction(interval_hours: float, write_hours: float, mtbf_hours: float) -> float:
    """Young's first-order loss: writes + half an interval redone per failure, as a fraction of the run."""
    return write_hours / interval_hours + interval_hours / (2 * mtbf_hours)


def expected_progress(interval_hours: float, mtbf_hours: float) -> float:
    """The work done over the time spent with exponential failures (Daly 2006, without write and restart times):
    an interval over the expected time to get through it."""
    exponent = interval_hours / mtbf_hours
    if exponent > 700:  # exp overflows: no attempt ever completes
        return 0.0
    return interval_hours / (mtbf_hours * math.expm1(exponent))


def check(ctx: Context) -> Iterator[Finding]:
    spec, ck = ctx.spec, ctx.plan.checkpoint
    if spec.checkpoint.every is None:
        return
    hours, steps, young, mtbf = ck.interval_hours, ck.interval_steps, ck.young_optimum_hours, ck.job_mtbf_hours
    if hours is None or steps is None or young is None or mtbf is None:
        return
    if not all(math.isfinite(x) and x > 0 for x in (hours, steps, young, mtbf)):
        return
    ratio = hours / young
    if 1 / FACTOR <= ratio <= FACTOR:
        return
    # the training time a checkpoint costs: its write, or with async_save only the wait for it (none at the
    # optimum, which is then the write time: the next save starts as the write ends)
    write_hours = ck.stall_seconds / 3600
    best_write_hours = 0.0 if spec.checkpoint.async_save else write_hours
    optimum = _round_steps(young * steps / hours)  # hours -> steps at the interval's tokens per hour
    progress = expected_progress(hours, mtbf)
    if progress < LEAST_PROGRESS:
        yield ctx.finding(
            "checkpoint.every",
            f"checkpoint.every: {spec.checkpoint.every} is {_span(hours)} of training, {hours / mtbf:.3g}x the job's "
            f"MTBF {_span(mtbf)} ({ck.mtbf_basis}): with failures at random, an interval completes before a failure "
            f"in {math.exp(-hours / mtbf):.2g} of attempts, so the run makes {_pct(progress)} of its "
            "time's progress and redoes the rest",
            f"set checkpoint.every: {optimum} steps (about {_span(young)}, Young's optimum)",
            value=f"{optimum} steps",
            severity="error",
        )
        return
    lost, lost_best = lost_fraction(hours, write_hours, mtbf), lost_fraction(young, best_write_hours, mtbf)
    if lost - lost_best < MATERIAL_FRACTION:
        return  # far from the optimum, but it costs under 2% of the run: not worth a finding
    side = f"{ratio:.1f}x longer" if ratio > 1 else f"{1 / ratio:.1f}x shorter"
    writes, redone = write_hours / hours, hours / (2 * mtbf)
    fix = f"set checkpoint.every: {optimum} steps (about {_span(young)})"
    run_steps = ctx.plan.steps_total
    if run_steps and optimum >= run_steps:
        fix += f"; that is beyond the run's {run_steps} steps, so the phase-end checkpoints alone would do"
    if not spec.hardware.node_mtbf_hours:
        fix += "; or give hardware.node_mtbf_hours and hardware.storage_write_gb_per_s measured on your cluster"
    if ratio < 1 and not spec.checkpoint.async_save:
        fix += (
            " (an asynchronous save, e.g. torch.distributed.checkpoint.async_save, blocks training only for the copy "
            "to host memory: give the rate training sees as storage_write_gb_per_s)"
        )
    if spec.checkpoint.async_save:
        basis = f"the write time (async_save: training waits {_span(write_hours)} per checkpoint)"
    else:
        basis = f"sqrt(2 * write {_span(write_hours)} * job MTBF {_span(mtbf)})"
    yield ctx.finding(
        "checkpoint.every",
        f"checkpoint.every: {spec.checkpoint.every} is {_span(hours)} of training, {side} than Young's optimum "
        f"{_span(young)} = {basis}; it loses "
        f"{_pct(lost)} of the run's time (writes {_pct(writes)}, work redone after failures "
        f"{_pct(redone)}) against {_pct(lost_best)} at the optimum. Write: {ck.size_bytes / 1e9:,.4g} GB "
        f"at {ck.write_gb_per_s:.4g} GB/s; job MTBF: {ck.mtbf_basis}",
        fix,
        value=f"{optimum} steps",
    )


PASS = [
    {},
    {"hardware.node_mtbf_hours": 20},  # optimum ~7 min, interval ~3.4 min
    {"hardware.node_mtbf_hours": 50000, "checkpoint.every": "__delete__"},
    {"hardware.node_mtbf_hours": 50000},  # 100x more often than the optimum, but the writes cost 0.2%
    {"hardware.accelerator": "cpu", "hardware.devices_per_node": 2, "checkpoint.every": "4 steps"},  # no rate
    # 100x more often than Young's optimum for a blocking write, 6 GB at 8 GB/s in the background: no wait
    {"hardware.node_mtbf_hours": 2000, "checkpoint.every": "10 steps", "checkpoint.async_save": True},
]
FAIL = [
    # slow storage (1 MB/s: a 1.2 GB checkpoint takes 20 min) written every 100 steps (~20 s)
    case({"hardware.storage_write_gb_per_s": 0.001, "checkpoint.every": "100 steps"}, "warning"),
    case({"hardware.node_mtbf_hours": 0.05}, "warning"),  # MTBF 3 min, interval ~3.4 min: 0.54 progress
    case({"hardware.node_mtbf_hours": 0.03}, "error"),  # MTBF 1.8 min: 0.33 progress
    case({"hardware.node_mtbf_hours": 0.0044}, "error"),  # 13x the MTBF: almost never completes
    # written in the background, a 20-min write every 20 s still makes training wait ~20 min per checkpoint
    case(
        {"hardware.storage_write_gb_per_s": 0.001, "checkpoint.every": "100 steps", "checkpoint.async_save": True},
        "warning",
    ),
]
