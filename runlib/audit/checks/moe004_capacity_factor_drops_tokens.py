"""MOE004: the capacity factor drops more than 1% of the routed assignments even with a balanced router.

Why it matters:
    With a capacity factor each expert takes at most capacity_factor x T x top_k / experts of a
    micro-batch's T x top_k assignments and drops the rest: a dropped token skips the expert and passes
    on through the residual connection only (Switch Transformer, Fedus et al. 2021, arXiv 2101.03961,
    section 2.2; GShard, Lepikhin et al. 2020, arXiv 2006.16668, section 2.2, expert capacity). Even a
    perfectly balanced router assigns at random around the mean: each expert's load is binomial(T x
    top_k, 1 / experts), and the expected overflow of that spread (the plan's capacity_drop_share,
    runlib.plan.moe) is the least the capacity drops; a real router's imbalance drops more. Few tokens per
    expert per micro-batch (a small micro-batch, many experts) make the spread wide. Dropless training
    (MegaBlocks, Gale et al. 2022, arXiv 2211.15841, section 4: block-sparse expert computation) computes
    every assignment and is what OLMoE and DeepSeek-V3 (arXiv 2412.19437, section 2.1.2, "No
    Token-Dropping") train with.

Flagged:
    model: {moe: {experts: 64, top_k: 2, capacity_factor: 1.0}}
    batch: {micro_batch: 1}          # 2048 tokens: 64 assignments per expert, about 5% dropped

Preferred:
    model: {moe: {experts: 64, top_k: 2, capacity_factor: 1.15}}   # under 1% at the balanced load
    model: {moe: {experts: 64, top_k: 2}}                          # dropless

How to fix:
    Raise model.moe.capacity_factor to the value the finding gives (the first multiple of 0.05 that
    drops under 1% at the balanced load in every phase), raise the micro-batch, or omit capacity_factor
    to train dropless.
"""

import math
from collections.abc import Iterator

from runlib.audit.checks._shared import who
from runlib.audit.registry import Context, Finding, case
from runlib.plan.moe import capacity_drop_share

CODE = "MOE004"
NAME = "capacity-factor-drops-tokens"
SEVERITY = "warning"
MAX_DROP = 0.01  # share of the routed assignments
STEP = 0.05
MAX_CAPACITY_FACTOR = 1e3  # the schema's bound


def capacity_factor_for(assignments: float, experts: int, start: float) -> float:
    """The first multiple of STEP above `start` whose expected drop at the balanced load is at most MAX_DROP
    (the search upward in steps of STEP, by bisection: the drop falls as the capacity grows)."""

    def fits(k: int) -> bool:
        return capacity_drop_share(round(k * STEP, 2), assignments, experts) <= MAX_DROP

    low, high = math.floor(start / STEP + 1e-9) + 1, round(MAX_CAPACITY_FACTOR / STEP)
    if low >= high or not fits(high):
        return MAX_CAPACITY_FACTOR
    while low < high:  # the first k in [low, high] that fits
        mid = (low + high) // 2
        if fits(mid):
            high = mid
        else:
            low = mid + 1
    return round(low * STEP, 2)


def check(ctx: Context) -> Iterator[Finding]:
    moe = ctx.spec.model.moe
    if moe is None or moe.capacity_factor is None:
        return
    flagged = []  # (share, phase name, tokens per micro-batch, capacity factor that fits)
    for p in ctx.plan.phases:
        share = p.moe.capacity_drop_share if p.moe is not None else None
        if share is None or share <= MAX_DROP:
            continue
        s = p.settings
        tokens = s.seq_len / s.parallelism.context * s.micro_batch
        flagged.append(
            (share, p.name, tokens, capacity_factor_for(tokens * moe.top_k, moe.experts, moe.capacity_factor))
        )
    if not flagged:
        return
    share, name, tokens, _ = max(flagged)
    factor = max(f for *_, f in flagged)
    mean = tokens * moe.top_k / moe.experts
    where = f"phase {name!r}"
    if len(flagged) > 1:
        where += (
            f" ({who([n for _, n, _, _ in flagged], len(ctx.plan.phases))} drop over {MAX_DROP:.0%}; this one most)"
        )
    yield ctx.finding(
        "model.moe.capacity_factor",
        f"capacity_factor {moe.capacity_factor:g} drops an expected {share:.1%} of the routed assignments in {where} "
        f"even with a perfectly balanced router: {tokens:,.0f} tokens per device and micro-batch x "
        f"top_k {moe.top_k} spread binomially over {moe.experts} experts, {mean:,.1f} per expert on average and a "
        f"capacity of {moe.capacity_factor * mean:,.1f}; a real router's imbalance drops more",
        f"set model.moe.capacity_factor: {factor:g} (under {MAX_DROP:.0%} dropped at the balanced load), raise the "
        "micro-batch, or omit capacity_factor to train dropless (MegaBlocks; OLMoE, DeepSeek-V3)",
        value=factor,
    )


_MOE = {"experts": 64, "top_k": 2, "expert_d_ff": 256, "aux_loss": 0.01, "z_loss": 0.001}
PASS = [
    {},
    {"model.moe": _MOE},  # dropless
    # 16384 tokens x 2 over 8 experts: 4096 each, 0.6% dropped at capacity 1.0
    {"model.moe": {**_MOE, "experts": 8, "capacity_factor": 1.0}},
    {"model.moe": {**_MOE, "capacity_factor": 1.25}},
    {"model.moe": {**_MOE, "capacity_factor": 1.15}, "batch.micro_batch": 1, "batch.grad_accum": 16},
]
FAIL = [
    # 2048 tokens x 2 over 64 experts: 64 assignments each, about 5% dropped at capacity 1.0
    case({"model.moe": {**_MOE, "capacity_factor": 1.0}, "batch.micro_batch": 1, "batch.grad_accum": 16}, "warning"),
    # a capacity factor below 1 drops at least the share it cuts
    case({"model.moe": {**_MOE, "capacity_factor": 0.5}}, "warning"),
]
