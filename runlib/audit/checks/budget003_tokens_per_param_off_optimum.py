"""BUDGET003: tokens per parameter far from compute-optimal.

Why it matters:
    For a fixed training compute, Chinchilla (Hoffmann et al. 2022, arXiv 2203.15556) finds the
    loss lowest at roughly 20 tokens per parameter; the Besiroglu et al. 2024 refit of their
    Approach 3 (arXiv 2404.10102) gives the optimum N and D for this run's FLOPs. Training far
    beyond it (Llama 3: ~1900 tokens per parameter) is a deliberate choice for a cheaper model at
    inference; training far below it wastes compute on a model too large for its data. So this is
    information, never more.

Flagged:
    model: {...}          # 100M parameters
    tokens: 500M          # 5 tokens per parameter

Preferred:
    tokens: 2B            # ~20 tokens per parameter (or a smaller model)

How to fix:
    Nothing, if the ratio is deliberate (say so in audit.ignore); otherwise move the model size or
    the tokens towards the refit optimum the finding gives. Reported outside 10-40 tokens per
    parameter.
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case
from runlib.spec.units import format_count

CODE = "BUDGET003"
NAME = "tokens-per-param-off-optimum"
SEVERITY = "info"
LOW, HIGH = 10.0, 40.0


def check(ctx: Context) -> Iterator[Finding]:
    ref, plan = ctx.plan.references, ctx.plan
    if not plan.phases:
        return
    ratio = ref.tokens_per_param
    if LOW <= ratio <= HIGH:
        return
    side = (
        "over-trained: a smaller model than compute-optimal"
        if ratio > HIGH
        else "under-trained: a larger model than compute-optimal"
    )
    yield ctx.finding(
        "tokens",
        f"{format_count(plan.params.total)} parameters on {format_count(plan.tokens_total)} tokens: "
        f"{ratio:.3g} tokens per parameter (Chinchilla ~{ref.chinchilla_tokens_per_param:g}; {side}); "
        f"at this run's {plan.flops_total:.3g} FLOPs the Besiroglu et al. refit optimum is "
        f"{format_count(ref.optimal_params)} parameters on {format_count(ref.optimal_tokens)} tokens",
        "nothing if the ratio is deliberate (e.g. a model meant to be cheap at inference); otherwise move the model "
        f"size or the tokens towards ~{format_count(ref.optimal_params)} parameters / "
        f"{format_count(ref.optimal_tokens)} tokens",
        severity="info",
    )


PASS = [
    {},
    {"tokens": "1.1B"},  # ~10.9 tokens per parameter
    {"tokens": "4B"},  # ~39.7 tokens per parameter
]
FAIL = [
    case({"tokens": "800M"}, "info"),
    case({"tokens": "5B"}, "info"),
]
