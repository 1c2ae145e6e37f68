"""The learning-rate schedule as a pure function of tokens seen, across all phases.

Evaluated in tokens (OLMo's `units: tokens`, allenai/OLMo PR #411) so that a batch ramp or a phase
with another batch does not move it. Warmup is linear from 0; then
  wsd       constant at the peak, then linear to the floor over the final `decay` (Hägele et al. 2024, arXiv 2405.18392)
  cosine    half-cosine from the peak to the floor over `decay` (default: until the run's end)
  linear    linear from the peak to the floor over `decay` (default: until the run's end)
  constant  the peak until the end
  multistep the peak, then a level (lr_ratio * peak) from each of `lr_steps` on: DeepSeek LLM (arXiv
            2401.02954, section 2.3: 31.6% of the peak after 80% of the tokens, 10% after 90%), which
            keeps the peak for most of the run so that a continued run can reuse it
  inverse_sqrt the peak until warmup + `hold` = s, then peak * sqrt(s / tokens) (Vaswani et al. 2017,
            section 5.3: s the warmup's end; T5 and PaLM, arXiv 2204.02311 section 5: 1e-2 for 10,000 steps,
            then 1/sqrt(k); in tokens here, so a batch change does not move it)
and the floor (min_lr_ratio * peak; multistep: the last level) after the decay ends.

A phase may take its own path (PhasePath: phases[].optimizer.lr_decay_to from the LR it starts at, OLMo 2's
stage 2 and DeepSeek-V3's cosine; lr_rewarm, a re-warmed LR after a decay).
A phase may scale the schedule (phases[].optimizer.lr_scale, OPT-175B's mid-run LR cuts: Zhang et al. 2022,
arXiv 2205.01068, section 2.5): `planned_lr` is the LR a step of that phase trains at, the one number the
audit's table, its plots, the run report and `runlib diff` draw (runlib.plan.derive.Plan.lr_at), and what
the trainer's ScheduleConfig computes (runlib.train.config.schedule_within scales the same schedule).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Schedule:
    kind: str
    peak_lr: float
    floor_lr: float
    warmup_tokens: float
    decay_start_tokens: float  # where the LR starts to fall below the peak
    decay_end_tokens: float  # where it reaches the floor (may lie beyond the run's end)
    run_tokens: float
    levels: tuple[tuple[float, float], ...] = ()  # multistep: (tokens from which, LR), ascending

    def lr_at(self, tokens: float) -> float:
        if self.warmup_tokens > 0 and tokens < self.warmup_tokens:
            return self.peak_lr * max(tokens, 0.0) / self.warmup_tokens
        if self.kind == "multistep":
            lr = self.peak_lr
            for start, level in self.levels:
                if tokens >= start:
                    lr = level
            return lr
        if self.kind == "constant" or tokens <= self.decay_start_tokens:
            return self.peak_lr
        if self.kind == "inverse_sqrt":
            return max(self.floor_lr, self.peak_lr * math.sqrt(self.decay_start_tokens / tokens))
        if tokens >= self.decay_end_tokens:
            return self.floor_lr
        span = self.decay_end_tokens - self.decay_start_tokens
        if span <= 0:  # a zero-length decay (or one lost in float rounding at huge token counts)
            return self.floor_lr
        progress = (tokens - self.decay_start_tokens) / span
        if self.kind == "cosine":
            return self.floor_lr + (self.peak_lr - self.floor_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))
        return self.peak_lr - (self.peak_lr - self.floor_lr) * progress

    def tokens_at_floor(self) -> float:
        """Tokens of the run trained with the LR at its floor."""
        if self.kind == "constant":
            return 0.0
        if self.kind == "inverse_sqrt":  # peak * sqrt(s / t) meets the floor at t = s (peak / floor)^2
            if self.floor_lr <= 0:
                return 0.0
            return max(0.0, self.run_tokens - self.decay_start_tokens * (self.peak_lr / self.floor_lr) ** 2)
        return max(0.0, self.run_tokens - max(self.decay_end_tokens, self.warmup_tokens))


def build_schedule(
    kind: str,
    peak_lr: float,
    min_lr_ratio: float,
    warmup_tokens: float,
    decay_tokens: float | None,
    run_tokens: float,
    steps: list[tuple[float, float]] | None = None,
    hold_tokens: float = 0.0,
) -> Schedule:
    """decay_tokens: wsd: the final decay's length; cosine/linear: length after warmup (None: to the end);
    steps: multistep: (tokens from which, lr_ratio) in any order; hold_tokens: inverse_sqrt: the peak kept
    after warmup."""
    if kind == "multistep":
        levels = tuple((t, peak_lr * r) for t, r in sorted(steps or []))
        if not levels:
            return Schedule("constant", peak_lr, peak_lr, warmup_tokens, math.inf, math.inf, run_tokens)
        first, last = levels[0][0], levels[-1][0]
        return Schedule(kind, peak_lr, levels[-1][1], warmup_tokens, first, max(last, first + 1e-9), run_tokens, levels)
    if kind == "wsd":
        decay = decay_tokens or 0.0
        # warmup + decay longer than the run (SCHED001): the decay starts when warmup ends
        decay_start, decay_end = max(run_tokens - decay, warmup_tokens), run_tokens
    elif kind == "inverse_sqrt":  # decays without end: the floor (if any) meets it at s (peak / floor)^2
        decay_start, decay_end = warmup_tokens + hold_tokens, math.inf
        return Schedule(kind, peak_lr, peak_lr * min_lr_ratio, warmup_tokens, decay_start, decay_end, run_tokens)
    elif kind in ("cosine", "linear"):
        decay_start = warmup_tokens
        decay_end = warmup_tokens + decay_tokens if decay_tokens is not None else run_tokens
    else:
        decay_start = decay_end = math.inf
    if decay_end <= decay_start:
        decay_end = decay_start + 1e-9  # zero-length decay: a step down to the floor
    return Schedule(kind, peak_lr, peak_lr * min_lr_ratio, warmup_tokens, decay_start, decay_end, run_tokens)


@dataclass(frozen=True, slots=True)
class PhasePath:
    """A phase's own LR path (phases[].optimizer.lr_decay_to, lr_decay_shape, lr_rewarm) over its tokens
    [start_tokens, end_tokens): a linear rise from 0 to start_lr over rewarm_tokens, then a fall from
    start_lr to end_lr (None: the schedule goes on) by `shape`. start_lr is the LR the schedule gives where
    the phase starts, its lr_scale applied."""

    start_tokens: float
    end_tokens: float
    start_lr: float
    end_lr: float | None
    shape: str = "linear"
    rewarm_tokens: float = 0.0

    def lr_at(self, tokens: float) -> float | None:
        """The phase's LR at `tokens`; None where the run's schedule applies (after a rewarm, no decay)."""
        into = tokens - self.start_tokens
        if self.rewarm_tokens > 0 and into < self.rewarm_tokens:
            return self.start_lr * max(into, 0.0) / self.rewarm_tokens
        if self.end_lr is None:
            return None
        span = self.end_tokens - self.start_tokens - self.rewarm_tokens
        progress = min(1.0, max(0.0, (into - self.rewarm_tokens) / span)) if span > 0 else 1.0
        if self.shape == "cosine":
            return self.end_lr + (self.start_lr - self.end_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))
        return self.start_lr + (self.end_lr - self.start_lr) * progress


def phase_lr(schedule: Schedule, tokens: float, lr_scale: float = 1.0, path: PhasePath | None = None) -> float:
    """The LR of a step that ends after `tokens` in a phase: its own path where it has one, else the run's
    schedule times its lr_scale (planned_lr)."""
    own = path.lr_at(tokens) if path is not None else None
    return own if own is not None else planned_lr(schedule, tokens, lr_scale)


def planned_lr(schedule: Schedule, tokens: float, lr_scale: float = 1.0) -> float:
    """The LR of a step that ends after `tokens` in a phase with this lr_scale: the run's schedule times it."""
    return schedule.lr_at(tokens) * lr_scale
