"""Value syntax of the run spec: counts with suffixes, durations, batch sizes.

A count is an integer or a number with a suffix: K, M, G/B, T (powers of 1000) or Ki, Mi, Gi, Ti
(powers of 1024). "B" means billions, never bytes. A duration is "<count> tokens", "<count> steps"
or "<p>%" of the run's total tokens. A batch size is "<count> tokens", "<count> sequences" or a plain
count of sequences.

Every value is bounded before any arithmetic: a count is at most MAX_COUNT (10^18, under int64's
9.2e18, a thousand times the 10^15 tokens of the largest published runs), its text has at most 30
digits before and after the point and a two-digit exponent (Fraction("1e100000000") would build a
hundred-million-digit integer), and a percentage is finite and at most MAX_PERCENT.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, PlainSerializer, WithJsonSchema

DECIMAL_SUFFIXES = {"K": 10**3, "M": 10**6, "G": 10**9, "B": 10**9, "T": 10**12}
BINARY_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
MAX_COUNT = 10**18
MAX_PERCENT = 1000.0
_COUNT_RE = re.compile(r"^\s*([0-9]{1,30}(?:\.[0-9]{1,30})?(?:[eE][+-]?[0-9]{1,2})?)\s*(Ki|Mi|Gi|Ti|K|M|G|B|T)?\s*$")
COUNT_PATTERN = r"^[0-9]{1,30}(\.[0-9]{1,30})?([eE][+-]?[0-9]{1,2})?\s*(Ki|Mi|Gi|Ti|K|M|G|B|T)?$"


def _bounded(n: int, value: Any) -> int:
    if abs(n) > MAX_COUNT:
        shown = repr(value) if isinstance(value, str) and len(value) <= 40 else f"about 10^{len(str(abs(n))) - 1}"
        raise ValueError(f"a count must be at most 1e18 (got {shown})")
    return n


def parse_count(value: Any) -> int:
    """`4K` -> 4000, `4Mi` -> 4194304, `2.5M` -> 2500000; a count must come out whole."""
    if isinstance(value, bool):
        raise ValueError("expected a count such as 4096, 4K, 2.5M or 4Mi, got a boolean")
    if isinstance(value, int):
        if abs(value) > MAX_COUNT:  # without str(value): int -> str of over 4,300 digits raises
            raise ValueError(
                f"a count must be at most 1e18 (got a number of {int(value.bit_length() * 0.30103) + 1} digits or so)"
            )
        return value
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise ValueError(f"a count must be a whole number, got {value!r}")
        return _bounded(int(value), value)
    if not isinstance(value, str):
        raise ValueError(f"expected a count such as 4096, 4K, 2.5M or 4Mi, got {type(value).__name__}")
    match = _COUNT_RE.match(value) if len(value) <= 80 else None
    if not match:
        shown = repr(value) if len(value) <= 80 else f"{value[:40]!r}... ({len(value):,} characters)"
        raise ValueError(
            f"{shown} is not a count: use an integer or a suffix K, M, B, T, Ki, Mi (e.g. 300B, 4Mi), "
            "at most 30 digits and a two-digit exponent"
        )
    number, suffix = match.groups()
    scale = DECIMAL_SUFFIXES.get(suffix or "", BINARY_SUFFIXES.get(suffix or "", 1))
    # exact arithmetic for decimals such as 2.5M: go through the decimal string, not a float
    if "." in number or "e" in number.lower():
        from fractions import Fraction

        exact = Fraction(number) * scale  # at most 61 digits by the pattern: cheap
        if exact.denominator != 1:
            raise ValueError(f"{value!r} is not a whole number")
        return _bounded(int(exact), value)
    return _bounded(int(number) * scale, value)


def format_count(n: float) -> str:
    """Short human form: 4194304 -> '4.19M', 4e12 -> '4T'."""
    n = float(n)
    for suffix, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            text = f"{n / scale:.3g}"
            return f"{text}{suffix}"
    return f"{n:.4g}"


Count = Annotated[
    int,
    BeforeValidator(parse_count),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer", "maximum": MAX_COUNT}, {"type": "string", "pattern": COUNT_PATTERN}],
            "examples": [4096, "4K", "2.5M", "300B", "4Mi"],
        }
    ),
]
"""An integer, or a number with a K/M/B/T (1000s) or Ki/Mi (1024s) suffix; at most 10^18."""


DurationUnit = Literal["tokens", "steps", "percent"]
_DURATION_RE = re.compile(r"^\s*(\S+?)\s*(tokens|steps|%)\s*$")
DURATION_PATTERN = r"^\s*\S+\s*(tokens|steps|%)\s*$"


@dataclass(frozen=True, slots=True)
class Duration:
    """A span of the run: `amount` tokens, steps, or percent of the run's total tokens."""

    amount: float
    unit: DurationUnit

    def __str__(self) -> str:
        if self.unit == "percent":
            return f"{self.amount:g}%"
        return f"{format_count(self.amount)} {self.unit}"


