"""SCHED006: the LR decay does not start where the anneal phase starts.

Why it matters:
    An anneal phase trains on the highest-quality mixture while the LR falls to its floor; that
    pairing is what makes it work (MiniCPM, Hu et al. 2024, arXiv 2404.06395: data mixed in during
    the WSD decay; OLMo 2, arXiv 2501.00656: mid-training anneals the LR on the Dolmino mix;
    Hägele et al. 2024, arXiv 2405.18392). If the decay starts before the anneal phase, the
    earlier phases already train at a falling LR (cosine and linear always do) and the anneal
    mixture gets only the tail; if it starts later, the anneal phase begins at the peak LR and
    its mixture is partly trained without annealing. Tolerance: 1% of the run.

Flagged:
    schedule: {kind: wsd, decay: 20%}
    phases: [..., {name: anneal, kind: anneal, tokens: 8%}]

Preferred:
    schedule: {kind: wsd, decay: 8%}         # the decay is the anneal phase
    phases: [..., {name: anneal, kind: anneal, tokens: 8%}]

How to fix:
    Use kind: wsd with schedule.decay equal to the anneal phase's length (the finding gives it),
    measured from the anneal phase's start to the run's end.
"""

from collections.abc import Iterator

from runlib.audit.checks._shared import tokens_and_steps
from runlib.audit.registry import Context, Finding, case
from runlib.plan import PhasePlan

CODE = "SCHED006"
NAME = "decay-not-aligned-with-anneal"
SEVERITY = "warning"
TOLERANCE = 0.01  # of the run's tokens


def _decay_value(ctx: Context, anneal: PhasePlan) -> str:
    """The decay from the anneal phase's start to the run's end, in the unit the spec uses."""
    plan, spec = ctx.plan, ctx.spec
    length = plan.schedule.run_tokens - anneal.span.start_tokens
    unit = spec.schedule.decay.unit if spec.schedule.decay is not None else "percent"
    if unit == "steps":
        return f"{plan.steps_total - anneal.span.start_step} steps"
    if unit == "percent" and spec.tokens > 0:
        return f"{length / spec.tokens * 100:.6g}%"
    return f"{round(length)} tokens"


def check(ctx: Context) -> Iterator[Finding]:
    plan = ctx.plan
    anneal = next((p for p in plan.phases if p.kind == "anneal"), None)
    if anneal is None:
        return
    if anneal.lr_path is not None and anneal.lr_path.end_lr is not None:
        return  # the anneal decays on its own path (phases[].optimizer.lr_decay_to), whatever the schedule does
    schedule = plan.schedule
    run = schedule.run_tokens
    if run <= 0:
        return
    kind = ctx.spec.schedule.kind
    start = anneal.span.start_tokens
    value = _decay_value(ctx, anneal)
    tolerance = TOLERANCE * run
    if kind == "constant":
        yield ctx.finding(
            "schedule.kind",
            f"phase {anneal.name!r} is an anneal phase but the schedule is constant: the LR never decays",
            f"use kind: wsd with decay: {value} (the anneal phase to the run's end)",
        )
        return
    decay_start = schedule.decay_start_tokens
    if decay_start < start - tolerance:
        lr = schedule.lr_at(start)
        share = f" ({lr / schedule.peak_lr:.0%} of the peak)" if schedule.peak_lr > 0 else ""
        how = (
            f"the {kind} decay starts right after warmup, at"
            if kind in ("cosine", "linear")
            else "the WSD decay starts at"
        )
        message = (
            f"{how} {tokens_and_steps(ctx, decay_start)}, {(start - decay_start) / run:.1%} of the run before anneal phase "
            f"{anneal.name!r} starts at {tokens_and_steps(ctx, start)}: the LR is already down to {lr:.3g}{share} when the "
            "anneal mixture begins"
        )
        if kind in ("cosine", "linear"):
            yield ctx.finding(
                "schedule.kind", message, f"use kind: wsd with decay: {value} (the anneal phase to the run's end)"
            )
        else:
            yield ctx.finding(
                "schedule.decay", message, f"set decay: {value} (the anneal phase to the run's end)", value=value
            )
    elif decay_start > start + tolerance:
        yield ctx.finding(
            "schedule.decay",
            f"the WSD decay starts at {tokens_and_steps(ctx, decay_start)}, {(decay_start - start) / run:.1%} of the run after "
            f"anneal phase {anneal.name!r} starts at {tokens_and_steps(ctx, start)}: the anneal phase begins at the peak LR",
            f"set decay: {value} (the anneal phase to the run's end)",
            value=value,
        )


PASS = [
    {},
    {"schedule.decay": "8.5%"},
    {"schedule.kind": "cosine", "schedule.decay": "__delete__", "phases[3].kind": "enrichment"},
    # the anneal decays on its own (OLMo 2's stage 2: linearly to 0 from where the constant schedule stands)
    {"schedule.kind": "constant", "schedule.decay": "__delete__", "phases[3].optimizer": {"lr_decay_to": 0.0}},
]
FAIL = [
    case({"schedule.decay": "20%"}, "warning"),
    case({"schedule.decay": "4%"}, "warning"),
    case({"schedule.kind": "cosine", "schedule.decay": "__delete__"}, "warning"),
    case({"schedule.kind": "constant", "schedule.decay": "__delete__"}, "warning"),
]
