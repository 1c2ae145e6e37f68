"""SCHED005: WSD decay shorter than 1% or longer than 30% of the run.

Why it matters:
    With warmup-stable-decay the final decay (cooldown) is where the loss drops; Hägele et al. 2024
    (arXiv 2405.18392) find that a cooldown of roughly 10-20% of the run matches or beats a
    cosine schedule, with diminishing returns beyond. A decay under 1% of the run leaves most of
    that gain on the table (or is a unit slip, e.g. 0.1 meant as 10%): a warning. One over 30% costs
    no loss (Hägele et al.'s returns diminish, they do not reverse; DeepSeek-V3 decayed over about a
    third of its tokens, arXiv 2412.19437 §4.2) but gives up the point of WSD, a long stable phase
    that can be branched and continued: info. The bounds are wide on purpose, around 10-20%.

Flagged:
    schedule: {kind: wsd, warmup: 1%, decay: 0.5%}

Preferred:
    schedule: {kind: wsd, warmup: 1%, decay: 10%}

How to fix:
    Set schedule.decay to about 10-20% of the run (for a run with an anneal phase, the length of
    that phase).
"""

from collections.abc import Iterator

from runlib.audit.checks._shared import tokens_and_steps
from runlib.audit.registry import Context, Finding, case

CODE = "SCHED005"
NAME = "wsd-decay-length-unusual"
SEVERITY = "warning"
LOW, HIGH = 0.01, 0.30


def check(ctx: Context) -> Iterator[Finding]:
    if ctx.spec.schedule.kind != "wsd":
        return
    run = ctx.plan.schedule.run_tokens
    if run <= 0:
        return
    decay = ctx.plan.decay_tokens or 0.0
    share = decay / run
    if LOW <= share <= HIGH:
        return
    stated = ctx.spec.schedule.decay
    if decay <= 0:
        message = "WSD without a decay (schedule.decay omitted or 0): the LR never anneals from its peak"
    elif share < LOW:
        message = (
            f"WSD decay {stated} = {tokens_and_steps(ctx, decay)} is {share:.2%} of the run, under 1%: "
            "the LR barely anneals, leaving most of the cooldown's loss drop unrealized"
        )
    else:
        message = (
            f"WSD decay {stated} = {tokens_and_steps(ctx, decay)} is {share:.0%} of the run, over 30%: "
            "a long stretch trains below the peak LR, giving up WSD's long stable phase"
        )
    yield ctx.finding(
        "schedule.decay",
        message,
        f"set schedule.decay to 10-20% of the run, between {tokens_and_steps(ctx, 0.1 * run)} and {tokens_and_steps(ctx, 0.2 * run)}, "
        "or to the length of the anneal phase",
        severity="info" if share > HIGH else None,
    )


PASS = [
    {},
    {"schedule.decay": "1%"},
    {"schedule.decay": "30%"},
    {"schedule.kind": "cosine", "schedule.decay": "__delete__"},
]
FAIL = [
    case({"schedule.decay": "0.5%"}, "warning"),
    case({"schedule.decay": "40%"}, "info"),
    case({"schedule.decay": "__delete__"}, "warning"),
]
