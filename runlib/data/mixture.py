"""A phase's mixture in closed form: how many sequences each source gives at each step (no torch).

Of a step's B sequences, source s takes cum_s(n + 1) - cum_s(n), with cum_s(n) = floor(n * B * w_s) for every
source but the one of largest weight, which takes the rest (see runlib.data.loader's docstring). Pure integer
arithmetic on exact Fractions, importable by `runlib plan` without torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from runlib.errors import UserError

if TYPE_CHECKING:  # a plan is read here, never built
    from runlib.plan.derive import Plan


@dataclass(frozen=True)
class Segment:
    """Steps [start, start + steps) of a phase at B sequences per step (steps None: open-ended)."""

    start: int
    steps: int | None
    batch: int


class MixtureError(UserError, ValueError):
    """A mixture or batch the audit reports as an error (MIX001, BATCH003): `runlib plan` and the stages
    refuse it with this message instead of a traceback; `runlib audit` gives the fix."""


class Mixture:
    """Closed-form per-source sequence counts of a phase (see the module docstring)."""

    def __init__(self, weights: Mapping[str, float], segments: list[Segment]):
        fractions = {}
        for name, w in weights.items():
            if not math.isfinite(w) or w < 0:
                raise MixtureError(f"mixture weight of {name!r} is {w}: weights must be finite and >= 0")
            if w > 0:
                fractions[name] = Fraction(repr(float(w)))
        if not fractions:
            raise MixtureError("the mixture has no source with a positive weight")
        total = sum(fractions.values())
        self.names: list[str] = sorted(fractions)
        self.weights: list[Fraction] = [fractions[n] / total for n in self.names]
        top = max(self.weights)
        self.largest = self.weights.index(top)  # ties: the first by name
        if not segments:
            raise MixtureError("a mixture needs at least one segment")
        self.segments = segments

    def batch_size(self, step: int) -> int:
        return self._segment(step).batch

    def _segment(self, step: int) -> Segment:
        for seg in self.segments:
            if seg.steps is None or step < seg.start + seg.steps:
                return seg
        return self.segments[-1]

    def _cum_in(self, n: int, batch: int) -> list[int]:
        out = [0] * len(self.names)
        for i, w in enumerate(self.weights):
            if i != self.largest:
                out[i] = (n * batch * w.numerator) // w.denominator
        out[self.largest] = n * batch - sum(out)
        return out

    def cum(self, steps: int) -> list[int]:
        """Sequences of each source (in `names` order) in the phase's first `steps` steps."""
        if steps < 0:
            raise MixtureError(f"steps must be >= 0, got {steps}")
        total = [0] * len(self.names)
        for j, seg in enumerate(self.segments):
            if steps <= seg.start:
                break
            last = j == len(self.segments) - 1  # the last segment runs on past the phase (skipped data steps)
            m = steps - seg.start if last or seg.steps is None else min(steps - seg.start, seg.steps)
            total = [a + b for a, b in zip(total, self._cum_in(m, seg.batch), strict=True)]
        return total

    def counts(self, step: int) -> list[int]:
        """Sequences of each source in step `step` (0-based, in the phase)."""
        counts = [b - a for a, b in zip(self.cum(step), self.cum(step + 1), strict=True)]
        if min(counts) < 0:
            raise MixtureError(self._too_small(self.batch_size(step)))
        return counts

    def _too_small(self, batch: int) -> str:
        mix = ", ".join(f"{n} {float(w):.4g}" for n, w in zip(self.names, self.weights, strict=True))
        return (
            f"a global batch of {batch} sequences is too small for the mixture ({mix}): some step would give "
            f"{self.names[self.largest]} a negative count; raise the batch or merge the small sources"
        )

    def check(self) -> None:
        """Raise ValueError if any step of a finite segment would give a source a negative count."""
        for seg in self.segments:
            others = [i for i in range(len(self.names)) if i != self.largest]
            if seg.batch >= sum(math.ceil(seg.batch * self.weights[i]) for i in others):
                continue  # each other source takes at most ceil(B * w) a step: never negative
            # exact scan: the per-step pattern repeats with the lcm of the denominators of B * w
            period = math.lcm(*[(seg.batch * self.weights[i]).denominator for i in others])
            limit = period if seg.steps is None else min(period, seg.steps)
            prev = self._cum_in(0, seg.batch)
            for n in range(1, limit + 1):
                cur = self._cum_in(n, seg.batch)
                if cur[self.largest] < prev[self.largest]:
                    raise MixtureError(self._too_small(seg.batch))
                prev = cur


def phase_mixture(plan: Plan, phase_index: int) -> Mixture:
    """The Mixture of plan.phases[phase_index]: its weights, and B per timeline segment."""
    phase = plan.phases[phase_index]
    seq_len = phase.settings.seq_len
    segments = []
    for seg in phase.span.segments:
        batch, rest = divmod(seg.tokens_per_step, seq_len)
        if rest or batch < 1:
            raise MixtureError(
                f"phase {phase.name}: {seg.tokens_per_step} tokens per step is not a whole number of "
                f"{seq_len}-token sequences"
            )
        segments.append(Segment(seg.start_step - phase.span.start_step, seg.steps, batch))
    try:
        return Mixture(phase.settings.phase.mixture, segments)
    except MixtureError as exc:
        raise MixtureError(f"phase {phase.name}: {exc} (`runlib audit` gives the fix)") from None


def stream_starts(plan: Plan, phase_index: int, packing: str) -> dict[str, int]:
    """Where each source's stream stands when phase `phase_index` starts: tokens consumed by the earlier
    phases (documents with packing `none`): sum over phases j < i of cum_s(steps_j) * seq_len_j."""
    starts: dict[str, int] = {}
    for j in range(phase_index):
        mixture = phase_mixture(plan, j)
        unit = 1 if packing == "none" else plan.phases[j].settings.seq_len
        for name, count in zip(mixture.names, mixture.cum(plan.phases[j].steps), strict=True):
            starts[name] = starts.get(name, 0) + count * unit
    return starts
