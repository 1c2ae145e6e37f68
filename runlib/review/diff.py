"""`runlib diff A B`: what changing spec A into spec B does, before anyone approves the compute.

Four parts, each a pure comparison of things the project already derives:
1. the spec fields that differ, with both files' lines (a value written differently but equal, such as
   `4Ki tokens` and `4096 tokens`, or a key spelled out at its default, is not a change);
2. the plan: parameters, FLOPs, tokens and steps per phase, the LR at every phase boundary, memory per
   device per phase, epochs per source, device-hours and days (runlib.plan.derive on both);
3. the audit findings that appear and disappear (by code and spec path);
4. the stages that rerun: B's stage instances whose key (runlib.store.keys) is not a key of A's stage
   graph. Artifacts are content-addressed, so with A built these are exactly the jobs `snakemake -n` lists
   for B (besides its `track` and `report` views, which follow every change of the run), with the
   estimated device-hours of the training phases among them.

A file source whose glob matches nothing here (a published spec's placeholder paths) gets a placeholder
shard on both sides, so the keys downstream still compare: they are what the keys would be with the same
input files under both specs (said in the output).

Exit status (runlib.cli): 0, or 1 when B has an error finding A had not (CI can gate a config change).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from runlib.audit import AuditResult
from runlib.curate.config import CurateShardConfig
from runlib.errors import UserError
from runlib.graph.measured import audit_measured
from runlib.plan import Plan
from runlib.spec import LoadedSpec, load_spec
from runlib.spec.units import format_count

GIB = 2**30
_MISSING = object()


@dataclass(frozen=True)
class FieldChange:
    path: str
    a: Any  # the value as written in A (None: not written, the default applies)
    b: Any
    line_a: int | None
    line_b: int | None


@dataclass(frozen=True)
class PlanRow:
    section: str  # "run", "phase <name>", "source <name>"
    quantity: str  # e.g. "tokens", "memory per device (GiB)"
    a: float | None  # None: absent on that side
    b: float | None

    @property
    def changed(self) -> bool:
        return not _same_number(self.a, self.b)


@dataclass(frozen=True)
class FindingChange:
    code: str
    severity: str
    path: str
    message: str
    line: int | None  # in the file of the side it is found on


@dataclass(frozen=True)
class StageRerun:
    stage: str
    instance: str
    key: str
    key_before: str | None  # the same instance's key under A; None: the instance is new
    device_hours: float | None  # training phases: the plan's estimate for B; None otherwise


@dataclass
class SpecDiff:
    file_a: str
    file_b: str
    fields: list[FieldChange]
    plan: list[PlanRow]
    appeared: list[FindingChange]
    disappeared: list[FindingChange]
    reruns: list[StageRerun]
    stages_b: int  # stage instances of B in all
    hours_unit: str  # "GPU-hours", or "core-hours" when B runs on CPUs
    placeholder_sources: list[str] = field(default_factory=list)
    errors_a: int = 0
    errors_b: int = 0
    measured_sources: list[str] = field(default_factory=list)  # "A: docs" etc.: counted in tokenized shards

    @property
    def new_errors(self) -> list[FindingChange]:
        return [f for f in self.appeared if f.severity == "error"]

    @property
    def rerun_device_hours(self) -> float:
        return sum(r.device_hours or 0.0 for r in self.reruns)

    def exit_code(self) -> int:
        return 1 if self.new_errors else 0


# ------------------------------------------------------------------------------------------ fields


def flatten_data(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Leaves of the spec's YAML data by spec path ('phases[2].seq_len', 'data.sources.docs.tokens');
    a list of plain values ('optimizer.betas') or an empty mapping is one leaf."""
    if isinstance(obj, dict) and obj:
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(flatten_data(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(obj, list) and any(isinstance(v, (dict, list)) for v in obj):
        out = {}
        for i, v in enumerate(obj):
            out.update(flatten_data(v, f"{prefix}[{i}]"))
        return out
    return {prefix: obj}


_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def spec_value(spec: Any, path: str) -> Any:
    """The validated value at a spec path (model attributes, mapping keys, list indices); _MISSING if none."""
    current = spec
    for name, index in _PART.findall(path):
        if index:
            i = int(index)
            if not isinstance(current, (list, tuple)) or i >= len(current):
                return _MISSING
            current = current[i]
        elif isinstance(current, dict):
            if name not in current:
                return _MISSING
            current = current[name]
        elif hasattr(type(current), "model_fields") and name in type(current).model_fields:
            current = getattr(current, name)
        else:
            return _MISSING
    return current


def field_changes(a: LoadedSpec, b: LoadedSpec) -> list[FieldChange]:
    """The spec paths whose validated value differs, in B's file order (then A-only paths in A's)."""
    flat_a, flat_b = flatten_data(a.data), flatten_data(b.data)
    changes = []
    for path in list(flat_b) + [p for p in flat_a if p not in flat_b]:
        raw_a, raw_b = flat_a.get(path, _MISSING), flat_b.get(path, _MISSING)
        if raw_a == raw_b and type(raw_a) is type(raw_b):
            continue
        if spec_value(a.spec, path) == spec_value(b.spec, path):
            continue  # written differently (4Ki tokens / 4096 tokens), or a default spelled out
        pos_a = a.source_map.position(path) if raw_a is not _MISSING else None
        pos_b = b.source_map.position(path) if raw_b is not _MISSING else None
        changes.append(
            FieldChange(
                path,
                None if raw_a is _MISSING else raw_a,
                None if raw_b is _MISSING else raw_b,
                pos_a[0] if pos_a else None,
                pos_b[0] if pos_b else None,
            )
        )
    return changes


# -------------------------------------------------------------------------------------------- plan


def _same_number(x: float | None, y: float | None) -> bool:
    if x is None or y is None:
        return x is y
    if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
        return True
    return x == y or math.isclose(x, y, rel_tol=1e-12, abs_tol=0.0)


def _plan_numbers(plan: Plan) -> dict[tuple[str, str], float | None]:
    """(section, quantity) -> value: what `runlib diff` compares between two plans."""
    unit = "core-hours" if plan.accelerator.key == "cpu" else "GPU-hours"
    out: dict[tuple[str, str], float | None] = {
        ("run", "parameters"): plan.params.total,
        ("run", "FLOPs"): plan.flops_total,
        ("run", "tokens"): plan.tokens_total,
        ("run", "steps"): plan.steps_total,
        ("run", "devices"): plan.devices,
        ("run", unit): plan.gpu_hours,
        ("run", "days"): plan.wall_days,
    }
    for p in plan.phases:
        section = f"phase {p.name}"
        out[(section, "tokens")] = p.tokens
        out[(section, "steps")] = p.steps
        out[(section, "tokens per step")] = p.tokens_per_step
        out[(section, "LR at start")] = p.lr_start
        out[(section, "LR at end")] = p.lr_end
        out[(section, "memory per device (GiB)")] = p.memory.total / GIB
        out[(section, "wall hours")] = p.hours
    for s in plan.sources:
        out[(f"source {s.name}", "tokens available")] = s.tokens_available
        out[(f"source {s.name}", "tokens used")] = s.tokens_used
        out[(f"source {s.name}", "epochs")] = s.epochs
    return out


def plan_rows(plan_a: Plan, plan_b: Plan) -> list[PlanRow]:
    """Every compared quantity, A and B side by side (B's order, then what only A has)."""
    a, b = _plan_numbers(plan_a), _plan_numbers(plan_b)
    keys = list(b) + [k for k in a if k not in b]
    return [
        PlanRow(section, quantity, a.get((section, quantity)), b.get((section, quantity))) for section, quantity in keys
    ]


# ---------------------------------------------------------------------------------------- findings


def finding_changes(a: AuditResult, b: AuditResult) -> tuple[list[FindingChange], list[FindingChange]]:
    """Findings of B that A has not (by code and spec path), and those of A that B has not."""

    def index(result: AuditResult) -> dict[tuple[str, str], FindingChange]:
        return {(f.code, f.path): FindingChange(f.code, f.severity, f.path, f.message, f.line) for f in result.findings}

    ia, ib = index(a), index(b)
    return [v for k, v in ib.items() if k not in ia], [v for k, v in ia.items() if k not in ib]


# ------------------------------------------------------------------------------------------ stages


def review_graph(spec: Any, plan: Plan) -> tuple[Any, list[str]]:
    """The spec's stage graph (runlib.graph.build.build_graph), except that a file source whose glob
    matches nothing gets one placeholder shard (no files) instead of an error. Returns the graph and the
    names of those sources."""
    from runlib.graph import configs
    from runlib.graph.build import build_graph

    placeholders: list[str] = []
    shard_configs: dict[str, list[CurateShardConfig]] = {}
    for name, source in spec.data.sources.items():
        try:
            shard_configs[name] = configs.curate_shard_configs(_one_source(spec, name), plan)[name]
        except UserError as exc:
            if "matches no file" not in str(exc):
                raise
            placeholders.append(name)
            shard_configs[name] = [
                CurateShardConfig(input=source.input, curate=source.curate, shard=0, shards=1, files=[])
            ]
    # a tokenizer.pretrained or eval task file not here: a placeholder digest on both sides (runlib.graph.configs)
    with configs.placeholder_files() as missing_files:
        graph = build_graph(spec, shard_configs)
    return graph, placeholders + missing_files


def _one_source(spec: Any, name: str) -> Any:
    """The spec with only source `name` (so one missing source's error does not hide the others')."""
    data = spec.data.model_copy(update={"sources": {name: spec.data.sources[name]}})
    return spec.model_copy(update={"data": data})


def stage_reruns(graph_a: Any, graph_b: Any, spec_b: Any) -> list[StageRerun]:
    """B's stage instances whose key A's graph lacks, in B's graph order; a training stage carries the
    estimated device-hours of its own run (a ladder rung's or a branch's plan, not the target's)."""
    from runlib.graph.train_plans import node_device_hours, train_plans

    keys_a = {(n.stage, n.key) for n in graph_a.nodes}
    before = {n.instance: n.key for n in graph_a.nodes}
    plans = None
    reruns = []
    for node in graph_b.nodes:
        if (node.stage, node.key) in keys_a:
            continue
        hours = None
        if node.stage == "train_phase":
            plans = plans if plans is not None else train_plans(spec_b)
            hours = node_device_hours(node, plans)
        reruns.append(StageRerun(node.stage, node.instance, node.key, before.get(node.instance), hours))
    return reruns


# ------------------------------------------------------------------------------------------- entry


def diff_loaded(a: LoadedSpec, b: LoadedSpec) -> SpecDiff:
    """The whole comparison of two loaded specs, each audited as `runlib audit` audits it (audit_measured: a
    source tokenized on this machine under that spec counts its measured tokens, so the
    epochs here are the audit's)."""
    result_a, result_b = audit_measured(a), audit_measured(b)
    graph_a, missing_a = review_graph(a.spec, result_a.plan)
    graph_b, missing_b = review_graph(b.spec, result_b.plan)
    appeared, disappeared = finding_changes(result_a, result_b)
    return SpecDiff(
        file_a=a.source_map.file,
        file_b=b.source_map.file,
        fields=field_changes(a, b),
        plan=plan_rows(result_a.plan, result_b.plan),
        appeared=appeared,
        disappeared=disappeared,
        reruns=stage_reruns(graph_a, graph_b, b.spec),
        stages_b=len(graph_b.nodes),
        hours_unit="core-hours" if result_b.plan.accelerator.key == "cpu" else "GPU-hours",
        placeholder_sources=sorted(set(missing_a) | set(missing_b)),
        errors_a=result_a.count("error"),
        errors_b=result_b.count("error"),
        measured_sources=[
            f"{side}: {s.name}"
            for side, result in (("A", result_a), ("B", result_b))
            for s in result.plan.sources
            if s.tokens_basis == "measured"
        ],
    )


def diff_files(path_a: str | Path, path_b: str | Path) -> SpecDiff:
    """Load both specs (SpecError, exit 2, when either does not load) and compare them."""
    return diff_loaded(load_spec(path_a), load_spec(path_b))


# ----------------------------------------------------------------------------------------- render


def _value(v: Any) -> str:
    if v is None:
        return "(not set)"
    if isinstance(v, (dict, list)):
        return json.dumps(v, separators=(", ", ": "))
    return str(v)


def _number(quantity: str, x: float | None) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    if quantity.startswith("LR"):
        return f"{x:.3g}"
    if quantity in ("epochs", "days") or quantity.endswith(("hours", "(GiB)")):
        return f"{x:,.3g}" if abs(x) < 1000 else f"{x:,.0f}"
    if isinstance(x, int) or float(x).is_integer():
        return f"{int(x):,}" if abs(x) < 1e6 else format_count(x)
    return format_count(x)


def _change(a: float | None, b: float | None) -> str:
    if a is None:
        return "new"
    if b is None:
        return "gone"
    if a == 0 or not (math.isfinite(a) and math.isfinite(b)):
        return "changed"
    return f"{(b - a) / abs(a) * 100:+.1f}%"


def _rerun_summary(d: SpecDiff) -> str:
    if not d.reruns:
        return f"no stage reruns: all {d.stages_b} of B's stages are A's (the run report and MLflow records follow)"
    hours = d.rerun_device_hours
    return (
        f"{len(d.reruns)} of {d.stages_b} stages rerun (their keys change), ~{_number(d.hours_unit, hours)} "
        f"{d.hours_unit} of training; the rest reuse A's artifacts"
    )


def render_text(d: SpecDiff) -> str:
    lines = [f"runlib diff {d.file_a} -> {d.file_b}", ""]
    lines.append(f"spec fields that differ ({len(d.fields)})")
    for c in d.fields:
        where = f"{d.file_a}:{c.line_a or '-'} / {d.file_b}:{c.line_b or '-'}"
        lines.append(f"  {c.path}: {_value(c.a)} -> {_value(c.b)}   ({where})")
    if not d.fields:
        lines.append("  none: the two specs mean the same run")
    changed = [r for r in d.plan if r.changed]
    lines += ["", f"plan ({len(changed)} quantities change)"]
    for r in changed:
        a, b = _number(r.quantity, r.a), _number(r.quantity, r.b)
        lines.append(f"  {r.section + ' ' + r.quantity:<44} {a:>12} -> {b:<12} {_change(r.a, r.b)}")
    if d.measured_sources:
        measured = ", ".join(d.measured_sources)
        lines.append(f"  (tokens available measured in the tokenized shards, as runlib audit: {measured})")
    lines += ["", f"findings: {len(d.appeared)} appear, {len(d.disappeared)} disappear"]
    for f in d.appeared:
        lines.append(f"  + {f.severity:<7} {f.code} {f.path} ({d.file_b}:{f.line or '-'}): {f.message}")
    for f in d.disappeared:
        lines.append(f"  - {f.severity:<7} {f.code} {f.path}: {f.message}")
    lines += ["", _rerun_summary(d)]
    for rerun in d.reruns:
        hours = (
            f"  ~{_number(d.hours_unit, rerun.device_hours)} {d.hours_unit}" if rerun.device_hours is not None else ""
        )
        was = f"was {rerun.key_before}" if rerun.key_before else "new instance"
        lines.append(f"  {rerun.instance:<34} {rerun.key}  ({was}){hours}")
    if d.placeholder_sources:
        lines.append(
            f"  (input files of {', '.join(d.placeholder_sources)} not found here: their stage keys assume "
            "the same files under both specs)"
        )
    if d.new_errors:
        lines += ["", f"exit 1: B has {len(d.new_errors)} error(s) A had not"]
    return "\n".join(lines) + "\n"


def _md(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(d: SpecDiff) -> str:
    """A pull-request comment: a one-line verdict, then tables (GitHub-flavoured markdown)."""
    verdict = (
        f"**{len(d.new_errors)} new audit error(s)**" if d.new_errors else "no new audit errors"
    ) + f"; {_rerun_summary(d)}."
    lines = [f"### runlib diff `{d.file_a}` → `{d.file_b}`", "", verdict, ""]
    lines += ["#### Spec fields", "", "| field | A | B | lines (A / B) |", "|---|---|---|---|"]
    for c in d.fields:
        lines.append(
            f"| `{_md(c.path)}` | {_md(_value(c.a))} | {_md(_value(c.b))} | {c.line_a or '-'} / {c.line_b or '-'} |"
        )
    if not d.fields:
        lines.append("| (none) | | | |")
    changed = [r for r in d.plan if r.changed]
    lines += ["", "#### Plan", "", "| | quantity | A | B | change |", "|---|---|---:|---:|---:|"]
    for r in changed:
        lines.append(
            f"| {_md(r.section)} | {_md(r.quantity)} | {_number(r.quantity, r.a)} | {_number(r.quantity, r.b)} "
            f"| {_change(r.a, r.b)} |"
        )
    if not changed:
        lines.append("| | (nothing changes) | | | |")
    lines += ["", "#### Findings", ""]
    if not d.appeared and not d.disappeared:
        lines.append("No finding appears or disappears.")
    else:
        lines += ["| | severity | code | field | message |", "|---|---|---|---|---|"]
        for sign, group in (("+", d.appeared), ("−", d.disappeared)):
            for f in group:
                lines.append(f"| {sign} | {f.severity} | {f.code} | `{_md(f.path)}` | {_md(f.message)} |")
    lines += ["", "#### Stages that rerun", ""]
    if d.reruns:
        lines += [f"| stage | key | was | {d.hours_unit} |", "|---|---|---|---:|"]
        for rerun in d.reruns:
            hours = _number(d.hours_unit, rerun.device_hours) if rerun.device_hours is not None else ""
            was = f"`{rerun.key_before}`" if rerun.key_before else "new"
            lines.append(f"| {_md(rerun.instance)} | `{rerun.key}` | {was} | {hours} |")
    else:
        lines.append("None.")
    if d.placeholder_sources:
        lines += [
            "",
            f"_Input files of {', '.join(d.placeholder_sources)} not found: their stage keys assume "
            "the same files under both specs._",
        ]
    return "\n".join(lines) + "\n"


def as_json(d: SpecDiff) -> dict[str, Any]:
    def num(x: Any) -> Any:
        return None if isinstance(x, float) and not math.isfinite(x) else x

    return {
        "a": d.file_a,
        "b": d.file_b,
        "fields": [asdict(c) for c in d.fields],
        "plan": [
            {"section": r.section, "quantity": r.quantity, "a": num(r.a), "b": num(r.b), "changed": r.changed}
            for r in d.plan
        ],
        "findings": {"appeared": [asdict(f) for f in d.appeared], "disappeared": [asdict(f) for f in d.disappeared]},
        "reruns": [{**asdict(r), "device_hours": num(r.device_hours)} for r in d.reruns],
        "stages_b": d.stages_b,
        "rerun_device_hours": num(d.rerun_device_hours),
        "hours_unit": d.hours_unit,
        "placeholder_sources": d.placeholder_sources,
        "errors": {"a": d.errors_a, "b": d.errors_b, "new": len(d.new_errors)},
        "measured_sources": d.measured_sources,
        "exit_code": d.exit_code(),
    }
