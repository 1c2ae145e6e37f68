"""TOK003: model.vocab_size not a multiple of 64 x the tensor-parallel degree.

Why it matters:
    The embedding and the output head are the widest matmuls of a small model. Tensor cores run
    at full speed only when matrix dimensions are multiples of 64 (bf16/fp16; 8 at minimum), and
    with tensor parallelism the rows are split across t ranks, so each shard must be a multiple
    too. An unpadded vocabulary such as GPT-2's 50257 costs measurable throughput: nanoGPT pads
    it to 50304 ("nearest multiple of 64", model.py), which its author measured as a ~25% speed-up
    (x.com/karpathy/status/1621578354024677377), and Megatron pads to 128 x t
    (megatron/training/vocab_utils.py). The extra rows are never
    produced by the tokenizer and cost nothing in quality. The cost scales with the head's share of
    the matmuls: a warning when the output head holds 5% or more of them (GPT-2 124M: 31%), info
    below (OPT-175B's unpadded 50272 rows under tensor 8 are 0.35% of its matmuls, arXiv
    2205.01068 Table 1).

Flagged:
    model: {vocab_size: 50257}

Preferred:
    model: {vocab_size: 50304}         # next multiple of 64 x tensor (here tensor = 1)

How to fix:
    Set model.vocab_size to the padded size the finding gives (the next multiple of 64 times the
    largest tensor-parallel degree of any phase).
"""

import math
from collections.abc import Iterator

from runlib.audit.registry import DELETE, Context, Finding, case

CODE = "TOK003"
NAME = "vocab-not-padded"
SEVERITY = "warning"
MULTIPLE = 64  # per tensor-parallel rank
WARNING_HEAD_SHARE = 0.05  # of the matmul parameters per token


def check(ctx: Context) -> Iterator[Finding]:
    rows = ctx.plan.vocab_rows
    base = ctx.spec.parallelism.tensor
    tensor = max([p.settings.parallelism.tensor for p in ctx.plan.phases] + [base])
    multiple = MULTIPLE * tensor
    if rows <= 0 or rows % multiple == 0:
        return
    padded = math.ceil(rows / multiple) * multiple
    declared = ctx.spec.model.vocab_size is not None
    what = f"model.vocab_size {rows}" if declared else f"the derived vocab size {rows} (model.vocab_size omitted)"
    head_share = rows * ctx.spec.model.d_model / max(ctx.plan.params.matmul, 1)
    where = [repr(p.name) for p in ctx.plan.phases if p.settings.parallelism.tensor == tensor]
    tp = f"tensor {tensor}" + (f" (phase {', '.join(where)})" if tensor > base and where else "")
    yield ctx.finding(
        "model.vocab_size",
        f"{what} is not a multiple of 64 x {tp} = {multiple}: the embedding and output-head matmuls "
        f"run off the tensor-core tile sizes ({rows % multiple} rows past the last multiple; the output head is "
        f"{head_share:.1%} of the matmuls)",
        f"set model.vocab_size: {padded} (the next multiple of {multiple}; the extra rows are never used by the tokenizer)",
        value=padded,
        severity="warning" if head_share >= WARNING_HEAD_SHARE else "info",
    )


PASS = [
    {},
    {"model.vocab_size": 32832},  # 513 x 64
    {"parallelism.tensor": 8},  # 32768 = 64 x 512
    {"model.vocab_size": DELETE},
    # a derived size is padded to lcm(128, 64 * tensor): 32100 + 256 -> 32512 with tensor 4
    {"model.vocab_size": DELETE, "tokenizer.vocab_size": 32100, "parallelism.tensor": 4},
]
FAIL = [
    case({"model.vocab_size": 32300}, "warning"),
    case({"model.vocab_size": 32832, "parallelism.tensor": 2}, "warning"),
    case({"model.vocab_size": 32832, "phases[2].parallelism": {"tensor": 2}}, "warning"),
    case({"model.vocab_size": 32300, "model.layers": 96}, "info"),  # the head is 4% of the matmuls
]
