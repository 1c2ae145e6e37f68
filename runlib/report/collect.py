"""What a run of a spec produced, read from its artifacts: the run report's input (runlib.report.run_report).

`collect_run(spec_path)` loads the spec, audits it as `runlib audit` does, builds its stage graph and reads
whatever is built: every manifest (wall times, keys, counts), each train_phase's metrics.jsonl and
spikes.json, each eval_phase's eval.json, and the same for the branches of the last phase. A partial run is
collected too: a stage not built yet has no manifest.

Step and token counts in train_phase artifacts are the run's (cumulative across phases), so all phases
share one x axis: tokens seen since the start of the run.

What an artifact holds is JSON read from disk, typed JsonObject (values unchecked); the readers below
(is_number, number, json_object) check each value where it is used, so a malformed artifact shows as "n/a"
in the report rather than failing it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeGuard

from runlib.audit import AuditResult
from runlib.errors import UserError
from runlib.graph.build import StageGraph, build_graph
from runlib.graph.configs import branch_specs
from runlib.graph.measured import audit_spec_file
from runlib.graph.registry import STAGES
from runlib.plan import Plan, derive
from runlib.plan.derive import PhasePlan
from runlib.spec.branches import without_branches
from runlib.spec.models import RunSpec
from runlib.store.manifest import Manifest, find_manifest
from runlib.store.node import StageNode
from runlib.util.jsonl import read_jsonl

__all__ = [
    "BranchRun",
    "JsonObject",
    "PhaseRun",
    "RunData",
    "StageState",
    "collect_run",
    "is_number",
    "json_object",
    "number",
    "read_json",
    "read_metrics",
]

JsonObject = dict[str, object]  # a JSON object as an artifact holds it: each value checked where it is read


def is_number(x: object) -> TypeGuard[float]:
    """A finite int or float (not a bool)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def number(x: object) -> float | None:
    """x as a float when it is_number, else None."""
    return float(x) if is_number(x) else None


def json_object(x: object) -> JsonObject:
    """x when it is a JSON object (a dict), else {}: `json_object(data.get("heldout")).get(source)` reads a
    nested key of any JSON, whatever is missing."""
    return x if isinstance(x, dict) else {}


def read_json(path: Path) -> JsonObject | None:
    """The JSON object in the file, or None (missing, unreadable, not an object)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_metrics(path: Path) -> list[JsonObject]:
    """The records of a metrics.jsonl; lines that are not a JSON object with a step are skipped."""
    return [record for record in read_jsonl(path) if is_number(record.get("step"))]


@dataclass(frozen=True)
class StageState:
    """One stage instance of the spec's graph and its manifest (None: not built, or unreadable)."""

    node: StageNode
    manifest: Manifest | None
    problem: str | None = None  # why a manifest that exists could not be read

    @property
    def built(self) -> bool:
        return self.manifest is not None

    @property
    def wall_seconds(self) -> float | None:
        return number(self.manifest.timings.wall_seconds) if self.manifest is not None else None

    @property
    def status(self) -> str:
        if self.problem:
            return f"unreadable ({self.problem})"
        return "built" if self.built else "not built"


@dataclass
class PhaseRun:
    """One phase of the run: its plan, its train and eval stages and what they wrote."""

    index: int
    plan: PhasePlan
    train: StageState | None
    eval: StageState | None  # None: this phase is not evaluated (eval.after_each_phase: false)
    records: list[JsonObject] = field(default_factory=list)
    spikes: JsonObject | None = None
    eval_data: JsonObject | None = None

    @property
    def name(self) -> str:
        return self.plan.name


@dataclass
class BranchRun:
    """One column of the branch comparison: the branched phase as written (branch None) or a branch of it."""

    label: str  # 'anneal' or 'anneal@code-heavy'
    branch: str | None
    plan: PhasePlan  # the phase's plan in the branch's run (runlib.graph.configs.branch_specs)
    devices: int
    train: StageState | None
    eval: StageState | None
    eval_data: JsonObject | None = None
    soup: bool = False  # the soup of the phase and its branches (PhaseSpec.soup): trained on no tokens


