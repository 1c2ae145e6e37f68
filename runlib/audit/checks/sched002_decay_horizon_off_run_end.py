"""SCHED002: a cosine or linear decay does not end at the run's end.

Why it matters:
    A cosine or linear schedule is tuned to its horizon. Ending the decay past the run's end
    leaves the model at a high LR that was never annealed (Chinchilla, Hoffmann et al. 2022, arXiv
    2203.15556: a cosine cycle longer than the run under-trains; Hägele et al. 2024, arXiv
    2405.18392); ending it early trains the rest of the run at the floor. The classic cause is a
    decay length copied from another run: nanoGPT's lr_decay_iters "should be ~= max_iters" is a
    comment only (train.py), and NeMo-RL shipped a wrong Megatron train_iters (NVIDIA-NeMo/RL PR
    #939). Tolerance: 1% of the run. The cost grows with the overshoot (Hoffmann et al., Fig. A1:
    cycles 1.1x to 5x the run), so a decay ending up to 25% past the run's end is info (BLOOM's
    cosine to 410B tokens stopped at 366B, arXiv 2211.05100 Table 3) and a warning beyond; a decay
    ending early is a warning at any size.

Flagged:
    schedule: {kind: cosine, warmup: 1%, decay: 50%}      # the LR reaches its floor halfway

Preferred:
    schedule: {kind: cosine, warmup: 1%}                  # decay omitted: until the run's end

How to fix:
    Omit schedule.decay (cosine and linear then decay until the run's end) or set it to the run
    minus the warmup, which the finding gives.
"""

from collections.abc import Iterator
from typing import Literal

from runlib.audit.checks._shared import tokens_and_steps
from runlib.audit.registry import Context, Finding, case
from runlib.spec.units import Duration

CODE = "SCHED002"
NAME = "decay-horizon-off-run-end"
SEVERITY = "warning"
TOLERANCE = 0.01  # of the run's tokens
INFO_OVERSHOOT = 0.25  # of the run's tokens: a decay this far past the run's end is info
INFO_SHORTFALL = 0.15  # of the run's tokens: a decay ending this far before the run's end is info


def _in_unit(ctx: Context, tokens: float, start_tokens: float, unit: str) -> str:
    """`tokens` starting at `start_tokens`, written in the spec's unit."""
    plan = ctx.plan
    if unit == "percent" and ctx.spec.tokens > 0:
        return f"{tokens / ctx.spec.tokens * 100:.6g}%"
    if unit == "steps":
        steps = plan.duration_steps(Duration(start_tokens + tokens, "tokens")) - plan.duration_steps(
            Duration(start_tokens, "tokens")
        )
        return f"{round(steps)} steps"
    return f"{round(tokens)} tokens"


def check(ctx: Context) -> Iterator[Finding]:
    schedule = ctx.plan.schedule
    spec_schedule = ctx.spec.schedule
    if spec_schedule.kind not in ("cosine", "linear") or spec_schedule.decay is None:
        return
    run = schedule.run_tokens
    if run <= 0:
        return
    end = schedule.decay_end_tokens
    gap = end - run
    if abs(gap) <= TOLERANCE * run:
        return
    peak = schedule.peak_lr
    final_lr = schedule.lr_at(run)
    share = f" ({final_lr / peak:.0%} of the peak)" if peak > 0 else ""
    if gap > 0:
        message = (
            f"the {spec_schedule.kind} decay (warmup {spec_schedule.warmup} + decay {spec_schedule.decay}) ends at "
            f"{tokens_and_steps(ctx, end)}, {gap / run:.1%} past the run's end at {tokens_and_steps(ctx, run)}: the run ends at LR "
            f"{final_lr:.3g}{share} instead of its floor {schedule.floor_lr:.3g}"
        )
    else:
        message = (
            f"the {spec_schedule.kind} decay (warmup {spec_schedule.warmup} + decay {spec_schedule.decay}) ends at "
            f"{tokens_and_steps(ctx, end)}, {-gap / run:.1%} of the run before its end at {tokens_and_steps(ctx, run)}: the LR sits at its "
            f"floor {schedule.floor_lr:.3g} for the last {tokens_and_steps(ctx, run - end)}"
        )
    warmup = schedule.warmup_tokens
    value = _in_unit(ctx, max(0.0, run - warmup), warmup, spec_schedule.decay.unit)
    severity: Literal["info", "warning"] = "info" if -INFO_SHORTFALL * run <= gap <= INFO_OVERSHOOT * run else "warning"
    last = ctx.plan.phases[-1] if ctx.plan.phases else None
    own = last.settings.phase.optimizer if last is not None else None
    if gap > 0 and last is not None and own is not None and own.lr_decay_to is not None:
        # the schedule is cut where the last phase takes its own decay (OLMo 2: a cosine to a 5T horizon
        # stopped at 3.9T, then a linear decay to 0): the run ends at that phase's target, not the schedule's
        message += (
            f"; the last phase {last.name!r} decays on its own path to {own.lr_decay_to:g} x the peak "
            "(phases[].optimizer.lr_decay_to), so the run ends there"
        )
        severity = "info"
    yield ctx.finding(
        "schedule.decay",
        message,
        f"omit schedule.decay ({spec_schedule.kind} then decays until the run's end) or set decay: {value} (the run minus the warmup)",
        value=value,
        severity=severity,
    )


PASS = [
    {},
    {"schedule.kind": "cosine", "schedule.decay": "__delete__"},
    {"schedule.kind": "cosine", "schedule.decay": "99.5%"},
    {"schedule.kind": "wsd", "schedule.decay": "50%"},
]
FAIL = [
    case({"schedule.kind": "cosine", "schedule.decay": "50%"}, "warning"),
    case({"schedule.kind": "linear", "schedule.decay": "150%"}, "warning"),
    case({"schedule.kind": "linear", "schedule.decay": "115%"}, "info"),  # 14% past the end
    case({"schedule.kind": "cosine", "schedule.decay": "86%"}, "info"),  # ends 13% early: GPT-3's recipe
    case({"schedule.kind": "cosine", "schedule.decay": "4000 steps"}, "warning"),
    # a cosine to a horizon 50% past the run, cut where the last phase decays on its own (OLMo 2's stage 2)
    case(
        {"schedule.kind": "cosine", "schedule.decay": "150%", "phases[3].optimizer": {"lr_decay_to": 0.0}},
        "info",
    ),
]
