"""The token timeline: every phase's start and end in tokens and in optimizer steps.

One timeline runs across all phases. Within a phase the tokens per step are
micro_batch * grad_accum * dp * seq_len, or, where a batch ramp applies, the ramp's global batch
for the tokens seen so far (a step that starts before a ramp threshold keeps the old batch). A
phase runs whole steps: its step count is the nearest whole number to its nominal tokens, and the
difference is reported as drift (never silently floored).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Literal

from runlib.plan.effective import PhaseSettings
from runlib.plan.layout import planned_degrees
from runlib.spec.models import RunSpec
from runlib.spec.units import BatchSize, Duration


@dataclass(frozen=True, slots=True)
class Segment:
    """A stretch of a phase with constant tokens per step."""

    start_tokens: int
    start_step: int
    tokens_per_step: int
    steps: int

    @property
    def end_tokens(self) -> int:
        return self.start_tokens + self.tokens_per_step * self.steps


@dataclass(frozen=True, slots=True)
class PhaseSpan:
    index: int
    nominal_tokens: float
    segments: tuple[Segment, ...]

    @property
    def start_tokens(self) -> int:
        return self.segments[0].start_tokens

    @property
    def end_tokens(self) -> int:
        return self.segments[-1].end_tokens

    @property
    def tokens(self) -> int:
        return self.end_tokens - self.start_tokens

    @property
    def start_step(self) -> int:
        return self.segments[0].start_step

    @property
    def steps(self) -> int:
        return sum(s.steps for s in self.segments)

    @property
    def end_step(self) -> int:
        return self.start_step + self.steps

    @property
    def drift_tokens(self) -> float:
        return self.tokens - self.nominal_tokens


def linear_ramp_points(spec: RunSpec) -> list[tuple[float, BatchSize]]:
    """batch.linear_ramp as ramp points, as Megatron's RampupBatchsizeNumMicroBatchesCalculator
    (megatron/core/num_microbatches_calculator.py): (steady - start) / increment increments, each after an
    equal share of the ramp's length; the batch at c tokens is start + floor(c / share) * increment, and
    the steady global batch (micro_batch x grad_accum x data parallel, the run's own layout) from the
    ramp's end. A ramp whose start is not below the steady batch has no point (BATCH003 does not see it)."""
    ramp = spec.batch.linear_ramp
    if ramp is None:
        return []
    seq_len = spec.model.seq_len
    dp, _ = planned_degrees(spec.parallelism, spec.hardware.nodes * spec.hardware.devices_per_node)
    steady = spec.batch.micro_batch * spec.batch.grad_accum * dp * seq_len
    unit: Literal["tokens", "sequences"] = (
        "sequences" if ramp.start.unit == ramp.increment.unit == "sequences" else "tokens"
    )
    per = seq_len if unit == "sequences" else 1  # tokens per unit
    start, increment = ramp.start.tokens(seq_len) // per, max(1, ramp.increment.tokens(seq_len) // per)
    steady //= per
    over = ramp.over.amount / 100.0 * spec.tokens if ramp.over.unit == "percent" else ramp.over.amount
    increments = max(0, (steady - start) // increment)
    if increments == 0:
        return []
    # a bounded number of points (each is a timeline segment): a finer ramp is coarsened to 1024 levels
    stride = -(-increments // 1024)
    points: list[tuple[float, BatchSize]] = [(0.0, BatchSize(start, unit))]
    for k in range(stride, increments, stride):
        points.append((over * k / increments, BatchSize(start + k * increment, unit)))
    points.append((over, BatchSize(steady, unit)))
    return points


def ramp_points(spec: RunSpec) -> list[tuple[float, BatchSize]]:
    """(threshold tokens, BatchSize) in spec order; percent thresholds are of the run's tokens, and a step
    threshold is the run's optimizer steps from its start: the tokens of that many steps at the batches before
    it (PaLM's "1024 sequences from step 50k", arXiv 2204.02311 section 5). Before the first stage the batch is
    batch.global_batch (else the first stage's)."""
    if spec.batch.linear_ramp is not None:
        return list(linear_ramp_points(spec))
    if not spec.batch.ramp:
        return []
    seq = spec.model.seq_len
    first = spec.batch.global_batch or spec.batch.ramp[0].global_batch
    tokens_at, steps_at, per_step = 0.0, 0.0, float(first.tokens(seq))  # the last threshold reached, in order
    points = []
    for stage in spec.batch.ramp:
        after = stage.after
        if after.unit == "percent":
            threshold = after.amount / 100.0 * spec.tokens
        elif after.unit == "steps":
            threshold = tokens_at + max(0.0, after.amount - steps_at) * per_step
        else:
            threshold = after.amount
        if threshold >= tokens_at:  # stages in order: the steps so far, and the batch from here on
            steps_at += (threshold - tokens_at) / per_step
            tokens_at, per_step = threshold, float(stage.global_batch.tokens(seq))
        points.append((threshold, stage.global_batch))
    return points


@dataclass(frozen=True, slots=True)
class RampStretch:
    """One ramp point and the tokens it covers: from its threshold to the next higher one (or the end)."""

    index: int  # in ramp_points order (batch.ramp[index] unless the ramp is batch.linear_ramp)
    start_tokens: float
    end_tokens: float
    batch: BatchSize
    micro_batch: int | None  # batch.ramp[index].micro_batch (None: batch.micro_batch; always for a linear ramp)


def ramp_stretches(spec: RunSpec) -> list[RampStretch]:
    """The ramp's points (ramp_points) with the stretch of tokens each applies to and its own micro-batch."""
    points = ramp_points(spec)
    thresholds = sorted(t for t, _ in points)
    stages = spec.batch.ramp if spec.batch.linear_ramp is None and spec.batch.ramp else [None] * len(points)
    return [
        RampStretch(
            i,
            start,
            next((t for t in thresholds if t > start), math.inf),
            batch,
            stage.micro_batch if stage is not None else None,
        )
        for i, ((start, batch), stage) in enumerate(zip(points, stages, strict=True))
    ]


def _tokens_per_step_at(
    position: float, settings: PhaseSettings, ramp: list[tuple[float, BatchSize]]
) -> tuple[int, float]:
    """Tokens per step at `position` and the next ramp threshold after it (inf if none)."""
    steady = max(1, settings.steady_tokens_per_step)
    if settings.batch_overridden or not ramp:
        return steady, math.inf
    thresholds = sorted(t for t, _ in ramp)
    i = bisect.bisect_right(thresholds, position)
    next_threshold = thresholds[i] if i < len(thresholds) else math.inf
    if i == 0:
        return steady, next_threshold
    batch = max((p for p in ramp if p[0] <= position), key=lambda p: p[0])[1]
    return max(1, batch.tokens(settings.seq_len)), next_threshold


def nominal_phase_tokens(duration: Duration, run_tokens: int, tokens_per_step: int) -> float:
    if duration.unit == "percent":
        return duration.amount / 100.0 * run_tokens
    if duration.unit == "steps":
        return duration.amount * tokens_per_step
    return duration.amount


def phase_span(
    start_tokens: int, start_step: int, settings: PhaseSettings, run_tokens: int, ramp: list[tuple[float, BatchSize]]
) -> PhaseSpan:
    duration = settings.phase.tokens
    position, step = start_tokens, start_step
    segments: list[Segment] = []
    if duration.unit == "steps":
        remaining_steps = int(duration.amount)
        nominal = 0.0
        while remaining_steps > 0 and len(segments) < 1000:
            tps, next_threshold = _tokens_per_step_at(position, settings, ramp)
            n = (
                remaining_steps
                if math.isinf(next_threshold)
                else min(remaining_steps, math.ceil((next_threshold - position) / tps))
            )
            n = max(1, n)
            segments.append(Segment(position, step, tps, n))
            position, step, remaining_steps = position + n * tps, step + n, remaining_steps - n
            nominal += n * tps
        if not segments:
            segments.append(Segment(position, step, max(1, settings.steady_tokens_per_step), 0))
        return PhaseSpan(settings.index, nominal, tuple(segments))

    nominal = nominal_phase_tokens(duration, run_tokens, settings.steady_tokens_per_step)
    target = start_tokens + nominal
    while len(segments) < 1000:
        tps, next_threshold = _tokens_per_step_at(position, settings, ramp)
        if next_threshold < target:
            n = max(1, math.ceil((next_threshold - position) / tps))
            if position + n * tps >= target:
                # the phase ends before the step that crosses the threshold does: the nearest whole step
                # to its end, as below (the ramp's next batch starts in the next phase)
                n = round((target - position) / tps)
                segments.append(Segment(position, step, tps, max(1 if not segments and nominal > 0 else 0, n)))
                break
            segments.append(Segment(position, step, tps, n))
            position, step = position + n * tps, step + n
            if position >= target:
                break
            continue
        n = round((target - position) / tps)
        if not segments and nominal > 0:
            n = max(1, n)  # a phase with tokens runs at least one step
        segments.append(Segment(position, step, tps, max(0, n)))
        break
    return PhaseSpan(settings.index, nominal, tuple(segments))


def build_timeline(spec: RunSpec, settings: list[PhaseSettings]) -> list[PhaseSpan]:
    ramp = ramp_points(spec)
    spans: list[PhaseSpan] = []
    tokens, step = 0, 0
    for s in settings:
        span = phase_span(tokens, step, s, spec.tokens, ramp)
        spans.append(span)
        tokens, step = span.end_tokens, span.end_step
    return spans


def tokens_at_step(spans: list[PhaseSpan], step: float) -> float:
    """Tokens seen after `step` optimizer steps (extrapolating the last batch past the end)."""
    last = None
    for span in spans:
        for seg in span.segments:
            last = seg
            if step <= seg.start_step + seg.steps:
                return seg.start_tokens + (step - seg.start_step) * seg.tokens_per_step
    if last is None:
        return 0.0
    return last.start_tokens + (step - last.start_step) * last.tokens_per_step


def step_at_tokens(spans: list[PhaseSpan], tokens: float) -> float:
    """Optimizer steps taken when `tokens` have been seen (fractional inside a step)."""
    last = None
    for span in spans:
        for seg in span.segments:
            last = seg
            if tokens <= seg.end_tokens and seg.tokens_per_step > 0:
                return seg.start_step + (tokens - seg.start_tokens) / seg.tokens_per_step
    if last is None or last.tokens_per_step <= 0:
        return 0.0
    return last.start_step + (tokens - last.start_tokens) / last.tokens_per_step


def phase_at_tokens(spans: list[PhaseSpan], tokens: float) -> int:
    """The index of the phase whose step ends after `tokens` tokens: the first phase that ends at or after
    it (a phase boundary belongs to the phase ending there, as the step that reaches it does); the last
    phase beyond the run's end; 0 without phases."""
    for i, span in enumerate(spans):
        if tokens <= span.end_tokens:
            return i
    return max(0, len(spans) - 1)
