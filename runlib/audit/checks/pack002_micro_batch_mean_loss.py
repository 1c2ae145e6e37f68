"""PACK002: loss_normalization: micro_batch_mean while scored tokens per micro-batch can differ.

Why it matters:
    With micro_batch_mean, each micro-batch's loss is the mean over its own scored tokens, and the
    optimizer step averages those means over grad_accum micro-batches and dp ranks. When the
    micro-batches score different numbers of tokens, tokens in sparse micro-batches weigh more
    than tokens in dense ones: the update is not the token mean of the step, and it changes with
    grad_accum and dp (bsz 1 x ga 16 != bsz 16 x ga 1). This was the 2024 gradient-accumulation
    bug of HF transformers (huggingface/trl#2175, fixed in huggingface/transformers#34191 and
    #34373). Scored counts vary with masked document-boundary targets (one per boundary, and
    boundaries per micro-batch vary), with padding (packing: none), and with FIM, whose rewritten
    documents are truncated or padded back to the context length (bigcode Megatron-LM
    gpt_dataset.py). With one micro-batch per step on one rank it is exactly the token mean.

Flagged:
    data: {packing: document, boundary_targets: masked, loss_normalization: micro_batch_mean}
    batch: {micro_batch: 8, grad_accum: 4}

Preferred:
    data: {packing: document, boundary_targets: masked, loss_normalization: global_tokens}

How to fix:
    Set data.loss_normalization: global_tokens (sum of token losses / scored tokens of the whole
    optimizer step, over all micro-batches and ranks; Megatron's --calculate-per-token-loss).
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "PACK002"
NAME = "micro-batch-mean-loss"
SEVERITY = "error"


def _micro_batches_per_step(phase) -> float:
    """Micro-batches summed into one optimizer step (grad_accum * dp), the largest over the
    phase's batch-ramp segments."""
    s = phase.settings
    per_micro = s.micro_batch * s.seq_len
    counts = [seg.tokens_per_step / per_micro for seg in phase.span.segments if seg.steps > 0] if per_micro > 0 else []
    return max(counts, default=float(s.grad_accum * s.data_parallel))


def _variable_targets(ctx: Context) -> list[str]:
    data = ctx.spec.data
    reasons = []
    if data.packing == "document" and data.boundary_targets == "masked":
        reasons.append("document packing masks one target per document boundary, and boundaries per micro-batch vary")
    if data.packing == "none":
        reasons.append("packing: none pads each document to seq_len, so real tokens per micro-batch vary")
    used = {name for p in ctx.spec.phases for name, w in p.mixture.items() if w > 0}
    fim = [name for name, src in data.sources.items() if src.fim is not None and src.fim.rate > 0 and name in used]
    if fim:
        reasons.append(f"FIM on {', '.join(fim)} truncates or pads rewritten documents")
    return reasons


def check(ctx: Context) -> Iterator[Finding]:
    if ctx.spec.data.loss_normalization != "micro_batch_mean":
        return
    reasons = _variable_targets(ctx)
    if not reasons:
        return
    summed = [(p.name, n) for p in ctx.plan.phases if (n := _micro_batches_per_step(p)) > 1]
    if not summed:
        return  # one micro-batch per step on one rank: its mean is the token mean of the step
    most = max(n for _, n in summed)
    where = "every phase" if len(summed) == len(ctx.plan.phases) > 1 else ", ".join(repr(name) for name, _ in summed)
    yield ctx.finding(
        "data.loss_normalization",
        f"loss_normalization: micro_batch_mean averages per-micro-batch means over up to {most:.4g} micro-batches "
        f"per step (grad_accum x dp, in {where}) while scored tokens per micro-batch differ ({'; '.join(reasons)}): "
        "the update is not the token mean of the step and changes with grad_accum and dp",
        "set data.loss_normalization: global_tokens (divide the summed token losses by the scored tokens of the whole step)",
        value="global_tokens",
    )


_SINGLE = {"hardware.devices_per_node": 1, "batch.grad_accum": 1, "batch.global_batch": "16Ki tokens"}
PASS = [
    {},
    {"data.loss_normalization": "micro_batch_mean", "data.packing": "stream", "data.sources.code.fim": "__delete__"},
    {"data.loss_normalization": "micro_batch_mean", **_SINGLE},
    {"data.loss_normalization": "micro_batch_mean", "data.packing": "stream", "data.sources.code.fim": {"rate": 0.0}},
]
FAIL = [
    case({"data.loss_normalization": "micro_batch_mean", "data.sources.code.fim": "__delete__"}, "error"),
    case(
        {"data.loss_normalization": "micro_batch_mean", "data.packing": "none", "data.sources.code.fim": "__delete__"},
        "error",
    ),
    case({"data.loss_normalization": "micro_batch_mean", "data.packing": "stream"}, "error"),
    case({"data.loss_normalization": "micro_batch_mean", **_SINGLE, "phases[3].batch": {"grad_accum": 4}}, "error"),
]
