"""audit(spec) -> findings: every check over the spec and its plan; `audit.ignore` applied with its reasons."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from runlib.audit.branches import NOT_FOR_BRANCHES, branch_findings
from runlib.audit.checks import all_checks
from runlib.audit.facts import FileFacts, gather_files
from runlib.audit.registry import SEVERITIES, Context, Finding, ignore_entries, ignoring_entry
from runlib.plan import Plan, derive
from runlib.spec import LoadedSpec, RunSpec, SourceMap


@dataclass(frozen=True)
class Ignored:
    finding: Finding
    reason: str
    entry: str = ""  # the audit.ignore key that silenced it: "CODE" or "CODE@path"


@dataclass(frozen=True)
class AuditResult:
    spec: RunSpec
    plan: Plan
    findings: list[Finding]  # sorted: errors, warnings, infos; each by code
    ignored: list[Ignored]
    file: str = "<spec>"
    ladder_prediction: Mapping[str, object] | None = None  # runlib.graph.measured.ladder_prediction, where built

    def count(self, severity: str) -> int:
        return sum(1 for f in self.findings if f.severity == severity)

    def exit_code(self, strict: bool = False) -> int:
        if self.count("error") or (strict and self.count("warning")):
            return 1
        return 0


def run_checks(
    spec: RunSpec,
    plan: Plan,
    source_map: SourceMap | None = None,
    select: set[str] | None = None,
    measured_tokens: dict[str, int] | None = None,
    files: FileFacts | None = None,
) -> list[Finding]:
    """Every check (or those in `select`) over the spec and its plan; then, where the last phase has branches,
    each branch as the run it will be (runlib.audit.branches); the AUDIT checks last, reading all of these.
    `files`: what this machine holds of the spec's files (gathered here when not given)."""
    files = gather_files(spec) if files is None else files
    findings: list[Finding] = []
    ctx = Context(spec, plan, files, source_map, prior=findings)  # one context, re-labelled per check (cheap)
    branched = bool(spec.phases and spec.phases[-1].branches)
    for check in all_checks():
        if select is not None and check.code not in select:
            continue
        if branched and check.code.startswith("AUDIT"):  # all_checks puts them last: they see the branches'
            findings.extend(_branch_findings(spec, findings, source_map, select, measured_tokens, files))
            branched = False
        ctx.code, ctx.severity = check.code, check.severity
        new = list(check.run(ctx))  # drained before it joins ctx.prior: a check sees the earlier ones only
        findings.extend(new)
    if branched:  # no AUDIT check selected
        findings.extend(_branch_findings(spec, findings, source_map, select, measured_tokens, files))
    return findings


def _branch_findings(
    spec: RunSpec,
    base: list[Finding],
    source_map: SourceMap | None,
    select: set[str] | None,
    measured_tokens: dict[str, int] | None,
    files: FileFacts,
) -> list[Finding]:
    # a branch's run gets every check but the AUDIT ones (its audit.ignore is the spec's, checked once) and
    # those about the phases against the run's tokens, which a branch departs from by design
    codes = {c.code for c in all_checks() if not c.code.startswith("AUDIT")} - NOT_FOR_BRANCHES
    codes = codes if select is None else codes & select

    def audit_run(run: RunSpec) -> list[Finding]:
        return run_checks(run, derive(run, measured_tokens), None, codes, files=files)

    return branch_findings(spec, base, audit_run, source_map)


def audit(
    spec: RunSpec,
    source_map: SourceMap | None = None,
    file: str = "<spec>",
    select: set[str] | None = None,
    measured_tokens: dict[str, int] | None = None,
    ladder_prediction: Mapping[str, object] | None = None,
) -> AuditResult:
    plan = derive(spec, measured_tokens)
    raw = run_checks(spec, plan, source_map, select, measured_tokens)
    entries = ignore_entries(spec.audit.ignore)
    kept: list[Finding] = []
    ignored: list[Ignored] = []
    for f in raw:
        entry = ignoring_entry(entries, f) if entries else None
        if entry is None:
            kept.append(f)
        else:
            ignored.append(Ignored(f, entry.reason, entry.key))
    order = {s: i for i, s in enumerate(SEVERITIES)}
    kept.sort(key=lambda f: (order[f.severity], f.code, f.path))
    return AuditResult(spec, plan, kept, ignored, file, ladder_prediction)


def audit_loaded(
    loaded: LoadedSpec,
    measured_tokens: dict[str, int] | None = None,
    ladder_prediction: Mapping[str, object] | None = None,
) -> AuditResult:
    """Audit a loaded spec; `measured_tokens` and `ladder_prediction` are what its built artifacts measured
    (runlib.graph.measured.audit_measured gathers them, as `runlib audit` does)."""
    return audit(
        loaded.spec,
        loaded.source_map,
        loaded.source_map.file,
        measured_tokens=measured_tokens,
        ladder_prediction=ladder_prediction,
    )
