"""SCHED004: a schedule duration stated in steps while the tokens per step change.

Why it matters:
    The LR schedule runs in tokens (OLMo's token units, allenai/OLMo PR #411), so that a batch
    ramp or a phase with another batch does not stretch or squeeze it. A warmup or decay given in
    steps has no fixed token meaning when the tokens per step change during the run: the same
    "2000 steps" is twice as many tokens at twice the batch, and a WSD decay counted in steps from
    the run's start covers a different number of tokens than the last steps of the run. Changing
    the batch then silently moves the schedule (openvla issue #149, ModernBERT issue #247 on batch
    warmup changing step counts).

Flagged:
    batch: {ramp: [{after: 0 tokens, global_batch: 1Mi tokens}, {after: 50B tokens, global_batch: 4Mi tokens}]}
    schedule: {kind: wsd, warmup: 2000 steps, decay: 5000 steps}

Preferred:
    schedule: {kind: wsd, warmup: 2B tokens, decay: 10%}

    Where the steps lie inside one stretch of constant batch and the schedule reads them as the
    tokens they hold (Gopher's 1,500 warmup steps at its first batch size, arXiv 2112.11446
    Table 1 and App. C), nothing moves until the batch plan is edited: info.

How to fix:
    State warmup and decay in tokens or in percent of the run; the finding gives the token count
    the steps stand for where they run.
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case
from runlib.plan import Plan
from runlib.spec.units import Duration, format_count

CODE = "SCHED004"
NAME = "schedule-in-steps-with-changing-batch"
SEVERITY = "warning"


def _steps_text(steps: float) -> str:
    return f"{steps:,.1f}".removesuffix(".0")


def _batch_sizes_within(plan: Plan, start_tokens: float, end_tokens: float) -> set[int]:
    """The tokens per step of the stretches that overlap [start_tokens, end_tokens)."""
    return {
        seg.tokens_per_step
        for p in plan.phases
        for seg in p.span.segments
        if seg.steps > 0 and seg.start_tokens < end_tokens and seg.end_tokens > start_tokens
    }


def check(ctx: Context) -> Iterator[Finding]:
    plan = ctx.plan
    spec_schedule = ctx.spec.schedule
    per_step = sorted({seg.tokens_per_step for p in plan.phases for seg in p.span.segments if seg.steps > 0})
    if len(per_step) < 2:
        return
    low, high = per_step[0], per_step[-1]
    run = plan.schedule.run_tokens
    total_steps = plan.steps_total
    items: list[tuple[str, Duration | None]] = [("warmup", spec_schedule.warmup)]
    if spec_schedule.kind != "constant":
        items.append(("decay", spec_schedule.decay))
    for name, duration in items:
        if duration is None or duration.unit != "steps" or duration.amount == 0:
            continue  # no steps are the same 0 tokens at any batch size
        n = duration.amount
        read = plan.duration_tokens(duration)  # the plan counts the steps from the run's start
        steps = _steps_text(n)
        if name == "decay" and spec_schedule.kind == "wsd":
            where = f"the last {steps} steps of the run"
            actual = run - plan.duration_tokens(Duration(max(0.0, total_steps - n), "steps"))
            start = run - actual
        elif name == "decay":
            where = f"the {steps} steps after warmup"
            start_step = plan.duration_steps(Duration(plan.warmup_tokens, "tokens"))
            actual = plan.duration_tokens(Duration(start_step + n, "steps")) - plan.warmup_tokens
            start = plan.warmup_tokens
        else:
            where, actual, start = f"the first {steps} steps", read, 0.0
        misread = abs(actual - read) > 0.005 * max(read, 1.0)
        one_batch = len(_batch_sizes_within(plan, start, start + actual)) == 1
        message = (
            f"schedule.{name} is {steps} steps while tokens per step change during the run "
            f"({format_count(low)} to {format_count(high)}): {where} hold {format_count(actual)} tokens"
        )
        if misread:
            message += (
                f", but the schedule reads them as {format_count(read)} tokens (steps counted from the run's start)"
            )
        message += (
            f"; the same steps would be {format_count(n * low)} to {format_count(n * high)} tokens at other batch sizes"
        )
        value = f"{round(actual)} tokens"
        yield ctx.finding(
            f"schedule.{name}",
            message,
            f"state it in tokens or percent (the schedule runs in tokens): {name}: {value}",
            value=value,
            severity="info" if one_batch and not misread else "warning",
        )


_RAMP = [{"after": "0 tokens", "global_batch": "128Ki tokens"}, {"after": "10%", "global_batch": "256Ki tokens"}]
PASS = [
    {},
    {"schedule.warmup": "92 steps", "schedule.decay": "736 steps"},  # tokens per step never change
    {"schedule.warmup": "24117248 tokens", "phases[2].batch": "__delete__"},
    {"schedule.warmup": "0 steps", "batch.ramp": _RAMP},
]
FAIL = [
    case({"schedule.warmup": "92 steps", "phases[2].batch": "__delete__"}, "info"),  # all at the first batch
    case({"schedule.decay": "736 steps", "phases[3].batch": {"grad_accum": 4}}, "warning"),
    case({"schedule.warmup": "100 steps", "batch.ramp": _RAMP}, "info"),  # inside the ramp's first batch
    case({"schedule.warmup": "2500 steps", "batch.ramp": _RAMP}, "warning"),  # crosses the ramp at step 1840
    case({"schedule.kind": "cosine", "schedule.decay": "5000 steps", "batch.ramp": _RAMP}, "warning"),
]