@dataclass
class RunData:
    """Everything the run report shows: the spec, its audit, its graph and what each stage wrote."""

    spec_path: str
    spec: RunSpec
    audit: AuditResult
    graph: StageGraph
    stages: list[StageState]
    phases: list[PhaseRun]
    branches: list[BranchRun] = field(default_factory=list)  # the last phase and its branches, if it has any

    @property
    def plan(self) -> Plan:
        return self.audit.plan

    @property
    def missing(self) -> list[StageState]:
        return [s for s in self.stages if not s.built]

    def records(self) -> list[JsonObject]:
        """Every phase's metrics records, in run order (phase by phase, each in the order logged)."""
        return [r for p in self.phases for r in p.records]

    def source_names(self) -> list[str]:
        """The spec's sources, then any other the artifacts name (in first-seen order)."""
        names = list(self.spec.data.sources)
        for p in self.phases:
            for r in p.records:
                names.extend(str(k) for k in json_object(r.get("loss_by_source")))
            names.extend(str(k) for k in json_object((p.eval_data or {}).get("heldout")))
        return list(dict.fromkeys(names))


def _stage_state(node: StageNode) -> StageState:
    try:
        return StageState(node, find_manifest(node.dir))
    except UserError:
        return StageState(node, None, "not a valid manifest")


def collect_run(spec_path: str | Path) -> RunData:
    """Load the spec, audit it as `runlib audit` does (audit_spec_file: the token counts of tokenized sources
    in place of the declared ones), build its graph and read every built artifact the report needs."""
    result = audit_spec_file(spec_path)
    graph = build_graph(result.spec)
    order = {s: i for i, s in enumerate(STAGES)}  # the registry's order: a kind's inputs before it
    nodes = sorted(graph.nodes, key=lambda n: order.get(n.stage, len(order)))  # stable: graph order within
    stages = [_stage_state(n) for n in nodes]
    by_key = {(s.node.stage, s.node.key): s for s in stages}

    def state(stage: str, index: int) -> StageState | None:
        for n in graph.of(stage):
            # a ladder rung's and a branch's are not the run's own
            if n.params.get("phase") == index and "rung" not in n.params and "branch" not in n.params:
                return by_key[(stage, n.key)]
        return None

    phases = []
    for i, phase_plan in enumerate(result.plan.phases):
        run = PhaseRun(i, phase_plan, state("train_phase", i), state("eval_phase", i))
        if run.train is not None and run.train.built:
            run.records = read_metrics(run.train.node.dir / "metrics.jsonl")
            run.spikes = read_json(run.train.node.dir / "spikes.json")
        if run.eval is not None and run.eval.built:
            run.eval_data = read_json(run.eval.node.dir / "eval.json")
        phases.append(run)
    return RunData(str(spec_path), result.spec, result, graph, stages, phases, _branch_runs(result.spec, graph, by_key))


def _branch_runs(spec: RunSpec, graph: StageGraph, by_key: dict[tuple[str, str], StageState]) -> list[BranchRun]:
    """The last phase as written, then each of its branches and its soup, with their stages and evaluations
    ([] without branches)."""
    base = without_branches(spec)
    plan = derive(base)
    specs = branch_specs(spec, plan)
    if not specs or not plan.phases:
        return []
    last = len(plan.phases) - 1
    trains, evals = graph.branch_nodes("train_phase"), graph.branch_nodes("eval_phase")

    def state(node: StageNode | None) -> StageState | None:
        return by_key.get((node.stage, node.key)) if node is not None else None

    name = plan.phases[last].name
    out = [
        BranchRun(
            name,
            None,
            plan.phases[last],
            plan.phases[last].settings.devices,
            state(graph.phase_node("train_phase", last)),
            state(graph.phase_node("eval_phase", last)),
        )
    ]
    for branch, branch_spec in specs.items():
        branch_plan = derive(branch_spec)
        out.append(
            BranchRun(
                f"{name}@{branch}",
                branch,
                branch_plan.phases[last],
                branch_plan.phases[last].settings.devices,
                state(trains.get(branch)),
                state(evals.get(branch)),
            )
        )
    last_spec = spec.phases[last]
    if last_spec.soup is not None:
        label = f"{name}@{last_spec.soup.name}"
        souped = graph.branch_nodes("soup_phase").get(last_spec.soup.name)
        soup_eval = evals.get(last_spec.soup.name)
        out.append(
            BranchRun(
                label,
                None,
                plan.phases[last],
                plan.phases[last].settings.devices,
                state(souped),
                state(soup_eval),
                soup=True,
            )
        )
    for b in out:
        if b.eval is not None and b.eval.built:
            b.eval_data = read_json(b.eval.node.dir / "eval.json")
    return out
