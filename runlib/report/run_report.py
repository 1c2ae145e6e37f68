"""The run report: what a run of a spec produced, read from its artifacts, as markdown, HTML and plots.

`write_run_report(spec_path)` loads the spec, builds its stage graph and reads whatever is built:
every manifest (wall times, keys, counts), each train_phase's metrics.jsonl and spikes.json, each
eval_phase's eval.json. A partial run gets a report too; it names the stages not built yet.

It follows the audit report (runlib.audit.render.report): the content is one list of blocks rendered
to both report.md and report.html, the plots are drawn on an Agg canvas with the audit plots'
helpers, and the directory (by default reports/<run>/run for the spec file named after its run,
reports/<run>/run-<file stem> for a variant: runlib.util.report_dirs) is built in a temporary sibling and
swapped into place only when complete; it lists the run reports of other spec files of the same run name
beside it (runlib.report.siblings).

Step and token counts in train_phase artifacts are the run's (cumulative across phases), so all
phases share one x axis: tokens seen since the start of the run.

Numbers a reader could misread are qualified where they are shown: the loss plot draws the raw
logged loss and an EMA over tokens (runlib.report.smoothing) beside it, with the uniform-guess loss
ln(vocabulary) as a reference line; multiple-choice accuracy sits beside its chance level (from
the items: eval.json's chance_acc); a task that got fewer examples than it asked for says how many
and why (eval.json's examples_cap); device-hours are "core-hours" on a CPU run (hardware.accelerator
cpu: one device is one core) and "GPU-hours" on a GPU; the audit's refit loss prediction is shown
only inside the range it was fitted on (runlib.plan.scaling.predict_loss).
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runlib import __version__
from runlib.audit import AuditResult, audit_spec_file
from runlib.audit.render import plots
from runlib.audit.render import report as audit_report
from runlib.audit.render.json_view import to_dict
from runlib.audit.render.report import Block, Code, Heading, Image, Para, Table, render_html, render_markdown
from runlib.errors import UserError
from runlib.plan.hardware import CATALOG
from runlib.report import siblings
from runlib.report.smoothing import ema_over_tokens
from runlib.spec.units import format_count
from runlib.util.jsonl import read_jsonl
from runlib.util.report_dirs import report_dir
from runlib.workflow.graph import StageGraph, StageNode, build_graph
from runlib.workflow.keys import spec_key
from runlib.workflow.manifest import Manifest, find_manifest

if TYPE_CHECKING:
    from runlib.plan import Plan
    from runlib.plan.derive import PhasePlan
    from runlib.spec.models import RunSpec

MARKDOWN = "report.md"
HTML = "report.html"
STAGE_ORDER = ("curate_shard", "curate_source", "train_tokenizer", "tokenize", "train_phase", "eval_phase")
HELDOUT_METRICS = (("loss", "Held-out loss", ".4f"), ("perplexity", "Held-out perplexity", ".2f"))
HELDOUT_METRICS += (("bits_per_byte", "Held-out bits per byte", ".4f"),)
TASK_METRIC_ORDER = ("acc", "acc_norm", "loglik_mean", "loglik_per_token")
TASK_INFO_KEYS = ("kind", "n", "chance_acc", "examples_requested", "examples_cap")  # not metrics
CHANCE_METRICS = ("acc", "acc_norm")  # compared with chance_acc
# the smoothed loss curve's memory: an EMA over tokens with a half-life of 2% of the run's tokens
# (a 2M-token run: 41K tokens, 10 steps of 4Ki; a 2T-token run: 40B tokens), restarted at each
# phase so a phase's new data or context length is not blurred into the previous phase's curve
SMOOTH_HALF_LIFE_FRACTION = 0.02

# (file, title, caption): the report shows the plots in this order.
PLOTS = (
    (
        "loss.png",
        "Loss",
        "Training loss against tokens seen. Thin grey: the raw logged loss, one point per logging "
        "interval (the interval's mean where the log records interval_tokens, else the logged step's "
        "loss); black and coloured: the loss in total and per source smoothed by "
        "an exponential moving average over tokens (half-life 2% of the run's tokens, each record "
        "weighted by the tokens of its logging interval, restarted at each phase). Diamonds: held-out "
        "loss per source after each evaluated phase; dashed: ln(vocabulary), the loss of a uniform "
        "guess; dotted lines mark phase starts.",
    ),
    (
        "lr.png",
        "Learning rate",
        "Learning rate logged by training, against tokens seen; thin grey line: the plan's schedule, each "
        "phase's optimizer.lr_scale applied (the LR training sets).",
    ),
    (
        "throughput.png",
        "Throughput",
        "Tokens per second and MFU at each logging point: the phase's average so far (its training time "
        "only: evaluation and checkpoints excluded), against tokens seen.",
    ),
)


# --- reading the run -----------------------------------------------------------------------------


@dataclass(frozen=True)
class StageState:
    node: StageNode
    manifest: Manifest | None
    problem: str | None = None  # why a manifest that exists could not be read

    @property
    def built(self) -> bool:
        return self.manifest is not None

    @property
    def wall_seconds(self) -> float | None:
        wall = self.manifest.timings.wall_seconds if self.manifest is not None else None
        return float(wall) if _is_number(wall) else None

    @property
    def status(self) -> str:
        if self.problem:
            return f"unreadable ({self.problem})"
        return "built" if self.built else "not built"


@dataclass
class PhaseRun:
    index: int
    plan: PhasePlan
    train: StageState | None
    eval: StageState | None  # None: this phase is not evaluated (eval.after_each_phase: false)
    records: list[dict[str, Any]] = field(default_factory=list)
    spikes: dict[str, Any] | None = None
    eval_data: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        return self.plan.name


@dataclass
class BranchRun:
    """One column of the branch comparison: the branched phase as written (branch None) or a branch of it."""

    label: str  # 'anneal' or 'anneal@code-heavy'
    branch: str | None
    plan: PhasePlan  # the phase's plan in the branch's run (runlib.workflow.configs.branch_specs)
    devices: int
    train: StageState | None
    eval: StageState | None
    eval_data: dict[str, Any] | None = None


@dataclass
class RunData:
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

    def records(self) -> list[dict[str, Any]]:
        """Every phase's metrics records, in run order (phase by phase, each in the order logged)."""
        return [r for p in self.phases for r in p.records]

    def source_names(self) -> list[str]:
        """The spec's sources, then any other the artifacts name (in first-seen order)."""
        names = list(self.spec.data.sources)
        for p in self.phases:
            for r in p.records:
                names.extend(r.get("loss_by_source") or {})
            names.extend(((p.eval_data or {}).get("heldout")) or {})
        return list(dict.fromkeys(names))


