"""TOK002: model.vocab_size smaller than the tokenizer's ids.

Why it matters:
    Every id the tokenizer can produce (learned vocabulary + reserved tokens + domain tokens) needs
    an embedding row. With fewer rows, the first batch holding a high id fails with "index out of
    range" or a device-side assert on GPU, often hours into a run when a reserved or domain token
    first appears (huggingface/transformers#24698, #11102; inseq-team/inseq#306 lists real
    mismatches such as Llama-3.1's 128000 learned vs 128256 ids).

Flagged:
    model: {vocab_size: 100000}
    tokenizer: {vocab_size: 100000, reserved_tokens: 256}      # 100256 ids

Preferred:
    model: {vocab_size: 100352}        # 100256 padded to a multiple of 128
    tokenizer: {vocab_size: 100000, reserved_tokens: 256}

How to fix:
    Set model.vocab_size to at least the tokenizer's id count, padded (the finding gives the
    padded size: a multiple of 128 and of 64 x the tensor-parallel degree), or omit it to have it
    derived.
"""

import math
from collections.abc import Iterator

from runlib.audit.registry import DELETE, Context, Finding, case
from runlib.plan.derive import VOCAB_PAD_MULTIPLE

CODE = "TOK002"
NAME = "vocab-smaller-than-tokenizer"
SEVERITY = "error"
TENSOR_CORE_MULTIPLE = 64  # per tensor-parallel rank (TOK003)


def max_tensor(ctx: Context) -> int:
    return max([p.settings.parallelism.tensor for p in ctx.plan.phases] + [ctx.spec.parallelism.tensor])


def check(ctx: Context) -> Iterator[Finding]:
    rows = ctx.spec.model.vocab_size
    if rows is None:
        return  # derived from the tokenizer: always covers it
    tok = ctx.spec.tokenizer
    ids = ctx.plan.tokenizer_ids
    if rows >= ids:
        return
    multiple = math.lcm(VOCAB_PAD_MULTIPLE, TENSOR_CORE_MULTIPLE * max_tensor(ctx))
    padded = math.ceil(ids / multiple) * multiple
    known = tok.vocab_size is not None
    learned = f"{tok.vocab_size} learned" if known else "a pretrained vocabulary of unstated size"
    parts = f"{learned} + {tok.reserved_tokens} reserved + {len(set(tok.domain_tokens))} domain"
    yield ctx.finding(
        "model.vocab_size",
        f"model.vocab_size {rows} is smaller than the tokenizer's {ids if known else f'ids (at least {ids}:'} {'ids (' if known else ''}{parts}): "
        f"ids {rows}..{ids - 1} have no embedding row and crash the run when they first appear",
        f"set model.vocab_size: {padded} (the {ids} ids padded to a multiple of {multiple}), or omit it to derive it",
        value=padded,
    )


PASS = [
    {},
    {"model.vocab_size": 32256},  # exactly the tokenizer's ids
    {"model.vocab_size": DELETE},
    {"tokenizer.vocab_size": DELETE, "tokenizer.pretrained": "tok/tokenizer.json", "model.vocab_size": 50304},
]
FAIL = [
    case({"model.vocab_size": 32000}, "error"),
    case({"tokenizer.domain_tokens": ["amoxicillin", "penicillin"], "model.vocab_size": 32256}, "error"),
    case({"tokenizer.vocab_size": 100000, "model.vocab_size": 100000, "parallelism.tensor": 4}, "error"),
    case(
        {
            "tokenizer.vocab_size": DELETE,
            "tokenizer.pretrained": "tok/tokenizer.json",
            "tokenizer.reserved_tokens": 512,
            "model.vocab_size": 300,
        },
        "error",
    ),
]
