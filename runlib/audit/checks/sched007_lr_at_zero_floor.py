"""SCHED007: the LR sits at a floor of zero for more than 1% of the run.

Why it matters:
    With min_lr_ratio 0, once the decay has ended the learning rate is exactly zero: every token
    trained after that point costs full compute and changes nothing (AdamW's decoupled weight
    decay is scaled by the LR too). It happens when a cosine or linear decay ends before the run
    (nanoGPT keeps training at min_lr after lr_decay_iters; auditor.md, failure class 2).
    Tolerance: 1% of the run's tokens.

Flagged:
    schedule: {kind: cosine, warmup: 1%, decay: 50%, min_lr_ratio: 0.0}     # half the run at LR 0

Preferred:
    schedule: {kind: cosine, warmup: 1%, min_lr_ratio: 0.0}                 # decays until the end

How to fix:
    End the decay at the run's end (omit decay for cosine/linear, or use WSD), or set a positive
    min_lr_ratio (e.g. 0.1) if a tail at a small LR is intended.
"""

from collections.abc import Iterator

from runlib.audit.checks._shared import tokens_and_steps
from runlib.audit.registry import Context, Finding, case

CODE = "SCHED007"
NAME = "lr-at-zero-floor"
SEVERITY = "warning"
TOLERANCE = 0.01  # of the run's tokens


def check(ctx: Context) -> Iterator[Finding]:
    spec_schedule = ctx.spec.schedule
    schedule = ctx.plan.schedule
    if spec_schedule.kind == "constant":
        return
    # multistep: the floor is the last of lr_steps (min_lr_ratio is not read); others: min_lr_ratio
    if (schedule.floor_lr if spec_schedule.kind == "multistep" else spec_schedule.min_lr_ratio) != 0:
        return
    run = schedule.run_tokens
    at_floor = schedule.tokens_at_floor()
    if run <= 0 or at_floor <= TOLERANCE * run:
        return
    path = "schedule.decay" if spec_schedule.decay is not None else "schedule.min_lr_ratio"
    yield ctx.finding(
        path,
        f"the LR reaches its floor of 0 at {tokens_and_steps(ctx, run - at_floor)} and stays there for the last "
        f"{tokens_and_steps(ctx, at_floor)}, {at_floor / run:.1%} of the run: that compute makes no update",
        "give the last of schedule.lr_steps an lr_ratio > 0 (DeepSeek LLM: 0.1)"
        if spec_schedule.kind == "multistep"
        else "end the decay at the run's end (omit schedule.decay for cosine/linear) or set min_lr_ratio > 0 (e.g. 0.1)",
    )


_STEPS = [{"after": "80%", "lr_ratio": 0.316}, {"after": "90%", "lr_ratio": 0.1}]  # DeepSeek LLM
PASS = [
    {},
    {"schedule.kind": "cosine", "schedule.decay": "50%", "schedule.min_lr_ratio": 0.1},
    {"schedule.kind": "cosine", "schedule.decay": "98.5%", "schedule.min_lr_ratio": 0.0},
    {"schedule.min_lr_ratio": 0.0},
    {
        "schedule.kind": "multistep",
        "schedule.decay": "__delete__",
        "schedule.min_lr_ratio": "__delete__",
        "schedule.lr_steps": _STEPS,
    },
]
FAIL = [
    case({"schedule.kind": "cosine", "schedule.decay": "50%", "schedule.min_lr_ratio": 0.0}, "warning"),
    case({"schedule.kind": "linear", "schedule.decay": "1000 steps", "schedule.min_lr_ratio": 0.0}, "warning"),
    case(
        {
            "schedule.kind": "multistep",
            "schedule.decay": "__delete__",
            "schedule.min_lr_ratio": "__delete__",
            "schedule.lr_steps": [{"after": "80%", "lr_ratio": 0.316}, {"after": "90%", "lr_ratio": 0.0}],
        },
        "warning",
    ),
]
