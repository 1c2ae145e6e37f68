"""A branch of the last phase as the run it will be (PhaseSpec.branches); pure, no I/O.

A branch (runlib.spec.models.PhaseBranch) is trained from the checkpoint at the end of the phase before
it, as WSD anneals branched from one stable checkpoint (Hu et al. 2024, MiniCPM, arXiv 2404.06395,
section 4). Its run is the spec with the last phase's mixture, tokens and seq_len and the schedule's decay
replaced by the branch's: runlib.graph.configs.branch_specs builds the branch's stages from it, and
the audit checks it (runlib.audit.branches).
"""

from __future__ import annotations

from runlib.spec.models import PhaseBranch, RunSpec

PHASE_FIELDS = ("mixture", "tokens", "seq_len", "seed")  # the branch's fields that replace the phase's
SCHEDULE_FIELDS = ("decay",)  # the branch's fields that replace the schedule's


def without_branches(spec: RunSpec) -> RunSpec:
    """The spec with no phase's `branches`: the run its prefix and base phase belong to (its stage keys are
    those of the same spec written without branches)."""
    if not any(p.branches for p in spec.phases):
        return spec
    phases = [p.model_copy(update={"branches": None, "soup": None}) for p in spec.phases]
    return spec.model_copy(update={"phases": phases})


def branch_fields(branch: PhaseBranch) -> list[str]:
    """The fields the branch sets, in PhaseBranch order ('mixture', 'tokens', 'seq_len', 'seed', 'decay')."""
    return [name for name in (*PHASE_FIELDS, *SCHEDULE_FIELDS) if getattr(branch, name) is not None]


def branch_run(spec: RunSpec, branch: PhaseBranch) -> RunSpec:
    """The run of one branch of the last phase: the spec without branches, its last phase's mixture, tokens,
    seq_len and seed and the schedule's decay replaced where the branch sets them (the caller checks that the
    branch is one of the last phase's)."""
    base = without_branches(spec)
    last = len(base.phases) - 1
    update = {name: getattr(branch, name) for name in PHASE_FIELDS if getattr(branch, name) is not None}
    phases = [*base.phases[:last], base.phases[last].model_copy(update=update)]
    schedule = spec.schedule if branch.decay is None else spec.schedule.model_copy(update={"decay": branch.decay})
    return base.model_copy(update={"phases": phases, "schedule": schedule})
