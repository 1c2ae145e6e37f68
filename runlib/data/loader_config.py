"""What a phase's data order reads: a pure description, so the order is a function of this config and step.

Built from the spec and its plan (`build_loader_config`); `runlib.data.loader.PhaseLoader` reads only this
(and the token shards), so a training key that hashes it covers every input of the data order: the batch
per timeline segment (a batch ramp included), where each source's stream stands when the phase starts, the
mixture, packing, boundary targets and fill-in-the-middle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, model_serializer

from runlib.data.mixture import phase_mixture, stream_starts
from runlib.util.keyed import omit_new_fields_at_default

if TYPE_CHECKING:  # the plan and the spec are read, not built, here
    from runlib.plan.derive import Plan
    from runlib.spec.models import RunSpec


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class SegmentConfig(_Frozen):
    start_step: int
    """First data step of the segment, counted from the phase's start."""
    steps: int | None
    """Steps in the segment (None: open-ended, the last segment)."""
    batch_sequences: int
    """Global batch of the segment, in sequences."""


class FimConfig(_Frozen):
    rate: float
    """Fraction of documents turned into fill-in-the-middle examples."""
    spm_rate: float
    """Of those, the fraction laid out suffix-prefix-middle."""


class LoaderConfig(_Frozen):
    seed: int
    """Seed of data order (spec.seed)."""
    phase_seed: int | None = None
    """The phase's own data-order seed (phases[].seed, a branch's seed) when it differs from `seed`: the batch
    shuffle and each source's epochs that begin in this phase use it. Left out of the key while None."""
    phase_index: int
    """Index of the phase in the run (enters the batch shuffle's seed)."""
    seq_len: int
    """Context length of the phase."""
    packing: Literal["document", "stream", "none"]
    """data.packing."""
    boundary_targets: Literal["masked", "kept"]
    """data.boundary_targets."""
    mixture: dict[str, float]
    """Source -> weight in this phase."""
    segments: list[SegmentConfig]
    """The phase's global batch per timeline segment (more than one with a batch ramp)."""
    stream_starts: dict[str, int]
    """Tokens (documents with packing none) of each source consumed by the earlier phases."""
    stream_ends: dict[str, int]
    """The same after this phase: where the next phase starts."""
    fim: dict[str, FimConfig]
    """Fill-in-the-middle per source of this phase's mixture (sources without FIM are absent)."""

    @model_serializer(mode="wrap")
    def _omit_phase_seed_unset(self, handler: Any) -> Any:
        return omit_new_fields_at_default(self, frozenset({"phase_seed"}), handler(self))


def build_loader_config(spec: RunSpec, plan: Plan, phase_index: int) -> LoaderConfig:
    """The data-order config of plan.phases[phase_index] (pure: spec and plan in, config out)."""
    phase = plan.phases[phase_index]
    mixture = phase_mixture(plan, phase_index)
    packing = spec.data.packing
    fim = {}
    for name in mixture.names:
        source = spec.data.sources.get(name)
        if source is not None and source.fim is not None and source.fim.rate > 0:
            fim[name] = FimConfig(rate=source.fim.rate, spm_rate=source.fim.spm_rate)
    own_seed = phase.settings.phase.seed
    return LoaderConfig(
        seed=int(spec.seed),
        phase_seed=None if own_seed is None or own_seed == spec.seed else int(own_seed),
        phase_index=phase_index,
        seq_len=int(phase.settings.seq_len),
        packing=packing,
        boundary_targets=spec.data.boundary_targets,
        mixture={k: float(v) for k, v in phase.settings.phase.mixture.items()},
        segments=[SegmentConfig(start_step=s.start, steps=s.steps, batch_sequences=s.batch) for s in mixture.segments],
        stream_starts=stream_starts(plan, phase_index, packing),
        stream_ends=stream_starts(plan, phase_index + 1, packing),
        fim=fim,
    )