def short_repr(value: Any) -> str:
    """repr() for messages, at most about 80 characters (a hostile spec's value may be 100 KB long)."""
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**40 else "a very large integer"
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text):,} characters)"


def parse_duration(value: Any) -> Duration:
    if isinstance(value, Duration):
        return value
    if isinstance(value, bool) or not isinstance(value, str):
        raise ValueError(f"expected a duration such as '8B tokens', '2000 steps' or '3%', got {short_repr(value)}")
    if len(value) > 80:
        raise ValueError(f"{short_repr(value)} is not a duration: write '<count> tokens', '<count> steps' or '<p>%'")
    match = _DURATION_RE.match(value)
    if not match:
        raise ValueError(f"{value!r} is not a duration: write '<count> tokens', '<count> steps' or '<p>%'")
    amount_text, unit = match.groups()
    if unit == "%":
        try:
            percent = float(amount_text)
        except ValueError:
            raise ValueError(f"{value!r}: {amount_text!r} is not a number of percent") from None
        if not (0 <= percent <= MAX_PERCENT):  # also NaN
            raise ValueError(f"{value!r}: a percentage must be a finite number in [0, {MAX_PERCENT:g}]")
        return Duration(percent, "percent")
    return Duration(float(parse_count(amount_text)), unit)  # type: ignore[arg-type]


DurationField = Annotated[
    Duration,
    BeforeValidator(parse_duration),
    PlainSerializer(str, return_type=str),
    WithJsonSchema({"type": "string", "pattern": DURATION_PATTERN, "examples": ["8B tokens", "2000 steps", "3%"]}),
]
"""'<count> tokens', '<count> steps' or '<p>%' of the run's total tokens."""


BatchUnit = Literal["tokens", "sequences"]
_BATCH_RE = re.compile(r"^\s*(\S+?)\s*(tokens|sequences)\s*$")


@dataclass(frozen=True, slots=True)
class BatchSize:
    """A global batch: `amount` tokens or sequences per optimizer step."""

    amount: int
    unit: BatchUnit

    def tokens(self, seq_len: int) -> int:
        return self.amount if self.unit == "tokens" else self.amount * seq_len

    def __str__(self) -> str:
        return f"{format_count(self.amount)} {self.unit}"


def parse_batch_size(value: Any) -> BatchSize:
    if isinstance(value, BatchSize):
        return value
    try:
        match = _BATCH_RE.match(value) if isinstance(value, str) and len(value) <= 80 else None
        if match:
            batch = BatchSize(parse_count(match.group(1)), match.group(2))  # type: ignore[arg-type]
        else:
            batch = BatchSize(parse_count(value), "sequences")
    except ValueError as exc:
        if str(exc).startswith("a count must be at most"):
            raise
        raise ValueError(
            f"{short_repr(value)} is not a batch size: write '<count> tokens', '<count> sequences' or a count of "
            "sequences"
        ) from None
    if batch.amount < 1:
        raise ValueError(f"a batch size must be at least 1 (got {batch})")
    return batch


BatchSizeField = Annotated[
    BatchSize,
    BeforeValidator(parse_batch_size),
    PlainSerializer(str, return_type=str),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 1, "maximum": MAX_COUNT},
                {"type": "string", "pattern": r"^\s*\S+\s*(tokens|sequences)?\s*$"},
            ],
            "examples": ["4Mi tokens", "512 sequences", 512],
        }
    ),
]
"""'<count> tokens', '<count> sequences', or a plain count of sequences."""