def device_hours_unit(accelerator: str) -> str:
    """'core-hours' on a CPU run (one device is one core), 'GPU-hours' on a catalogued GPU,
    'device-hours' on an accelerator runlib does not know."""
    if accelerator == "cpu":
        return "core-hours"
    return "GPU-hours" if accelerator in CATALOG else "device-hours"


HOURS_LABELS = ("gpu-hours", "core-hours", "device-hours")


def _sentence(text: str) -> str:
    """First letter upper case, the rest as written ('core-hours' -> 'Core-hours', 'GPU-hours' stays)."""
    return text[:1].upper() + text[1:]


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl; lines that are not a JSON object with a step are skipped."""
    return [record for record in read_jsonl(path) if _is_number(record.get("step"))]


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
    order = {s: i for i, s in enumerate(STAGE_ORDER)}
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
            run.spikes = _read_json(run.train.node.dir / "spikes.json")
        if run.eval is not None and run.eval.built:
            run.eval_data = _read_json(run.eval.node.dir / "eval.json")
        phases.append(run)
    return RunData(str(spec_path), result.spec, result, graph, stages, phases, _branch_runs(result.spec, graph, by_key))


def _branch_runs(spec: RunSpec, graph: StageGraph, by_key: dict[tuple[str, str], StageState]) -> list[BranchRun]:
    """The last phase as written, then each of its branches, with their stages and evaluations ([] without
    branches)."""
    from runlib.plan import derive
    from runlib.workflow.configs import branch_specs, without_branches

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
            plan.devices,
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
                branch_plan.devices,
                state(trains.get(branch)),
                state(evals.get(branch)),
            )
        )
    for b in out:
        if b.eval is not None and b.eval.built:
            b.eval_data = _read_json(b.eval.node.dir / "eval.json")
    return out


# --- formatting ----------------------------------------------------------------------------------


def format_seconds(seconds: float | None) -> str:
    """A wall time: '12.3 s', '4 min 05 s', '2 h 03 min'."""
    if seconds is None or not math.isfinite(seconds):
        return "n/a"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    minutes = whole // 60
    return f"{minutes // 60} h {minutes % 60:02d} min"


def _fmt(x: Any, spec: str = ".4g") -> str:
    return format(float(x), spec) if _is_number(x) else "n/a"


def _count(x: Any) -> str:
    return format_count(x) if _is_number(x) else "n/a"


def _int(x: Any) -> str:
    return f"{int(x):,}" if _is_number(x) else "n/a"


# --- content -------------------------------------------------------------------------------------


def build_blocks(run: RunData) -> list[Block]:
    """The report's content, format-neutral (rendered by the audit report's renderers)."""
    return [
        *_header(run),
        *_training(run),
        *_evaluation(run),
        *_branches(run),
        *_plan_vs_measured(run),
        *_wall_times(run),
        *_stages(run),
        *_audit(run),
        *_ladder(run),
        Heading(2, "Plots"),
        *(Image(file, title, caption) for file, title, caption in PLOTS),
    ]


def _ladder(run: RunData) -> list[Block]:
    """The scaling ladder's rungs, fits and prediction (runlib.ladder.report), for a spec with a ladder."""
    if run.spec.ladder is None:
        return []
    from runlib.ladder.report import ladder_blocks

    return ladder_blocks(run)


