"""The special-token layout, in one place: ids 0..R-1 of every trained tokenizer are its reserved tokens.

Id 0 is the end-of-document token (EOS), appended after every document when tokenizing. Then the
padding token and the three fill-in-the-middle sentinels, then `<|reserved_5|>`, `<|reserved_6|>`, ...
up to R-1: unused in pre-training, kept so post-training (roles, tools, separators) can give them a
meaning without changing the embedding size. With R smaller than the named tokens, the first R are kept.
"""

from __future__ import annotations

EOS = "<|endoftext|>"
PAD = "<|pad|>"
FIM_PREFIX = "<|fim_prefix|>"
FIM_MIDDLE = "<|fim_middle|>"
FIM_SUFFIX = "<|fim_suffix|>"

NAMED = (EOS, PAD, FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX)
"""The named special tokens, in id order (EOS = 0)."""

EOS_ID = 0


def reserved_name(i: int) -> str:
    """The name of unnamed reserved id i (i >= len(NAMED))."""
    return f"<|reserved_{i}|>"


def special_tokens(reserved: int) -> list[str]:
    """The R special tokens, in id order: the named ones first, then `<|reserved_i|>` for i = 5.. R-1."""
    if reserved < 1:
        raise ValueError(f"reserved must be at least 1 (the end-of-document token), got {reserved}")
    named = list(NAMED[:reserved])
    return named + [reserved_name(i) for i in range(len(named), reserved)]


def special_ids(reserved: int) -> dict[str, int]:
    """Name -> id of the named special tokens that exist with R reserved tokens."""
    return {name: i for i, name in enumerate(NAMED[:reserved])}
