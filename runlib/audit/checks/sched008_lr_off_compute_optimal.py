"""SCHED008: peak LR far from the compute-optimal learning rate.

Why it matters:
    The best peak LR shrinks as compute grows. DeepSeek LLM (arXiv 2401.02954, eq. 1) fits
    eta_opt = 0.3118 * C^-0.1250 with C = M * D (M the non-embedding FLOPs per token, D the
    training tokens), together with the batch fit of BATCH004; near the optimum the loss is flat
    over a wide band of LRs, far from it the run under-trains (too low) or risks loss spikes and
    divergence (too high). The fit is an estimate for AdamW LLM pre-training at their batch
    sizes, so this is advice: info beyond 2x. Above it, a warning beyond 4x: too high an LR spikes
    or diverges. Below it, a warning only beyond 16x (a slip of a digit): a low LR costs loss, not
    the run, and large dense runs that trained well sit 5-10x below the fit's extrapolation
    (GPT-3 175B at 6e-5, arXiv 2005.14165 Table 2.1; Gopher 280B at 4e-5, arXiv 2112.11446
    Table 1; BLOOM 176B at 6e-5, arXiv 2211.05100 Table 3).
    Lion's LR is compared with a band 3-10x below AdamW's, as its authors advise (Chen et al.
    2023, arXiv 2302.06675 §5); Adafactor's update is relative to each parameter's RMS
    (Shazeer and Stern 2018, arXiv 1804.04235 §8, PaLM's 1e-2 in arXiv 2204.02311 §5), so its LR
    is not comparable and is not checked.

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
WARNING_FACTOR_BELOW = 16.0
LION_BAND = (3.0, 10.0)  # Lion's LR this many times below AdamW's (arXiv 2302.06675 §5)


def check(ctx: Context) -> Iterator[Finding]:
    lr = ctx.spec.optimizer.lr
    optimal = ctx.plan.references.optimal_lr
    kind = ctx.spec.optimizer.kind
    if not lr > 0 or not optimal > 0 or kind == "adafactor":  # a non-positive LR is SCHED003's
        return
    fit = f"DeepSeek LLM fit eta_opt = 0.3118 * C^-0.125, C = {ctx.plan.references.deepseek_compute:.3g} FLOPs"
    reference = optimal
    if kind == "lion":
        high, low = optimal / LION_BAND[0], optimal / LION_BAND[1]
        if low <= lr <= high:
            return
        reference = high if lr > high else low
        fit = f"Lion's {LION_BAND[0]:g}-{LION_BAND[1]:g}x below the AdamW optimum {optimal:.3g}, {fit}"
    ratio = lr / reference
    off = max(ratio, 1 / ratio)
    if off <= INFO_FACTOR:
        return
    suggested = float(f"{reference:.2g}")
    above = ratio > 1
    warn = off > (WARNING_FACTOR if above else WARNING_FACTOR_BELOW)
    yield ctx.finding(
        "optimizer.lr",
        f"peak LR {lr:.3g} is {off:.1f}x {'above' if above else 'below'} the compute-optimal {reference:.3g} ({fit})",
        f"move optimizer.lr toward {suggested:g}, or keep it and give the reason in audit.ignore",
        value=suggested,
        severity="warning" if warn else "info",
    )


PASS = [
    {},
    {"optimizer.lr": 3.3e-3},
    {"optimizer.lr": 9.0e-4},
    {"optimizer.kind": "lion", "optimizer.lr": 3.0e-4},
    {"optimizer.kind": "adafactor", "optimizer.lr": 1.0e-2},
]
FAIL = [
    case({"optimizer.lr": 5.0e-3}, "info"),
    case({"optimizer.lr": 1.0e-2}, "warning"),
    case({"optimizer.lr": 3.0e-4}, "info"),  # 5.6x below: costs loss, not the run
    case({"optimizer.lr": 1.0e-4}, "warning"),  # 17x below
    case({"optimizer.kind": "lion", "optimizer.lr": 5.0e-3}, "warning"),  # twice an AdamW LR, under Lion
    case({"optimizer.kind": "lion", "optimizer.lr": 3.0e-5}, "info"),
]