def _header(run: RunData) -> list[Block]:
    spec = run.spec
    blocks: list[Block] = [
        Heading(1, f"Run report: {spec.name}"),
        Para(f"Spec file: {run.spec_path} · spec key {spec_key(spec)} · runlib {__version__}"),
    ]
    if spec.description.strip():
        blocks.append(Para(spec.description))
    built = len(run.stages) - len(run.missing)
    trained = sum(1 for p in run.phases if p.train is not None and p.train.built)
    evals = [p for p in run.phases if p.eval is not None]
    evaluated = sum(1 for p in evals if p.eval is not None and p.eval.built)
    blocks.append(
        Para(
            f"{built} of {len(run.stages)} stages built; {trained} of {len(run.phases)} phases trained; "
            f"{evaluated} of {len(evals)} evaluations done."
        )
    )
    if run.missing:
        names = ", ".join(s.node.instance for s in run.missing)
        blocks.append(Para(f"Missing stages ({len(run.missing)}, the run is incomplete): {names}."))
    else:
        blocks.append(Para("All stages are built: the run is complete."))
    return blocks


def _training(run: RunData) -> list[Block]:
    rows = []
    for p in run.phases:
        span = p.plan.span
        planned = f"{format_count(span.start_tokens)} – {format_count(span.end_tokens)}"
        if p.train is None or not p.train.built:
            status = p.train.status if p.train is not None else "no stage"
            rows.append((p.name, status, planned, *(["–"] * 7)))
            continue
        counts = p.train.manifest.counts if p.train.manifest is not None else {}
        last = p.records[-1] if p.records else {}
        end_step = counts.get("steps", last.get("step"))
        end_tokens = counts.get("tokens", last.get("tokens"))
        steps = (
            f"{int(end_step) - span.start_step:,} (to step {int(end_step):,})"
            if _is_number(end_step) and end_step >= span.start_step
            else _int(end_step)
        )
        tokens = (
            f"{format_count(end_tokens - span.start_tokens)} (to {format_count(end_tokens)})"
            if _is_number(end_tokens) and end_tokens >= span.start_tokens
            else _count(end_tokens)
        )
        spikes = counts.get("spikes")
        if spikes is None and p.spikes is not None:
            spikes = len(p.spikes.get("spikes") or [])
        skipped = len((p.spikes or {}).get("skipped_data_steps") or [])
        rows.append(
            (
                p.name,
                "built",
                planned,
                steps,
                tokens,
                _fmt(counts.get("final_loss", last.get("loss")), ".4f"),
                _count(counts.get("tokens_per_s", last.get("tokens_per_s"))),
                _fmt(last.get("mfu"), ".3f"),
                _int(spikes) + (f" ({skipped} {'batch' if skipped == 1 else 'batches'} skipped)" if skipped else ""),
                format_seconds(p.train.wall_seconds),
            )
        )
    headers = ("Phase", "Status", "Planned tokens", "Steps", "Tokens", "Final loss", "Tokens/s", "MFU", "Spikes")
    return [
        Heading(2, "Training"),
        Para(
            "Per phase, from its train_phase manifest and metrics.jsonl (final loss: the last logged "
            "loss; tokens/s and MFU: over the phase's training time)."
        ),
        Table((*headers, "Wall time"), rows),
    ]


