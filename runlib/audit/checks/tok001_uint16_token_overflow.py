"""TOK001: token_dtype uint16 while the largest token id exceeds 65535.

Why it matters:
    uint16 holds ids 0..65535. A tokenizer with more ids (learned vocab + reserved + domain tokens)
    stored as uint16 wraps the high ids around modulo 65536 silently: the model trains on wrong
    tokens and nothing crashes (princeton-nlp/LLM-Shearing#65, huggingface/datatrove#118,
    mlfoundations/open_lm#77). Megatron picks the dtype from the vocabulary size for this reason
    (megatron/core/datasets/indexed_dataset.py: uint16 only below 65500), nanotron records the
    token size in its dataset metadata.

Flagged:
    tokenizer: {vocab_size: 100000, reserved_tokens: 256}   # ids up to 100255
    data: {token_dtype: uint16}

Preferred:
    tokenizer: {vocab_size: 100000, reserved_tokens: 256}
    data: {token_dtype: uint32}        # or auto: the smallest dtype that holds the largest id

How to fix:
    Set data.token_dtype: uint32 (or auto). With a pretrained tokenizer whose size the spec does
    not give, the model's vocab_size bounds the ids and is used instead.
"""

from collections.abc import Iterator

from runlib.audit.registry import DELETE, Context, Finding, case

CODE = "TOK001"
NAME = "uint16-token-overflow"
SEVERITY = "error"
UINT16_MAX = 65535


def largest_token_id(ctx: Context) -> tuple[int, str] | None:
    """The largest id the data can hold and where it comes from; None when the spec does not say."""
    tok = ctx.spec.tokenizer
    if tok.vocab_size is not None:
        ids = ctx.plan.tokenizer_ids
        return (
            ids - 1,
            f"{tok.vocab_size} learned + {tok.reserved_tokens} reserved + {len(set(tok.domain_tokens))} domain tokens",
        )
    if ctx.spec.model.vocab_size is not None:
        return (
            ctx.spec.model.vocab_size - 1,
            f"model.vocab_size {ctx.spec.model.vocab_size} (the tokenizer's own size is not given)",
        )
    return None


def check(ctx: Context) -> Iterator[Finding]:
    if ctx.spec.data.token_dtype != "uint16":
        return
    largest = largest_token_id(ctx)
    if largest is None or largest[0] <= UINT16_MAX:
        return
    top, origin = largest
    yield ctx.finding(
        "data.token_dtype",
        f"token_dtype: uint16 holds ids up to {UINT16_MAX}, but the largest token id is {top} ({origin}): "
        f"ids above {UINT16_MAX} wrap around silently and the model trains on wrong tokens",
        "set data.token_dtype: uint32 (or auto)",
        value="uint32",
    )


PASS = [
    {},
    {"data.token_dtype": "uint16"},
    {"data.token_dtype": "uint16", "tokenizer.vocab_size": 65280, "model.vocab_size": 65536},  # largest id 65535
    {"data.token_dtype": "uint32", "tokenizer.vocab_size": 100000, "model.vocab_size": 100352},
    {
        "data.token_dtype": "uint16",
        "tokenizer.vocab_size": DELETE,
        "tokenizer.pretrained": "tok/tokenizer.json",
        "model.vocab_size": 50304,
    },
]
FAIL = [
    case({"data.token_dtype": "uint16", "tokenizer.vocab_size": 100000, "model.vocab_size": 100352}, "error"),
    case(
        {
            "data.token_dtype": "uint16",
            "tokenizer.vocab_size": 65280,
            "tokenizer.domain_tokens": ["amoxicillin"],
            "model.vocab_size": 65600,
        },
        "error",
    ),
    case(
        {
            "data.token_dtype": "uint16",
            "tokenizer.vocab_size": DELETE,
            "tokenizer.pretrained": "tok/tokenizer.json",
            "model.vocab_size": 128256,
        },
        "error",
    ),
]
