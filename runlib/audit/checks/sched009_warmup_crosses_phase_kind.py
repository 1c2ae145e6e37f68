"""SCHED009: the LR warmup runs past the end of a phase into a phase of another kind.

Why it matters:
    Warmup is there for the first updates of the run: Adam's second-moment estimates are poor
    over the first steps, and a small, rising LR keeps those updates from diverging (Liu et al.
    2020, "On the Variance of the Adaptive Learning Rate and Beyond", ICLR, section 3). A phase
    of another kind (enrichment, long context, anneal) is a deliberate change of data or context
    length, designed to be trained at the stable or decaying LR of the schedule. When the warmup
    outlasts the first phase, that phase ends before the LR ever reached its peak, and the next
    one starts its new data on an optimizer that is still warming up: neither trains as planned,
    and the change of data lands in the part of the run that warmup exists to protect. A warmup
    longer than its phase is usually a percentage written for another phase split (5% of the run
    over a 3% first phase).

Flagged:
    schedule: {warmup: 5%}
    phases: [{name: foundation, kind: foundation, tokens: 3%}, {name: enrich, kind: enrichment, ...}]

Preferred:
    schedule: {warmup: 1%}          # ends inside the first phase

How to fix:
    Shorten schedule.warmup to end within the phase it starts in (the finding gives that phase's
    length in steps), or lengthen that phase, or make the next phase the same kind.
"""

from collections.abc import Iterator

from runlib.audit.checks._shared import tokens_and_steps
from runlib.audit.registry import Context, Finding, case

CODE = "SCHED009"
NAME = "warmup-crosses-phase-kind"
SEVERITY = "warning"


def check(ctx: Context) -> Iterator[Finding]:
    plan = ctx.plan
    warmup = plan.warmup_tokens or 0.0
    phases = plan.phases
    for before, after in zip(phases, phases[1:], strict=False):
        boundary = before.span.end_tokens
        if boundary >= warmup:
            return  # the warmup ends inside `before`: every later boundary is after it
        if before.kind == after.kind:
            continue
        share = plan.schedule.lr_at(boundary) / plan.schedule.peak_lr if plan.schedule.peak_lr > 0 else 0.0
        stated = ctx.spec.schedule.warmup
        yield ctx.finding(
            "schedule.warmup",
            f"the warmup ({stated} = {tokens_and_steps(ctx, warmup)}) runs past the end of phase {before.name!r} "
            f"({before.kind}, ends at {tokens_and_steps(ctx, boundary)}) into phase {after.name!r} ({after.kind}), "
            f"which starts at {share:.0%} of the peak LR: {before.name!r} never trains at the peak and "
            f"{after.name!r} changes the data while the optimizer is still warming up",
            f"shorten schedule.warmup to at most {before.span.end_step} steps (the end of {before.name!r}; "
            f"0.1-2% of the run is typical), or lengthen phase {before.name!r} past the warmup",
            value=f"{before.span.end_step} steps",
        )
        return  # the first crossing is the one to fix


PASS = [
    {},
    {"schedule.warmup": "5%", "phases[0].tokens": "3%", "phases[1].tokens": "87%", "phases[1].kind": "foundation"},
    {"schedule.warmup": "80%"},  # long, but it ends inside the first phase (85%)
]
FAIL = [
    case({"schedule.warmup": "5%", "phases[0].tokens": "3%", "phases[1].tokens": "87%"}, "warning"),
    # crosses a same-kind boundary first, then one into the enrichment phase
    case(
        {
            "schedule.warmup": "88%",
            "phases[0].tokens": "40%",
            "phases[1]": {"name": "more", "kind": "foundation", "tokens": "45%", "mixture": {"web": 0.8, "code": 0.2}},
            "phases[2]": {"name": "enrich", "kind": "enrichment", "tokens": "7%", "mixture": {"web": 0.5, "code": 0.5}},
        },
        "warning",
    ),
]