def _plan_vs_measured(run: RunData) -> list[Block]:
    """Per phase: the mesh that ran, tokens/s and MFU measured against the plan's MFU, peak memory per
    rank measured against the plan's estimate per device."""
    rows = []
    for p in run.phases:
        manifest = p.train.manifest if p.train is not None and p.train.built else None
        if manifest is None:
            continue
        details, counts = manifest.details, manifest.counts
        mesh = details.get("mesh") or {}
        memory = details.get("memory") or {}
        peaks = [x for x in memory.get("measured_peak_bytes_per_rank") or [] if _is_number(x)]
        estimate = memory.get("estimate_bytes_per_device")
        processes, wall = counts.get("processes"), p.train.wall_seconds if p.train is not None else None
        rows.append(
            (
                p.name,
                " x ".join(f"{k} {v}" for k, v in mesh.items() if v != 1) or "1 process",
                _fmt(wall * processes / 3600, ".3g") if _is_number(processes) and wall is not None else "–",
                _fmt(p.plan.hours * run.plan.devices, ".3g"),
                _count(counts.get("tokens_per_s")),
                _fmt(counts.get("mfu"), ".3f"),
                _fmt(run.spec.hardware.mfu, ".3f"),
                f"{max(peaks) / 2**20:,.0f} MiB ({memory.get('measured_kind', '?')})" if peaks else "–",
                f"{estimate / 2**20:,.0f} MiB" if _is_number(estimate) else "–",
                _fmt(estimate / max(peaks), ".2f") if peaks and _is_number(estimate) else "–",
            )
        )
    if not rows:
        return []
    unit = device_hours_unit(run.spec.hardware.accelerator)
    headers = ("Phase", "Mesh", _sentence(unit), f"Planned {unit}", "Tokens/s", "MFU", "Planned MFU")
    headers += ("Peak memory", "Planned memory", "Plan/measured")
    return [
        Heading(2, "Plan against measurement"),
        Para(
            f"Per phase, from its train_phase manifest: the device mesh that ran (dimensions above 1), "
            f"{unit} (the stage's wall time x its processes, so start-up, evaluation and checkpoints "
            f"included) against the plan's (its FLOPs at the spec's MFU), "
            "throughput over the phase's training time (evaluation and checkpoints excluded), and the "
            "largest peak memory of any rank (CUDA allocator on GPU, resident set size on CPU, which "
            "includes the Python runtime) against the plan's per-device estimate."
        ),
        Table(headers, rows),
    ]


