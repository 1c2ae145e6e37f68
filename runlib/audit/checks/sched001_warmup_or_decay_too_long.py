"""SCHED001: warmup as long as the run, or warmup + decay longer than the run.

Why it matters:
    A warmup that does not end before the run ends never reaches the peak LR; with WSD, a final
    decay that overlaps the warmup never trains at the peak either and is cut short. Megatron-LM
    asserts lr_warmup_steps < lr_decay_steps (megatron/core/optimizer_param_scheduler.py),
    torchtitan warns and clamps warmup and warmup + decay to the run (components/optimizer/
    lr_scheduler.py), LitGPT warns on warmup >= max_steps, and prime-rl crashed on
    warmup_steps == max_steps (PrimeIntellect-ai/prime-rl issue #968). The WSD clause applies to
    WSD only: a cosine or linear decay longer than the run is SCHED002's finding.

Flagged:
    schedule: {kind: wsd, warmup: 50%, decay: 60%}

Preferred:
    schedule: {kind: wsd, warmup: 1%, decay: 10%}

How to fix:
    Shorten the warmup (typically 0.1-2% of the run) and, with WSD, the decay so that warmup +
    decay fits in the run; the finding gives both durations in tokens and steps.
"""

from collections.abc import Iterator

from runlib.audit.checks._shared import tokens_and_steps
from runlib.audit.registry import Context, Finding, case
from runlib.spec.units import Duration

CODE = "SCHED001"
NAME = "warmup-or-decay-too-long"
SEVERITY = "error"


def _stated(ctx: Context, duration: Duration | None, tokens: float) -> str:
    if duration is None or duration.unit == "tokens":
        return tokens_and_steps(ctx, tokens)
    return f"{duration} = {tokens_and_steps(ctx, tokens)}"


def check(ctx: Context) -> Iterator[Finding]:
    plan = ctx.plan
    schedule = ctx.spec.schedule
    run = plan.schedule.run_tokens
    if run <= 0:
        return
    one_step = max((seg.tokens_per_step for p in plan.phases for seg in p.span.segments), default=0)
    warmup = plan.warmup_tokens or 0.0
    if warmup >= run - one_step and warmup > 0:
        yield ctx.finding(
            "schedule.warmup",
            f"warmup {_stated(ctx, schedule.warmup, warmup)} is not shorter than the run, {tokens_and_steps(ctx, run)}: "
            "the LR never reaches its peak",
            f"shorten the warmup to a small part of the run, e.g. 1% = {tokens_and_steps(ctx, 0.01 * run)}",
        )
        return
    decay = plan.decay_tokens
    if schedule.kind == "wsd" and decay is not None and warmup + decay > run + one_step:
        fitting = max(0.0, run - warmup)
        yield ctx.finding(
            "schedule.decay",
            f"warmup {schedule.warmup} + decay {schedule.decay} = {tokens_and_steps(ctx, warmup + decay)} exceeds the run, "
            f"{tokens_and_steps(ctx, run)}: the decay starts while the LR is still warming up and never trains at the peak",
            f"shorten the decay to at most the run minus the warmup, {tokens_and_steps(ctx, fitting)}; 10-20% of the run is typical",
        )


PASS = [
    {},
    {"schedule.warmup": "10%", "schedule.decay": "90%"},
    {"schedule.kind": "cosine", "schedule.decay": "150%"},
    {"schedule.warmup": "99%", "schedule.decay": "1%"},
]
FAIL = [
    case({"schedule.warmup": "100%"}, "error"),
    case({"schedule.warmup": "3000000000 tokens", "schedule.kind": "cosine", "schedule.decay": "__delete__"}, "error"),
    case({"schedule.warmup": "50%", "schedule.decay": "60%"}, "error"),
]
