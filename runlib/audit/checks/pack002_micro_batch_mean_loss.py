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
    The finding quotes the size on the spec's numbers: a token's weight relative to the token
    mean is mean(S) / S for a micro-batch scoring S targets, with S spread (2 standard
    deviations) by Poisson-distributed document starts (document packing: one masked target
    each) or by exponentially distributed document lengths cut at seq_len (packing: none), from
    data.mean_doc_tokens (assumed 1,000 when not declared).

Flagged:
    data: {packing: document, boundary_targets: masked, loss_normalization: micro_batch_mean}
    batch: {micro_batch: 8, grad_accum: 4}

Preferred:
    data: {packing: document, boundary_targets: masked, loss_normalization: global_tokens}

How to fix:
    Set data.loss_normalization: global_tokens (sum of token losses / scored tokens of the whole
    optimizer step, over all micro-batches and ranks; Megatron's --calculate-per-token-loss).
"""

import math
from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case
from runlib.plan import PhasePlan

CODE = "PACK002"
NAME = "micro-batch-mean-loss"
SEVERITY = "error"


def _micro_batches_per_step(phase: PhasePlan) -> float:
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


ASSUMED_DOC_TOKENS = 1000  # when data.mean_doc_tokens is not declared (web documents: a few hundred to ~1,000)


def scored_spread(packing: str, micro_batch: int, seq_len: int, doc_tokens: float) -> tuple[float, float] | None:
    """(low, high) scored targets of one micro-batch, mean -/+ 2 standard deviations; None when the
    count does not vary with the documents (stream packing, kept boundaries: FIM's small changes only)."""
    tokens = micro_batch * seq_len
    if packing == "none":  # one document per sequence, length ~ exponential(doc_tokens), cut at seq_len
        q = math.exp(-seq_len / doc_tokens)
        mean = doc_tokens * (1 - q)  # E[min(L, s)]
        second = 2 * doc_tokens**2 * (1 - q * (1 + seq_len / doc_tokens))  # E[min(L, s)^2]
        sd = math.sqrt(max(0.0, second - mean * mean) * micro_batch)
        centre = micro_batch * mean
        return max(1.0, centre - 2 * sd), min(float(tokens), centre + 2 * sd)
    if packing == "document":  # one masked target per document start, starts ~ Poisson(tokens / doc_tokens)
        starts = tokens / doc_tokens
        sd = math.sqrt(starts)
        return max(1.0, tokens - starts - 2 * sd), tokens - max(0.0, starts - 2 * sd)
    return None


def _weight_error(ctx: Context, phase: PhasePlan, summed: float) -> str:
    data, s = ctx.spec.data, phase.settings
    doc_tokens = data.mean_doc_tokens or ASSUMED_DOC_TOKENS
    masked = data.packing == "none" or data.boundary_targets == "masked"
    spread = scored_spread(data.packing, s.micro_batch, s.seq_len, doc_tokens) if masked else None
    if spread is None:
        return ""
    low, high = spread
    mean = (low + high) / 2
    basis = f"documents of {doc_tokens:,} tokens on average" + (
        "" if data.mean_doc_tokens else " (assumed: declare data.mean_doc_tokens)"
    )
    return (
        f". On this spec's numbers (phase {phase.name!r}: {summed:,.0f} micro-batches of {s.micro_batch} x "
        f"{s.seq_len} tokens per step, {basis}) a micro-batch scores {low:,.0f} to {high:,.0f} targets (2 standard "
        f"deviations), so a token weighs {mean / low:.5g}x its token-mean weight in a sparse micro-batch and "
        f"{mean / high:.5g}x in a dense one: it counts {_more(high / low)} the same token in the dense one"
    )


def _more(ratio: float) -> str:
    return f"{(ratio - 1) * 100:.2g}% more than" if ratio < 1.1 else f"{ratio:.3g} times as much as"


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
    worst = max((p for p in ctx.plan.phases if _micro_batches_per_step(p) > 1), key=_micro_batches_per_step)
    yield ctx.finding(
        "data.loss_normalization",
        f"loss_normalization: micro_batch_mean averages per-micro-batch means over up to {most:.4g} micro-batches "
        f"per step (grad_accum x dp, in {where}) while scored tokens per micro-batch differ ({'; '.join(reasons)}): "
        "the update is not the token mean of the step and changes with grad_accum and dp"
        + _weight_error(ctx, worst, most),
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
