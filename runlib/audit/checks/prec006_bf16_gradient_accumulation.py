"""PREC006: 16-bit gradient accumulation with grad_accum > 1 or dp > 1.

Why it matters:
    With grads: bf16, gradients are summed over micro-batches (grad_accum) and over data-parallel
    ranks (the all-reduce) in bf16, which keeps 8 significant bits: every addition rounds, small
    contributions next to a large running sum vanish, and the error grows with the number of
    terms. Megatron-LM accumulates and reduces in fp32 under bf16 unless --grad-reduce-in-bf16 is
    asked for (megatron/training/arguments.py, validate_args); FSDP1 accumulating in 16 bit was one
    of the causes of the accumulation mismatch discussed in huggingface/trl#2175. With one
    micro-batch on one rank there is nothing to sum and bf16 gradients are harmless.

Flagged:
    precision: {compute: bf16, grads: bf16}
    batch: {micro_batch: 8, grad_accum: 4}          # 4 micro-batches x dp ranks summed in bf16

Preferred:
    precision: {compute: bf16, grads: fp32}

How to fix:
    Set precision.grads: fp32 (2 more bytes per parameter, shardable with zero2/fsdp).
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case
from runlib.plan import PhasePlan

CODE = "PREC006"
NAME = "bf16-gradient-accumulation"
SEVERITY = "warning"


def _micro_batches_per_step(phase: PhasePlan) -> tuple[float, bool]:
    """Micro-batch gradients summed into one optimizer step (grad_accum * dp): the largest over the
    phase's batch-ramp segments, and whether it varies within the phase."""
    s = phase.settings
    per_micro = s.micro_batch * s.seq_len
    steady = float(s.grad_accum * s.data_parallel)
    counts = [seg.tokens_per_step / per_micro for seg in phase.span.segments if seg.steps > 0] if per_micro > 0 else []
    if not counts:
        return steady, False
    return max(counts), min(counts) != max(counts)


def check(ctx: Context) -> Iterator[Finding]:
    if ctx.spec.precision.grads != "bf16":
        return
    groups: dict[str, list[str]] = {}  # how many are summed -> phase names
    for phase in ctx.plan.phases:
        n, varies = _micro_batches_per_step(phase)
        if n > 1:
            dp = phase.settings.data_parallel
            what = f"{'up to ' if varies else ''}{n:.4g} (grad_accum {n / dp:.4g} x dp {dp})"
            groups.setdefault(what, []).append(repr(phase.name))
    if not groups:
        return
    every = len(groups) == 1 and len(next(iter(groups.values()))) == len(ctx.plan.phases) > 1
    if every:
        shown = f"every phase sums {next(iter(groups))}"
    else:
        shown = "; ".join(
            f"{', '.join(names)} {'sum' if len(names) > 1 else 'sums'} {what}" for what, names in groups.items()
        )
    yield ctx.finding(
        "precision.grads",
        f"grads: bf16 while each optimizer step sums several micro-batch gradients: {shown}; "
        "every bf16 addition keeps 8 significant bits, so small contributions are rounded away",
        "set precision.grads: fp32 (accumulate and reduce gradients in fp32)",
        value="fp32",
    )


PASS = [
    {},
    {"precision.grads": "fp32", "batch.grad_accum": 8, "batch.global_batch": "1Mi tokens"},
    {
        "precision.grads": "bf16",
        "hardware.devices_per_node": 1,
        "batch.grad_accum": 1,
        "batch.global_batch": "16Ki tokens",
    },
]
FAIL = [
    case({"precision.grads": "bf16"}, "warning"),
    case({"precision.grads": "bf16", "hardware.devices_per_node": 1, "batch.global_batch": "32Ki tokens"}, "warning"),
    case({"precision.grads": "bf16", "batch.grad_accum": 1, "batch.global_batch": "128Ki tokens"}, "warning"),
    case(
        {
            "precision.grads": "bf16",
            "hardware.devices_per_node": 1,
            "batch.grad_accum": 1,
            "batch.global_batch": "16Ki tokens",
            "phases[3].batch": {"grad_accum": 4},
        },
        "warning",
    ),
    case(
        {
            "precision.grads": "bf16",
            "hardware.devices_per_node": 1,
            "batch.grad_accum": 1,
            "batch.global_batch": "__delete__",
            "batch.ramp": [
                {"after": "0 tokens", "global_batch": "16Ki tokens"},
                {"after": "10%", "global_batch": "64Ki tokens"},
            ],
        },
        "warning",
    ),
]
