"""A loss curve smoothed over tokens, whatever the logging interval.

The run report draws the raw logged loss and, beside it, an exponential moving average (EMA) taken
over tokens rather than over log records: each logged value stands for the interval of tokens since
the previous record, and its weight in the average is the share of an exponential kernel (half-life
`half_life_tokens`) that interval covers, 1 - 2^(-interval / half_life). A phase logged every step
and a phase logged every 20 steps are then smoothed alike: the curve's memory is a number of
tokens, not of points, so density changes at a phase line do not change how smooth the curve is.
When each record is the mean loss over the tokens it covers (runlib.train.loop logs the interval's
mean and its interval_tokens), the result is exactly the EMA of the per-token loss sampled at the
record's end (the integral of the kernel over each interval); when a record is one step's loss (the
logs of runlib before the interval means) it stands in for its whole interval, the best that log allows.

The average is normalised by the kernel mass seen so far (1 - 2^(-(t - start) / half_life)), so it
starts at the first value rather than at zero (TensorBoard's "debiased" EMA does the same per point).
Pure functions: lists in, lists out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def ema_over_tokens(
    tokens: Sequence[float],
    values: Sequence[float],
    half_life_tokens: float,
    start_tokens: float | None = None,
    covered_tokens: Sequence[float | None] | None = None,
) -> list[float]:
    """The debiased EMA of `values` logged at cumulative `tokens` (non-decreasing).

    Each value stands for the tokens just before it: covered_tokens[i] of them when given (a record's
    interval_tokens: fewer than the gap to the previous record after a resume inside an interval),
    else the whole gap since the previous record (the first: since start_tokens; with no start, a
    half-life). A value covering no tokens gets no weight: it repeats the running average (or itself,
    first)."""
    if len(tokens) != len(values):
        raise ValueError(f"tokens and values differ in length ({len(tokens)} vs {len(values)})")
    if covered_tokens is not None and len(covered_tokens) != len(values):
        raise ValueError(f"covered_tokens and values differ in length ({len(covered_tokens)} vs {len(values)})")
    if not half_life_tokens > 0:
        raise ValueError(f"half_life_tokens must be positive, got {half_life_tokens}")
    rate = math.log(2.0) / half_life_tokens
    out: list[float] = []
    num = den = 0.0
    previous = start_tokens
    for i, (t, v) in enumerate(zip(tokens, values, strict=True)):
        gap = max(t - previous, 0.0) if previous is not None else half_life_tokens
        previous = t if previous is None else max(previous, t)
        covered = covered_tokens[i] if covered_tokens is not None else None
        covered = gap if covered is None or not math.isfinite(covered) else min(max(covered, 0.0), gap)
        weight = 1.0 - math.exp(-rate * covered)  # the kernel's mass over the covered tokens
        decay = math.exp(-rate * gap)  # everything before them ages by the whole gap
        num = num * decay + v * weight
        den = den * decay + weight
        out.append(num / den if den > 0 else v)
    return out
