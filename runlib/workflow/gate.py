"""The Snakefile's gate: a spec becomes a DAG only when it loads, its audit has no error, nothing in it is
beyond what this machine enacts, and its stage graph can be built here. Otherwise no job starts, and every
reason is printed at its line with its fix."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from runlib.audit import AuditResult
from runlib.audit.registry import Finding
from runlib.audit.render.text import render
from runlib.errors import SpecError, UserError
from runlib.eval.harness.gate import harness_refusals
from runlib.graph.build import StageGraph, build_graph
from runlib.graph.measured import audit_measured
from runlib.spec import LoadedSpec, RunSpec, load_spec


class GateRefused(Exception):
    """The spec does not load or its audit has errors: the DAG is not built."""


@dataclass(frozen=True)
class Opened:
    """What passed the gate: the spec and its stage graph."""

    spec: RunSpec
    graph: StageGraph


def _print_findings(result: AuditResult, findings: list[Finding]) -> None:
    for f in findings:
        where = f"{result.file}:{f.line}: " if f.line else f"{result.file}: "
        print(f"{where}{f.code} {f.path}: {f.message}\n    fix: {f.fix}", file=sys.stderr)


def _audited(spec_path: str) -> tuple[LoadedSpec, AuditResult]:
    try:
        loaded = load_spec(spec_path)
        return loaded, audit_measured(loaded)
    except SpecError as exc:
        print(str(exc), file=sys.stderr)
        raise GateRefused(f"{spec_path} does not load (see above); fix it before running the workflow") from None
    except UserError as exc:  # e.g. a tokenize manifest the audit reads measured counts from does not verify
        raise GateRefused(str(exc)) from None


def _refuse_audit_errors(spec_path: str, result: AuditResult) -> None:
    if result.count("error"):
        sys.stderr.write(render(result))
        raise GateRefused(
            f"{spec_path}: the audit found {result.count('error')} error(s) (listed above); "
            "no job was started. Fix the spec, or silence a finding in audit.ignore with a reason."
        )
    # RUN findings (runlib.plan.enact): values the trainer cannot enact; audit.ignore does not lift them
    refused = [f for f in result.findings + [i.finding for i in result.ignored] if f.code.startswith("RUN")]
    if refused:
        _print_findings(result, refused)
        raise GateRefused(
            f"{spec_path}: {len(refused)} value(s) this machine cannot run (a layout, an input format or a "
            "file the spec names; listed above); no job was started. "
            "Change them as each fix says."
        )


def _refuse_harness(spec_path: str, loaded: LoadedSpec) -> None:
    """lm-eval tasks (runlib.eval.harness.gate): what this machine cannot run (not installed, a task file
    missing, a download while offline), before any job."""
    harness = harness_refusals(loaded.spec.eval.tasks, loaded.spec.model)
    if harness:
        for r in harness:
            pos = loaded.source_map.position(r.field)
            where = f"{spec_path}:{pos[0]}: " if pos else f"{spec_path}: "
            print(f"{where}{r.field}: {r.problem}\n    fix: {r.fix}", file=sys.stderr)
        raise GateRefused(
            f"{spec_path}: {len(harness)} lm-eval task setting(s) cannot run on this machine (listed above); "
            "no job was started."
        )


def open_gate(spec_path: str) -> Opened:
    """The spec at spec_path and its graph, or GateRefused with the reason (its details printed above it)."""
    if not Path(spec_path).exists():
        raise GateRefused(f"--config spec={spec_path}: file not found")
    loaded, result = _audited(spec_path)
    _refuse_audit_errors(spec_path, result)
    _refuse_harness(spec_path, loaded)
    try:
        return Opened(loaded.spec, build_graph(loaded.spec))
    except UserError as exc:
        # a source's files are missing (the audit warns: SRC001): show those findings at their lines too
        _print_findings(
            result, [f for f in result.findings + [i.finding for i in result.ignored] if f.code == "SRC001"]
        )
        _print_at_line(spec_path, loaded, str(exc))
        raise GateRefused(str(exc)) from None


_FIELD_FIRST = re.compile(r"^([A-Za-z_][\w.\[\]-]*): ")


def _print_at_line(spec_path: str, loaded: LoadedSpec, message: str) -> None:
    """A message that starts with a spec field (a file the field names is missing, say) printed at the
    field's line, as the audit's findings are."""
    match = _FIELD_FIRST.match(message)
    position = loaded.source_map.position(match.group(1)) if match else None
    if position:
        print(f"{spec_path}:{position[0]}: {message}", file=sys.stderr)
