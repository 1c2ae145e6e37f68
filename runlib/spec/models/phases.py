"""The phases of a run and the branches of its last phase."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, field_validator

from runlib.spec.models.base import (
    MAX_NAME_CHARS,
    MAX_ROPE_THETA,
    MAX_SEQ_LEN,
    NAME_PATTERN,
    PLANNING_ONLY,
    KeyedWhenSet,
    SpecModel,
    Weight,
)
from runlib.spec.models.training import BatchOverride, ParallelismOverride, PhaseOptimizer
from runlib.spec.units import DurationField

MAX_BRANCHES = 16  # variants of one phase; each is a training stage and an evaluation of its own


class PhaseBranch(SpecModel):
    """A variant of the last phase, trained from the same checkpoint as the phase itself (the end of the
    phase before it): WSD anneals branched from one stable checkpoint (Hu et al. 2024, MiniCPM, arXiv
    2404.06395, section 4). It overrides only `mixture`, `tokens`, `decay` and `seq_len`; every other
    setting is the phase's."""

    name: str = Field(pattern=NAME_PATTERN, max_length=MAX_NAME_CHARS)
    """Branch name; its stages are named '<phase>@<branch>' (train_phase anneal@code-heavy)."""
    mixture: dict[str, Weight] | None = None
    """Source name -> sampling weight in this branch (default: the phase's mixture)."""
    tokens: DurationField | None = None
    """Training tokens of this branch (default: the phase's); a % is of the run's `tokens`, as for phases."""
    decay: DurationField | None = None
    """schedule.decay in this branch: the LR decay that ends at the branch's end (default: schedule.decay as given); it must not reach back into an earlier phase."""
    seq_len: int | None = Field(None, ge=1, le=MAX_SEQ_LEN)
    """Context length in this branch (default: the phase's seq_len)."""


class PhaseSpec(KeyedWhenSet):
    KEYED_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"optimizer", "branches"})

    name: str = Field(pattern=NAME_PATTERN, max_length=MAX_NAME_CHARS)
    """Phase name; names its training stage and checkpoints."""
    kind: Literal["foundation", "enrichment", "long_context", "anneal"] = Field(json_schema_extra=PLANNING_ONLY)
    """What the phase is for; the audit checks that the anneal phase carries the schedule's decay (planning only: read by the audit, not by any stage)."""
    tokens: DurationField
    """Training tokens of the phase: '<count> tokens', '<count> steps' or '<p>%' of the run."""
    mixture: dict[str, Weight]
    """Source name -> sampling weight (weights sum to 1)."""
    seq_len: int | None = Field(None, ge=1, le=MAX_SEQ_LEN)
    """Context length in this phase (default: model.seq_len); applies to this phase only."""
    rope_theta: float | None = Field(None, gt=0, le=MAX_ROPE_THETA)
    """RoPE base in this phase (default: model.rope_theta); applies to this phase only."""
    parallelism: ParallelismOverride | None = None
    """Parallelism overrides for this phase only."""
    batch: BatchOverride | None = None
    """Batch overrides for this phase (the batch ramp does not apply to a phase with a batch override)."""
    optimizer: PhaseOptimizer | None = None
    """Optimizer changes for this phase only (a mid-run LR or clip change)."""
    branches: list[PhaseBranch] | None = Field(None, max_length=MAX_BRANCHES)
    """Variants of this phase (the last phase only), each trained from the previous phase's checkpoint as a stage and an evaluation of its own, beside the phase itself; the earlier phases are trained once. A branch overrides mixture, tokens, decay and seq_len."""

    @field_validator("branches")
    @classmethod
    def _branch_names_unique(cls, branches: list[PhaseBranch] | None) -> list[PhaseBranch] | None:
        names = [b.name for b in branches or []]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"branch names must differ: {', '.join(twice)} given twice; rename one")
        return branches
