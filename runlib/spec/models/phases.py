"""The phases of a run and the branches of its last phase."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from runlib.spec.models.base import (
    MAX_NAME_CHARS,
    MAX_ROPE_THETA,
    MAX_SEQ_LEN,
    NAME_PATTERN,
    PLANNING_ONLY,
    SEED_LIMIT,
    KeyedWhenSet,
    SpecModel,
    Weight,
)
from runlib.spec.models.machine import HardwareOverride
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
    seed: int | None = Field(None, ge=0, lt=SEED_LIMIT)
    """Data-order seed of this branch (default: the phase's seed): the same data drawn in another order, as OLMo 2's anneals were (seeds 1110 and 2662 before their soup: allenai/OLMo-core src/scripts/official/OLMo2/README.md)."""


class SoupSpec(SpecModel):
    """The average of the weights of several branches of the last phase ("model soup": Wortsman et al.
    2022, arXiv 2203.05482, section 2, the uniform soup), built as a stage of its own and evaluated like a
    phase: OLMo 2 souped the anneals it branched from one stage-1 checkpoint (arXiv 2501.00656, mid-training)."""

    name: str = Field("soup", pattern=NAME_PATTERN, max_length=MAX_NAME_CHARS)
    """Name of the souped model; its stages are named '<phase>@<name>' (soup_phase anneal@soup)."""
    ingredients: list[str] | None = Field(None, min_length=2, max_length=MAX_BRANCHES + 1)
    """The models averaged, with equal weights: the phase's name (the phase as written) and its branches' names (default: the phase and every branch)."""


class RopeScalingSpec(SpecModel):
    """RoPE frequencies rescaled for a longer context than the model trained at (beyond a base change)."""

    kind: Literal["llama3", "yarn"]
    """llama3: Llama 3.1's frequency scaling (meta-llama/llama-models, models/llama3/reference_impl/model.py apply_scaling): wavelengths above original_seq_len / low_freq_factor divided by factor, below original_seq_len / high_freq_factor kept, smoothly between; yarn: YaRN (Peng et al. 2023, arXiv 2309.00071 section 3.2-3.4): dimensions that turn fewer than beta_slow times over original_seq_len interpolated by factor, more than beta_fast times kept, a linear ramp between, and cos and sin times 0.1 ln(factor) + 1."""

    factor: float = Field(gt=1, le=1024)
    """How many times the original context the phase reaches (Llama 3.1: 8; DeepSeek-V3's YaRN: 40)."""

    original_seq_len: int = Field(ge=2, le=MAX_SEQ_LEN)
    """The context the frequencies were trained at (Llama 3.1: 8192)."""

    low_freq_factor: float = Field(1.0, gt=0, le=1024)
    """llama3: wavelengths above original_seq_len / low_freq_factor are scaled fully (Llama 3.1: 1)."""

    high_freq_factor: float = Field(4.0, gt=0, le=1024)
    """llama3: wavelengths below original_seq_len / high_freq_factor are kept (Llama 3.1: 4)."""

    beta_fast: float = Field(32.0, gt=0, le=1e6)
    """yarn: dimensions turning more than beta_fast times over the original context are kept (the paper's 32)."""

    beta_slow: float = Field(1.0, gt=0, le=1e6)
    """yarn: dimensions turning fewer than beta_slow times are interpolated (the paper's 1)."""

    @model_validator(mode="after")
    def _fields_of_its_kind(self) -> RopeScalingSpec:
        other = {"llama3": ("beta_fast", "beta_slow"), "yarn": ("low_freq_factor", "high_freq_factor")}[self.kind]
        given = [name for name in other if name in self.model_fields_set]
        if given:
            raise ValueError(
                f"{', '.join(given)} with kind {self.kind}: {'YaRN' if self.kind == 'llama3' else 'Llama 3.1'}'s "
                f"fields, which {self.kind} does not read; remove them, or use the kind they belong to"
            )
        return self

    @field_validator("high_freq_factor")
    @classmethod
    def _high_above_low(cls, high: float, info: ValidationInfo) -> float:
        low = info.data.get("low_freq_factor")
        if low is not None and high <= low:
            raise ValueError(f"high_freq_factor {high} must be above low_freq_factor {low} (Llama 3.1: 4 and 1)")
        return high


class PhaseSpec(KeyedWhenSet):
    KEYED_WHEN_SET: ClassVar[frozenset[str]] = frozenset(
        {"optimizer", "branches", "rope_scaling", "seed", "soup", "hardware"}
    )

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
    rope_scaling: RopeScalingSpec | None = None
    """RoPE frequencies rescaled in this phase (Llama 3.1's or YaRN), on top of its rope_theta; applies to this phase only."""
    hardware: HardwareOverride | None = None
    """The machines of this phase only (nodes, devices_per_node; the run's accelerator)."""
    parallelism: ParallelismOverride | None = None
    """Parallelism overrides for this phase only."""
    batch: BatchOverride | None = None
    """Batch overrides for this phase (the batch ramp does not apply to a phase with a batch override)."""
    optimizer: PhaseOptimizer | None = None
    """Optimizer changes for this phase only (a mid-run LR or clip change)."""
    seed: int | None = Field(None, ge=0, lt=SEED_LIMIT)
    """Data-order seed of this phase (default: the run's seed): its batches, each source's documents that no earlier phase has read in the epoch in progress, and the epochs that begin in it are ordered by this seed; the documents already read keep their places, so none repeats or is skipped."""
    branches: list[PhaseBranch] | None = Field(None, max_length=MAX_BRANCHES)
    """Variants of this phase (the last phase only), each trained from the previous phase's checkpoint as a stage and an evaluation of its own, beside the phase itself; the earlier phases are trained once. A branch overrides mixture, tokens, decay, seq_len and seed."""
    soup: SoupSpec | None = None
    """The average of the weights of this phase and its branches (the last phase only; needs branches), a stage and an evaluation of its own."""

    @field_validator("branches")
    @classmethod
    def _branch_names_unique(cls, branches: list[PhaseBranch] | None) -> list[PhaseBranch] | None:
        names = [b.name for b in branches or []]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"branch names must differ: {', '.join(twice)} given twice; rename one")
        return branches

    @model_validator(mode="after")
    def _soup_of_its_branches(self) -> PhaseSpec:
        if self.soup is None:
            return self
        if not self.branches:
            raise ValueError("soup needs branches to average: add phases[].branches, or remove soup")
        names = [self.name] + [b.name for b in self.branches]
        if self.soup.name in names:
            raise ValueError(f"soup name {self.soup.name!r} is the phase's or a branch's; give the soup another name")
        ingredients = self.soup.ingredients or names
        unknown = [n for n in ingredients if n not in names]
        if unknown:
            raise ValueError(
                f"soup.ingredients: {', '.join(unknown)} is neither the phase nor one of its branches; "
                f"the ingredients are among {', '.join(names)}"
            )
        if len(set(ingredients)) != len(ingredients):
            raise ValueError("soup.ingredients: each model once (a soup's weights are equal); remove the repeat")
        return self  # one context length over the ingredients: runlib.graph.nodes (it needs model.seq_len)
