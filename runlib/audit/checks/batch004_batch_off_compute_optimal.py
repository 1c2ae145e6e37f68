"""BATCH004: tokens per step far from the compute-optimal batch.

Why it matters:
    The batch size that trains best for a given compute grows with the compute. DeepSeek LLM
    (arXiv 2401.02954, eq. 1) fits B_opt = 0.2920 * C^0.3271 tokens, with C = M * D and M the
    non-embedding FLOPs per token. Far below it, steps are noisy and the devices underused; far
    above it, tokens are spent past the critical batch and buy little (Kaplan et al. 2020, arXiv
    2001.08361, section 5). The fit is one estimate with a broad optimum, and the tuned batches of
    runs that trained well sit 5x below it (PaLM, Chinchilla, Nemotron-4) or far above it: published
    batches run from 0.5M tokens (GPT-2 124M in nanoGPT's train_gpt2 config) through 4M (Llama 2,
    arXiv 2307.09288 §2.2; PaLM's last stage, arXiv 2204.02311 §5) to 63M (DeepSeek-V3's ramp end,
    arXiv 2412.19437 §4.2). So it is advice, info only, beyond 2x. The batch compared is the steady
    tokens per step of the longest phase (after any ramp).

Flagged:
    # a 100M model on 2.4B tokens: B_opt is about 250K tokens
    batch: {micro_batch: 8, grad_accum: 16, global_batch: 2Mi tokens}

Preferred:
    batch: {micro_batch: 8, grad_accum: 2, global_batch: 256Ki tokens}

How to fix:
    Move the global batch toward B_opt (the finding gives a grad_accum or micro_batch that gets
    close), or keep it and say why in audit.ignore (e.g. a batch chosen for throughput at scale).
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case
from runlib.spec.units import format_count

CODE = "BATCH004"
NAME = "batch-off-compute-optimal"
SEVERITY = "info"
INFO_FACTOR = 2.0
PUBLISHED_RANGE = "0.5M (nanoGPT's GPT-2 124M) to 4M tokens (Llama 2, PaLM), 63M at the end of DeepSeek-V3's ramp"


def check(ctx: Context) -> Iterator[Finding]:
    plan = ctx.plan
    optimal = plan.references.optimal_batch_tokens
    if not plan.phases or not optimal or optimal <= 0:
        return
    longest = max(plan.phases, key=lambda p: p.tokens)
    tokens_per_step = longest.tokens_per_step
    if tokens_per_step <= 0:
        return
    ratio = tokens_per_step / optimal
    off = max(ratio, 1 / ratio)
    if off <= INFO_FACTOR:
        return
    s = longest.settings
    i = s.index
    if s.batch_overridden:
        path = f"phases[{i}].batch"
    elif ctx.spec.batch.ramp and tokens_per_step != s.steady_tokens_per_step:
        path = f"batch.ramp[{len(ctx.spec.batch.ramp) - 1}].global_batch"
    elif ctx.spec.batch.global_batch is not None:
        path = "batch.global_batch"
    else:
        path = "batch.grad_accum"
    per_micro_step = s.micro_batch * s.data_parallel * s.seq_len
    accum = round(optimal / per_micro_step) if per_micro_step else 0
    if accum >= 1:
        suggestion = f"e.g. grad_accum {accum} ({format_count(accum * per_micro_step)} tokens per step)"
    else:
        micro = max(1, round(optimal / (s.data_parallel * s.seq_len)))
        suggestion = f"e.g. micro_batch {micro} with grad_accum 1 ({format_count(micro * s.data_parallel * s.seq_len)} tokens per step)"
    direction = "above" if ratio > 1 else "below"
    yield ctx.finding(
        path,
        f"phase {longest.name!r} (the longest) trains on {format_count(tokens_per_step)} tokens per step, "
        f"{off:.1f}x {direction} the compute-optimal batch of {format_count(optimal)} tokens "
        f"(DeepSeek LLM fit B_opt = 0.292 * C^0.3271, C = {plan.references.deepseek_compute:.3g} FLOPs); "
        f"published runs train at {PUBLISHED_RANGE} per step",
        f"move the global batch toward {format_count(optimal)} tokens, {suggestion}; "
        "or keep it (a tuned batch) and give the reason in audit.ignore",
    )


PASS = [
    {},
    {
        "batch.grad_accum": 1,
        "batch.global_batch": "128Ki tokens",
        "phases[2].batch": {"micro_batch": 4, "grad_accum": 1},
    },
]
FAIL = [
    case(
        {
            "batch.grad_accum": 4,
            "batch.global_batch": "512Ki tokens",
            "phases[2].batch": {"micro_batch": 4, "grad_accum": 4},
        },
        "info",
    ),
    case(
        {
            "batch.grad_accum": 16,
            "batch.global_batch": "2Mi tokens",
            "phases[2].batch": {"micro_batch": 4, "grad_accum": 16},
        },
        "info",
    ),
    case(
        {
            "batch.micro_batch": 1,
            "batch.grad_accum": 1,
            "batch.global_batch": "16Ki tokens",
            "phases[2].batch": {"micro_batch": 1, "grad_accum": 1},
        },
        "info",
    ),
]
