"""TOK004: reserved tokens fewer than 100 or more than 1000.

Why it matters:
    Reserved tokens are the ids kept free for what comes after pre-training: chat roles, tool
    calls, fill-in-the-middle markers, separators. Too few, and post-training has to grow the
    embedding and output head later, with new rows that start untrained and break the
    tokenizer/model pairing of every released checkpoint. Too many, and thousands of embedding
    rows are never trained but still cost parameters, memory and output-softmax compute on every
    token. Llama 3 reserves 256 (arXiv 2407.21783; ids 128000-128255); a few hundred is the
    common range.

Flagged:
    tokenizer: {vocab_size: 100000, reserved_tokens: 8}

Preferred:
    tokenizer: {vocab_size: 100000, reserved_tokens: 256}

How to fix:
    Reserve between 100 and 1000 special tokens; 256 is the common choice. Re-check
    model.vocab_size (TOK002/TOK003) after changing it.
    A pretrained tokenizer (tokenizer.pretrained) is not checked: its special tokens are given.
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case
from runlib.spec.units import format_count

CODE = "TOK004"
NAME = "reserved-tokens-out-of-range"
SEVERITY = "warning"
LOW, HIGH = 100, 1000


def check(ctx: Context) -> Iterator[Finding]:
    if ctx.spec.tokenizer.pretrained is not None:
        return  # an existing tokenizer's special tokens are what they are; this run does not choose them
    reserved = ctx.spec.tokenizer.reserved_tokens
    if reserved < LOW:
        if reserved == 0:
            what = "no reserved tokens, not even the end-of-document token (which is one of them)"
        else:
            what = f"only {reserved} reserved tokens (fewer than {LOW})"
        yield ctx.finding(
            "tokenizer.reserved_tokens",
            f"{what}: chat roles, tool calls, FIM markers and separators "
            "added in post-training will need new, untrained embedding rows",
            "reserve between 100 and 1000 special tokens (256 is common) and re-check model.vocab_size",
        )
    elif reserved > HIGH:
        model = ctx.spec.model
        matrices = 1 if model.tie_embeddings else 2
        rows_params = reserved * model.d_model * matrices
        yield ctx.finding(
            "tokenizer.reserved_tokens",
            f"{reserved} reserved tokens (more than {HIGH}): rows that pre-training never trains, "
            f"{format_count(rows_params)} parameters ({reserved} rows x d_model {model.d_model}"
            f"{' x 2, untied' if matrices == 2 else ', tied'}) and output-softmax work on every token",
            "reserve between 100 and 1000 special tokens (256 is common) and re-check model.vocab_size",
        )


PASS = [
    {"tokenizer.pretrained": "tokenizers/gpt2.json", "tokenizer.reserved_tokens": 1},
    {},
    {"tokenizer.reserved_tokens": 100},
    {"tokenizer.reserved_tokens": 1000},
]
FAIL = [
    case({"tokenizer.reserved_tokens": 99}, "warning"),
    case({"tokenizer.reserved_tokens": 0}, "warning"),
    case({"tokenizer.reserved_tokens": 4096, "model.vocab_size": 36864}, "warning"),
]