def _evaluation(run: RunData) -> list[Block]:
    evaluated = [p for p in run.phases if p.eval is not None]
    blocks: list[Block] = [Heading(2, "Evaluation")]
    if not evaluated:
        return [*blocks, Para("No phase is evaluated by this spec.")]
    missing = [p.name for p in evaluated if p.eval_data is None]
    if missing:
        blocks.append(Para(f"Not evaluated yet: {', '.join(missing)}."))
    heads = tuple(p.name for p in evaluated)
    sources = run.source_names()
    for metric, title, spec in HELDOUT_METRICS:
        rows = []
        for source in sources:
            cells = []
            for p in evaluated:
                entry = ((p.eval_data or {}).get("heldout") or {}).get(source)
                cells.append(_fmt((entry or {}).get(metric), spec) if p.eval_data is not None else "–")
            rows.append((source, *cells))
        blocks += [Heading(3, title), Table(("Source", *heads), rows)]

    tasks: dict[str, dict[str, Any]] = {}  # name -> {"kind", "metrics": [...]}
    for p in evaluated:
        for name, result in ((p.eval_data or {}).get("tasks") or {}).items():
            entry = tasks.setdefault(name, {"kind": "", "metrics": []})
            if isinstance(result, dict):
                entry["kind"] = entry["kind"] or str(result.get("kind", ""))
                entry["metrics"] += [k for k, v in result.items() if k not in TASK_INFO_KEYS and _is_number(v)]
    if not tasks:
        return [*blocks, Heading(3, "Tasks"), Para("No task results.")]
    rows, caps = [], []
    for name, entry in tasks.items():
        names = list(dict.fromkeys(entry["metrics"]))
        names.sort(key=lambda m: TASK_METRIC_ORDER.index(m) if m in TASK_METRIC_ORDER else len(TASK_METRIC_ORDER))
        results = [((p.eval_data or {}).get("tasks") or {}).get(name) for p in evaluated]
        latest = next((r for r in reversed(results) if isinstance(r, dict)), {})  # the last evaluation's
        n, requested = latest.get("n"), latest.get("examples_requested")
        examples = _int(n)
        if _is_number(n) and _is_number(requested) and requested > n:
            examples = f"{int(n):,} of {int(requested):,} requested"
        if latest.get("examples_cap"):
            caps.append(f"{name}: {latest['examples_cap']}.")
        chance = latest.get("chance_acc")
        for metric in names:
            cells = [_fmt(r.get(metric), ".4f") if isinstance(r, dict) else "–" for r in results]
            level = (_fmt(chance, ".4f") if _is_number(chance) else "n/a") if metric in CHANCE_METRICS else "–"
            rows.append((name, entry["kind"], metric, examples, level, *cells))
    blocks += [
        Heading(3, "Tasks"),
        Para(
            "n: the examples scored (of those requested, when fewer). Chance: the accuracy of picking a "
            "choice uniformly at random, the mean of 1 / choices over the task's items (acc and acc_norm "
            "are read against it; n/a: not recorded by the runlib that evaluated)."
        ),
        Table(("Task", "Kind", "Metric", "n", "Chance", *heads), rows),
    ]
    if caps:
        blocks.append(Para("Fewer examples than requested: " + " ".join(caps)))
    return blocks


def _branches(run: RunData) -> list[Block]:
    """The branched phase and its branches side by side (PhaseSpec.branches), for a spec with branches."""
    if not run.branches:
        return []
    last = run.branches[0].label
    unit = device_hours_unit(run.spec.hardware.accelerator)
    return [
        Heading(2, "Branches"),
        Para(
            f"The phase {last} as written and each of its branches, all trained from the same checkpoint (the "
            f"end of the phase before it). Held-out loss per source and task scores from each one's eval.json "
            f"(acc for multiple choice, else the first metric recorded); cost: the phase's tokens, its planned "
            f"{unit} (its FLOPs at the spec's MFU) and its measured ones (the stage's wall time x its processes)."
        ),
        branch_table(run.branches, run.source_names(), unit),
    ]


def branch_table(branches: list[BranchRun], sources: list[str], unit: str) -> Table:
    """One column per branch (pure: the BranchRun values in, the table out): held-out loss per source,
    each task's headline metric, then tokens, planned and measured device-hours."""

    def heldout(b: BranchRun, source: str) -> str:
        if b.eval_data is None:
            return "–"
        entry = (b.eval_data.get("heldout") or {}).get(source)
        return _fmt((entry or {}).get("loss"), ".4f")

    tasks: dict[str, str] = {}  # task -> its headline metric
    for b in branches:
        for name, result in ((b.eval_data or {}).get("tasks") or {}).items():
            if isinstance(result, dict) and name not in tasks:
                metrics = [k for k, v in result.items() if k not in TASK_INFO_KEYS and _is_number(v)]
                ordered = [m for m in TASK_METRIC_ORDER if m in metrics] + metrics
                if ordered:
                    tasks[name] = ordered[0]

    def task(b: BranchRun, name: str) -> str:
        result = ((b.eval_data or {}).get("tasks") or {}).get(name)
        return _fmt(result.get(tasks[name]), ".4f") if isinstance(result, dict) else "–"

    def measured(b: BranchRun) -> str:
        manifest = b.train.manifest if b.train is not None and b.train.built else None
        processes = manifest.counts.get("processes") if manifest is not None else None
        wall = b.train.wall_seconds if b.train is not None else None
        return _fmt(wall * processes / 3600, ".3g") if _is_number(processes) and wall is not None else "–"

    rows = [(f"held-out loss: {s}", *(heldout(b, s) for b in branches)) for s in sources]
    rows += [(f"{name} ({metric})", *(task(b, name) for b in branches)) for name, metric in tasks.items()]
    rows += [
        ("tokens", *(_count(b.plan.tokens) for b in branches)),
        (f"planned {unit}", *(_fmt(b.plan.hours * b.devices, ".3g") for b in branches)),
        (f"measured {unit}", *(measured(b) for b in branches)),
    ]
    return Table(("", *(b.label for b in branches)), rows)


