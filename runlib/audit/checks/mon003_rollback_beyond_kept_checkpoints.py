"""MON003: the spike rollback reaches further back than any checkpoint the run keeps.

Why it matters:
    monitor.spike with action: rollback restores the newest checkpoint at least `rollback` steps
    before the spike, then skips the offending batches (PaLM restarted about 100 steps before a
    spike, arXiv 2204.02311 §5.1). Only checkpoint.keep checkpoints are retained, every
    checkpoint.every steps, so the oldest one is at most keep x every - 1 steps back (just before
    a save) and at least (keep - 1) x every steps back (just after one). A rollback longer than the
    first finds no checkpoint old enough on any spike: the trainer can only skip the batch, and the
    rollback the spec asks for never happens; longer than the second, only on some spikes.

Flagged:
    checkpoint: {every: 2000 steps, keep: 2}
    monitor: {spike: {action: rollback, rollback: 5000 steps}}     # the oldest kept: <= 3,999 back

Preferred:
    checkpoint: {every: 2000 steps, keep: 4}
    monitor: {spike: {action: rollback, rollback: 5000 steps}}

How to fix:
    Keep more checkpoints (checkpoint.keep >= rollback / every + 1), checkpoint more often, or roll
    back less far.
"""

import math
from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "MON003"
NAME = "rollback-beyond-kept-checkpoints"
SEVERITY = "error"


def check(ctx: Context) -> Iterator[Finding]:
    spike, checkpoint = ctx.spec.monitor.spike, ctx.spec.checkpoint
    if spike is None or spike.action != "rollback" or spike.rollback is None:
        return
    rollback = max(1, round(ctx.plan.duration_steps(spike.rollback)))
    if checkpoint.every is None:
        yield ctx.finding(
            "monitor.spike.rollback",
            f"monitor.spike.rollback: {spike.rollback} with no checkpoint.every: a phase keeps no checkpoint before "
            "its end, so a spike's rollback finds nothing to restore and only skips the batch",
            f"set checkpoint.every (e.g. {rollback} steps) and checkpoint.keep: 2 or more",
        )
        return
    every = max(1, round(ctx.plan.duration_steps(checkpoint.every)))
    keep = checkpoint.keep
    always, sometimes = keep * every - 1, (keep - 1) * every
    if rollback <= sometimes:
        return
    needed = math.ceil(rollback / every) + 1
    reach = f"checkpoint.every {every:,} steps x keep {keep} keeps checkpoints {sometimes:,} to {always:,} steps back"
    if rollback > always:
        yield ctx.finding(
            "monitor.spike.rollback",
            f"monitor.spike.rollback: {spike.rollback} ({rollback:,} steps) reaches further back than any checkpoint "
            f"kept ({reach}): no spike can roll back, each only skips its batch",
            f"set checkpoint.keep: {needed}, or roll back at most {sometimes:,} steps",
            value=needed,
        )
    else:
        yield ctx.finding(
            "monitor.spike.rollback",
            f"monitor.spike.rollback: {spike.rollback} ({rollback:,} steps) reaches past the oldest checkpoint kept "
            f"on some spikes ({reach}): those only skip their batch",
            f"set checkpoint.keep: {needed}, or roll back at most {sometimes:,} steps",
            value=needed,
            severity="warning",
        )


PASS = [
    {},
    {"monitor.spike.rollback": "2000 steps"},  # every 1000 x keep 3: 2,000 to 2,999 back
    {"monitor.spike.action": "skip", "checkpoint.every": "__delete__"},
    {"monitor.spike": "__delete__"},
]
FAIL = [
    case({"checkpoint.every": "2000 steps", "checkpoint.keep": 2, "monitor.spike.rollback": "5000 steps"}, "error"),
    case({"monitor.spike.rollback": "2500 steps"}, "warning"),  # past 2,000 after a save
    case({"checkpoint.every": "__delete__"}, "error"),
]
