"""The branches of the last phase, each audited as the run it will be (PhaseSpec.branches).

A branch trains from the checkpoint at the end of the phase before it, as WSD anneals branched from one
stable checkpoint (Hu et al. 2024, MiniCPM, arXiv 2404.06395, section 4): its run is the spec with the
last phase's mixture, tokens and seq_len and the schedule's decay replaced by the branch's
(runlib.spec.branches.branch_run, the run runlib.graph.configs.branch_specs builds its stages from).
Every check runs over that run; what the base spec's audit does not already report is reported at the
branch:

  - a finding at a field the branch sets, at the branch's field (phases[3].mixture.web ->
    phases[3].branches[1].mixture.web; schedule.decay -> phases[3].branches[1].decay);
  - a finding elsewhere in the branch's run (the budget, a source's epochs, the phase's rope_theta), at the
    field the branch sets when it sets one, else at the branch, its message naming the path in the run.

A finding the base run has at the same path is the base run's, reported once, there. Specs without
branches never reach this module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from runlib.audit.registry import Finding
from runlib.spec import RunSpec, SourceMap
from runlib.spec.branches import SCHEDULE_FIELDS, branch_fields, branch_run
from runlib.spec.models import PhaseBranch

# Checks a branch's run does not get: both hold the phases against the run's `tokens`, and a branch's
# length is by design its own, beside the base run's phases (PhaseBranch.tokens; MiniCPM section 4 compares
# decays of different lengths from one checkpoint). A branch's length is bounded instead by the checks of
# its decay, its budget and its data (SCHED005, SCHED006, BUDGET001, MIX003).
NOT_FOR_BRANCHES = frozenset(
    {
        "PHASE001",  # the phases add up to `tokens`: a branch's run is the prefix plus the branch, however long
        "PHASE002",  # each phase kind's share of the run: the prefix's shares are the base run's, audited there
    }
)
WHAT_A_BRANCH_SETS = (
    "a branch sets only mixture, tokens, decay and seq_len; the rest is the phase's, for all its branches"
)


def under(path: str, prefix: str) -> bool:
    """`path` is `prefix` or a path inside it ('phases[3].mixture.web' is under 'phases[3].mixture')."""
    return path == prefix or (path.startswith(prefix) and path[len(prefix)] in ".[")


def branch_path(last: int, index: int) -> str:
    return f"phases[{last}].branches[{index}]"


def field_paths(last: int, index: int, fields: list[str]) -> dict[str, str]:
    """Each field the branch sets: its path in the branch's run -> its path at the branch
    ({'phases[3].mixture': 'phases[3].branches[1].mixture', 'schedule.decay': 'phases[3].branches[1].decay'})."""
    at = branch_path(last, index)
    return {
        (f"schedule.{name}" if name in SCHEDULE_FIELDS else f"phases[{last}].{name}"): f"{at}.{name}" for name in fields
    }


def own_path(path: str, last: int, index: int, fields: list[str]) -> str | None:
    """The path at the branch of a finding at a field the branch sets ('phases[3].mixture.web' ->
    'phases[3].branches[1].mixture.web'); None for a path the branch does not set."""
    for source, target in field_paths(last, index, fields).items():
        if under(path, source):
            return target + path[len(source) :]
    return None


def at_branch(finding: Finding, branch: PhaseBranch, last: int, index: int, source_map: SourceMap | None) -> Finding:
    """A finding of the branch's run, moved to the branch: its path, line, and a message that names it."""
    fields = branch_fields(branch)
    path = own_path(finding.path, last, index, fields)
    if path is not None:
        message, fix, value = f"branch {branch.name!r}: {finding.message}", finding.fix, finding.value
        for source, target in field_paths(last, index, fields).items():  # "set schedule.decay to ..."
            fix = fix.replace(source, target)
    else:
        path = f"{branch_path(last, index)}.{fields[0]}" if len(fields) == 1 else branch_path(last, index)
        message = f"branch {branch.name!r} as its own run, at {finding.path}: {finding.message}"
        fix, value = f"{finding.fix} ({WHAT_A_BRANCH_SETS})", None  # the value is for a path the branch lacks
    pos = source_map.position(path) if source_map is not None else None
    line, col = pos if pos else (None, None)
    return replace(finding, path=path, message=message, fix=fix, value=value, line=line, col=col)


def branch_findings(
    spec: RunSpec,
    base: list[Finding],
    audit_run: Callable[[RunSpec], list[Finding]],
    source_map: SourceMap | None = None,
) -> list[Finding]:
    """The findings of each branch's run (`audit_run`: its plan and the checks over it) that the base run's
    findings `base` do not hold, at the branch; [] for a spec whose last phase has no branches (branches of
    an earlier phase are refused by runlib.graph.configs.branch_specs and not audited)."""
    if not spec.phases or not spec.phases[-1].branches:
        return []
    last = len(spec.phases) - 1
    seen = {(f.code, f.path) for f in base}
    out: list[Finding] = []
    for index, branch in enumerate(spec.phases[-1].branches):
        fields = branch_fields(branch)
        for f in audit_run(branch_run(spec, branch)):
            if f.code in NOT_FOR_BRANCHES:
                continue
            if own_path(f.path, last, index, fields) is None and (f.code, f.path) in seen:
                continue  # the base run's own finding
            out.append(at_branch(f, branch, last, index, source_map))
    return out