def _wall_times(run: RunData) -> list[Block]:
    groups: dict[str, list[StageState]] = {}
    for s in run.stages:
        groups.setdefault(s.node.stage, []).append(s)
    rows = []
    for stage, states in groups.items():
        built = [s for s in states if s.wall_seconds is not None]
        total = sum(s.wall_seconds or 0.0 for s in built) if built else None
        instances = "; ".join(f"{s.node.instance}: {format_seconds(s.wall_seconds)}" for s in built) or "none built"
        rows.append((stage, f"{len(built)} of {len(states)}", format_seconds(total), instances))
    total = sum(s.wall_seconds or 0.0 for s in run.stages)
    return [
        Heading(2, "Wall time per stage"),
        Para(f"Sum of every built stage's wall time: {format_seconds(total)} (stages may have run in parallel)."),
        Table(("Stage", "Built", "Total", "Instances"), rows),
    ]


def _stages(run: RunData) -> list[Block]:
    rows = [
        (
            s.node.stage,
            s.node.instance,
            s.status,
            format_seconds(s.wall_seconds) if s.built else "–",
            Code(s.node.key),
            Code(s.manifest.content_hash[:16]) if s.manifest is not None else "–",
        )
        for s in run.stages
    ]
    return [
        Heading(2, "Stages"),
        Para("Every stage instance of the spec with its key (the artifact folder under artifacts/<stage>/)."),
        Table(("Stage", "Instance", "Status", "Wall time", "Key", "Content hash"), rows),
    ]


def _demote(blocks: list[Block]) -> list[Block]:
    return [Heading(b.level + 1, b.text) if isinstance(b, Heading) else b for b in blocks]


def _relabel_hours(table: Table, unit: str) -> Table:
    """The audit's derived table with its device-hours row named in this run's unit."""
    rows = [(_sentence(unit), *row[1:]) if str(row[0]).lower() in HOURS_LABELS else row for row in table.rows]
    return Table(table.headers, rows)


def _audit(run: RunData) -> list[Block]:
    result = run.audit
    d = to_dict(result)
    s = d["summary"]
    derived = [
        _relabel_hours(b, device_hours_unit(run.spec.hardware.accelerator))
        for b in audit_report._derived(result, d["derived"])
        if isinstance(b, Table)
    ]
    return [
        Heading(2, "Audit"),
        Para(
            f"{s['error']} errors, {s['warning']} warnings, {s['info']} info; {len(d['ignored'])} silenced "
            f"(runlib audit {run.spec_path} --format html for the full audit report)."
        ),
        Heading(3, "Key derived numbers"),
        *derived,
        *_demote(audit_report._findings(d)),
    ]


# --- plots ---------------------------------------------------------------------------------------


def _finite_xy(records: list[dict[str, Any]], get: Callable[[dict[str, Any]], Any]) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for r in records:
        x, y = r.get("tokens"), get(r)
        if _is_number(x) and _is_number(y):
            xs.append(float(x))
            ys.append(float(y))
    return xs, ys


def _extent(run: RunData, xs: list[float]) -> float:
    return max([float(run.plan.tokens_total), *xs, 1.0])


def _token_axis(ax: Any, run: RunData, xs: list[float]) -> None:
    extent = _extent(run, xs)
    plots._phase_lines(ax, plots._phase_bounds_tokens(run.plan), extent)
    plots._count_axis(ax.xaxis)
    ax.set_xlim(0, extent * 1.02)  # room for the markers at the run's end
    ax.grid(alpha=0.3)


