"""TOK007: fim enabled on a source and fewer than 3 reserved tokens free for the FIM markers.

Why it matters:
    Fill-in-the-middle rewrites a document as prefix/suffix/middle around three sentinel tokens
    (<fim_prefix>, <fim_suffix>, <fim_middle>; Bavarian et al., arXiv 2207.14255). They must be
    special tokens of their own: spelled out as text they are split by BPE and collide with real
    text that contains them. They come out of tokenizer.reserved_tokens, which also holds the
    end-of-document token, so FIM needs reserved_tokens >= 4; with fewer, the data pipeline cannot
    build the FIM examples at all.

Flagged:
    tokenizer: {reserved_tokens: 2}
    data: {sources: {code: {domain: code, fim: {rate: 0.5}}}}

Preferred:
    tokenizer: {reserved_tokens: 256}
    data: {sources: {code: {domain: code, fim: {rate: 0.5}}}}

How to fix:
    Raise tokenizer.reserved_tokens to at least 4 (256 is common, see TOK004), or turn FIM off
    (fim: {rate: 0} or no fim section).
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "TOK007"
NAME = "no-reserved-tokens-for-fim"
SEVERITY = "error"
FIM_MARKERS = 3
EOD_TOKENS = 1  # the end-of-document token is one of the reserved tokens


def check(ctx: Context) -> Iterator[Finding]:
    fim_sources = [name for name, src in ctx.spec.data.sources.items() if src.fim is not None and src.fim.rate > 0]
    if not fim_sources:
        return
    reserved = ctx.spec.tokenizer.reserved_tokens
    free = max(0, reserved - EOD_TOKENS)
    if free >= FIM_MARKERS:
        return
    needed = FIM_MARKERS + EOD_TOKENS
    yield ctx.finding(
        "tokenizer.reserved_tokens",
        f"fim is on for {', '.join(fim_sources)} but reserved_tokens: {reserved} leaves {free} free after the "
        f"end-of-document token, fewer than the {FIM_MARKERS} FIM markers (prefix, suffix, middle)",
        f"set tokenizer.reserved_tokens to at least {needed} (256 is common), or turn FIM off",
    )


PASS = [
    {},
    {"tokenizer.reserved_tokens": 4},
    {"tokenizer.reserved_tokens": 2, "data.sources.code.fim": {"rate": 0.0}},
    {"tokenizer.reserved_tokens": 1, "data.sources.code.fim": "__delete__"},
]
FAIL = [
    case({"tokenizer.reserved_tokens": 3}, "error"),
    case({"tokenizer.reserved_tokens": 0}, "error"),
    case(
        {"tokenizer.reserved_tokens": 1, "data.sources.web.fim": {"rate": 0.1}, "data.sources.code.fim": "__delete__"},
        "error",
    ),
]
