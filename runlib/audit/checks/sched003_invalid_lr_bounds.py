"""SCHED003: the LR floor is above the peak, or the peak LR is not positive.

Why it matters:
    The schedule decays from the peak (optimizer.lr) to the floor (min_lr_ratio * peak). A floor
    above the peak turns the "decay" into a rise, and a peak of zero or below never trains (or
    trains uphill). Megatron-LM asserts min_lr <= lr (arguments.py validate_args) and max_lr >=
    min_lr >= 0 in its scheduler (megatron/core/optimizer_param_scheduler.py); GPT-NeoX checks
    min_lr <= lr as well.

Flagged:
    optimizer: {lr: 3.0e-4}
    schedule: {min_lr_ratio: 1.5}      # floor 4.5e-4 above the peak

Preferred:
    optimizer: {lr: 3.0e-4}
    schedule: {min_lr_ratio: 0.1}

How to fix:
    Set min_lr_ratio in [0, 1] (0.1 is common for cosine, 0 for WSD) and a positive optimizer.lr.
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "SCHED003"
NAME = "invalid-lr-bounds"
SEVERITY = "error"


def check(ctx: Context) -> Iterator[Finding]:
    lr = ctx.spec.optimizer.lr
    ratio = ctx.spec.schedule.min_lr_ratio
    if not lr > 0:  # also catches NaN
        yield ctx.finding(
            "optimizer.lr",
            f"peak learning rate optimizer.lr = {lr:g} is not positive: the run cannot train",
            "set optimizer.lr to a positive peak LR (e.g. 3e-4 for a 7B model, higher for small ones; see SCHED008)",
        )
    if ratio > 1:
        yield ctx.finding(
            "schedule.min_lr_ratio",
            f"min_lr_ratio {ratio:g} puts the LR floor ({ratio * lr:.3g}) above the peak ({lr:.3g}): the decay raises the LR",
            "set min_lr_ratio in [0, 1] (e.g. 0.1, or 0 to decay to zero)",
        )


PASS = [{}, {"schedule.min_lr_ratio": 1.0}, {"schedule.min_lr_ratio": 0.0}]
FAIL = [
    case({"schedule.min_lr_ratio": 1.5}, "error"),
    case({"optimizer.lr": 0.0}, "error"),
    case({"optimizer.lr": -1.0e-3}, "error"),
]