def _heldout_points(run: RunData, source: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for p in run.phases:
        data = p.eval_data or {}
        loss = (((data.get("heldout") or {}).get(source)) or {}).get("loss")
        x = data.get("tokens") if _is_number(data.get("tokens")) else p.plan.span.end_tokens
        if _is_number(loss):
            xs.append(float(x))
            ys.append(float(loss))
    return xs, ys


def smoothing_half_life_tokens(run: RunData) -> float:
    """The loss EMA's half-life in tokens: SMOOTH_HALF_LIFE_FRACTION of the run's planned tokens."""
    return max(SMOOTH_HALF_LIFE_FRACTION * float(run.plan.tokens_total), 1.0)


def smoothed_loss(
    run: RunData, get: Callable[[dict[str, Any]], Any] = lambda r: r.get("loss")
) -> tuple[list[float], list[float]]:
    """(tokens, EMA of get(record)) over every phase's records, the EMA restarted at each phase start."""
    half_life = smoothing_half_life_tokens(run)
    xs_out: list[float] = []
    ys_out: list[float] = []
    for p in run.phases:
        kept = [r for r in p.records if _is_number(r.get("tokens")) and _is_number(get(r))]
        xs = [float(r["tokens"]) for r in kept]
        covered = [r.get("interval_tokens") if _is_number(r.get("interval_tokens")) else None for r in kept]
        xs_out += xs
        ys_out += ema_over_tokens(
            xs, [float(get(r)) for r in kept], half_life, float(p.plan.span.start_tokens), covered
        )
    return xs_out, ys_out


def plot_loss(run: RunData, path: Path) -> Path:
    fig, (ax,) = plots._figure(height=5.0)
    records = run.records()
    sources = run.source_names()
    colours = plots._colours(sources)
    xs, ys = _finite_xy(records, lambda r: r.get("loss"))
    heldout = {s: _heldout_points(run, s) for s in sources}
    if not xs and not any(hx for hx, _ in heldout.values()):
        plots._empty(ax, "no training metrics or evaluations yet")
    else:
        all_x = list(xs)
        half_life = format_count(smoothing_half_life_tokens(run))
        if xs:
            ax.plot(xs, ys, color="0.6", lw=0.7, marker=".", ms=2, label="train: total, raw", zorder=2)
            sx, sy = smoothed_loss(run)
            ax.plot(sx, sy, color="black", lw=1.6, label=f"train: total, EMA (half-life {half_life} tokens)", zorder=3)
        for s in sources:
            sx, sy = smoothed_loss(run, lambda r, s=s: (r.get("loss_by_source") or {}).get(s))
            if sx:
                ax.plot(sx, sy, color=colours[s], lw=1.0, alpha=0.9, label=f"train: {s}, EMA", zorder=2)
        for s in sources:
            hx, hy = heldout[s]
            if hx:
                all_x += hx
                ax.scatter(
                    hx, hy, marker="D", s=40, color=colours[s], edgecolors="black", zorder=4, label=f"held-out: {s}"
                )
        uniform = math.log(run.plan.vocab_rows) if run.plan.vocab_rows > 1 else None
        if uniform is not None:
            ax.axhline(
                uniform, color="tab:red", lw=0.9, ls="--", zorder=1, label=f"uniform guess ln({run.plan.vocab_rows})"
            )
        _token_axis(ax, run, all_x)
        ax.set_xlabel("tokens seen")
        ax.set_ylabel("loss (nats per token)")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    ax.set_title(f"Loss: {run.spec.name}", fontsize=11)
    plots._save(fig, path)
    return Path(path)


def plot_lr(run: RunData, path: Path) -> Path:
    plots._save(draw_lr(run), path)
    return Path(path)


def draw_lr(run: RunData) -> Any:
    """plot_lr's figure, not yet saved: the logged LR over the plan's (plots.lr_curve, lr_scale applied)."""
    fig, (ax,) = plots._figure()
    records = run.records()
    xs, ys = _finite_xy(records, lambda r: r.get("lr"))
    sched_x, _, sched_y = plots.lr_curve(run.plan)
    if not xs and not sched_x:
        plots._empty(ax, "no learning rates logged and no schedule")
    else:
        if sched_x:
            ax.plot(sched_x, sched_y, color="0.45", lw=0.8, label="plan schedule", zorder=2)
        if xs:
            ax.plot(xs, ys, color="tab:blue", lw=1.6, marker=".", ms=3, label="logged", zorder=3)
        else:
            ax.text(0.5, 0.5, "no learning rate logged yet", ha="center", transform=ax.transAxes, color="0.4")
        _token_axis(ax, run, xs)
        top = max([*ys, *sched_y, 0.0])
        ax.set_ylim(0, top * 1.08 or 1.0)
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
        ax.set_xlabel("tokens seen")
        ax.set_ylabel("learning rate")
        ax.legend(fontsize=8, loc="lower left")
    ax.set_title("Learning rate: logged and planned", fontsize=11)
    return fig


def plot_throughput(run: RunData, path: Path) -> Path:
    fig, (ax_t, ax_m) = plots._figure(rows=2, height=6.0)
    records = run.records()
    tx, ty = _finite_xy(records, lambda r: r.get("tokens_per_s"))
    mx, my = _finite_xy(records, lambda r: r.get("mfu"))
    for ax, x, y, label, colour in (
        (ax_t, tx, ty, "tokens / s", "tab:green"),
        (ax_m, mx, my, "MFU", "tab:purple"),
    ):
        if not x:
            plots._empty(ax, f"no {label} logged yet")
            continue
        ax.plot(x, y, color=colour, lw=1.2, marker=".", ms=4)
        _token_axis(ax, run, x)
        ax.set_ylim(bottom=0, top=max(y) * 1.15 or 1.0)
        ax.set_ylabel(label)
    if ty:
        plots._count_axis(ax_t.yaxis)
    ax_m.set_xlabel("tokens seen")
    ax_t.set_title("Throughput: the phase's average so far", fontsize=11)
    plots._save(fig, path)
    return Path(path)


PLOTTERS: dict[str, Callable[[RunData, Path], Path]] = {
    "loss.png": plot_loss,
    "lr.png": plot_lr,
    "throughput.png": plot_throughput,
}


def write_plots(run: RunData, out_dir: Path) -> list[Path]:
    paths = [PLOTTERS[name](run, Path(out_dir) / name) for name, _, _ in PLOTS]
    if run.spec.ladder is not None:
        from runlib.ladder.report import PLOT, plot_ladder

        paths.append(plot_ladder(run, Path(out_dir) / PLOT))
    return paths


# --- the report ----------------------------------------------------------------------------------


def default_run_report_dir(spec: RunSpec, spec_path: str | Path | None = None) -> Path:
    """reports/<run>/run for the run's own spec file, reports/<run>/run-<file stem> for another file of the
    same run name (a variant): runlib.util.report_dirs.report_dir, the audit report's rule."""
    return report_dir(spec.name, spec_path, "run")


def write_run_report(spec_path: str, out_dir: Path | None = None) -> Path:
    """Write the run report of the spec at spec_path (report.md, report.html, loss/lr/throughput PNGs)
    into out_dir (default: default_run_report_dir); returns out_dir.

    An existing out_dir is replaced only once the new report is complete."""
    return write_report_of(collect_run(spec_path), out_dir)


def write_report_of(run: RunData, out_dir: Path | None = None) -> Path:
    """write_run_report for a run already collected; the reports of other spec files of the same run name
    beside it are listed with links (runlib.report.siblings)."""
    out_dir = Path(out_dir) if out_dir is not None else default_run_report_dir(run.spec, run.spec_path)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{out_dir.name}-", dir=out_dir.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private (0700); a report is meant to be shared
        write_plots(run, tmp)
        summary = siblings.run_summary(run)
        blocks = build_blocks(run)
        blocks[_after_header(blocks) : _after_header(blocks)] = siblings.sibling_blocks(
            summary, siblings.sibling_summaries(out_dir)
        )
        siblings.write_summary(tmp, summary)
        (tmp / MARKDOWN).write_text(render_markdown(blocks), encoding="utf-8")
        (tmp / HTML).write_text(render_html(blocks, f"Run report: {run.spec.name}"), encoding="utf-8")
        audit_report._swap_into_place(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def _after_header(blocks: list[Block]) -> int:
    """The index of the first second-level heading (the sections after the header)."""
    return next((i for i, b in enumerate(blocks) if isinstance(b, Heading) and b.level == 2), len(blocks))


def main_report(spec_path: str, out: str | Path | None = None, track: bool = False) -> int:
    """`runlib report SPEC [--out DIR] [--track]`: write the run report and print where; with track,
    also log it as artifacts of the spec's MLflow parent run (under report/). Exit status 0, also for
    a run not finished yet (stderr says how many stages are missing)."""
    run = collect_run(spec_path)
    path = write_report_of(run, Path(out) if out else None)
    print(f"run report: {path / HTML}")
    if run.missing:
        print(
            f"runlib report: the run is incomplete: {len(run.missing)} of {len(run.stages)} stages not built",
            file=sys.stderr,
        )
    if track:
        from runlib.track.mlflow_track import log_report

        log_report(run.spec, spec_path, path)
    return 0
