"""SCHED008: peak LR far from the compute-optimal learning rate.

Why it matters:
    The best peak LR shrinks as compute grows. DeepSeek LLM (arXiv 2401.02954, eq. 1) fits
    eta_opt = 0.3118 * C^-0.1250 with C = M * D (M the non-embedding FLOPs per token, D the
    training tokens), together with the batch fit of BATCH004; near the optimum the loss is flat
    over a wide band of LRs, far from it the run under-trains (too low) or risks loss spikes and
    divergence (too high). The fit is an estimate for AdamW LLM pre-training at their batch
    sizes, so this is advice: info beyond 2x, a warning beyond 4x.

Flagged:
    # a 100M model on 2.4B tokens: eta_opt is about 1.7e-3
    optimizer: {lr: 1.0e-2}

Preferred:
    optimizer: {lr: 1.5e-3}

How to fix:
    Move optimizer.lr toward the fitted value the finding gives, or keep it (e.g. a value taken
    from a tuned reference run) and say why in audit.ignore.
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "SCHED008"
NAME = "lr-off-compute-optimal"
SEVERITY = "info"
INFO_FACTOR = 2.0
WARNING_FACTOR = 4.0


def check(ctx: Context) -> Iterator[Finding]:
    lr = ctx.spec.optimizer.lr
    optimal = ctx.plan.references.optimal_lr
    if not lr > 0 or not optimal > 0:  # a non-positive LR is SCHED003's
        return
    ratio = lr / optimal
    off = max(ratio, 1 / ratio)
    if off <= INFO_FACTOR:
        return
    suggested = float(f"{optimal:.2g}")
    yield ctx.finding(
        "optimizer.lr",
        f"peak LR {lr:.3g} is {off:.1f}x {'above' if ratio > 1 else 'below'} the compute-optimal {optimal:.3g} "
        f"(DeepSeek LLM fit eta_opt = 0.3118 * C^-0.125, C = {ctx.plan.references.deepseek_compute:.3g} FLOPs)",
        f"move optimizer.lr toward {suggested:g}, or keep it and give the reason in audit.ignore",
        value=suggested,
        severity="warning" if off > WARNING_FACTOR else "info",
    )


PASS = [{}, {"optimizer.lr": 3.3e-3}, {"optimizer.lr": 9.0e-4}]
FAIL = [
    case({"optimizer.lr": 5.0e-3}, "info"),
    case({"optimizer.lr": 1.0e-2}, "warning"),
    case({"optimizer.lr": 3.0e-4}, "warning"),
]
