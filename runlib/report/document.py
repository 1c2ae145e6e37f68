"""The run report's document: what a run of a spec produced, as blocks (headings, paragraphs, tables, figures).

`build_blocks(run)` turns a collected run (runlib.report.collect) into the format-neutral blocks of the audit
report (runlib.audit.render.report), which renders them to report.md and report.html alike.

Numbers a reader could misread are qualified where they are shown: multiple-choice accuracy sits beside its
chance level (from the items: eval.json's chance_acc); a task that got fewer examples than it asked for says
how many and why (eval.json's examples_cap); device-hours are "core-hours" on a CPU run (hardware.accelerator
cpu: one device is one core) and "GPU-hours" on a GPU; the audit's refit loss prediction is shown only
inside the range it was fitted on (runlib.plan.scaling.predict_loss).
"""

from __future__ import annotations

import math

from runlib import __version__
from runlib.audit.render.json_view import audit_view, device_hours_unit
from runlib.audit.render.report import (
    Block,
    Code,
    Heading,
    Image,
    Para,
    Table,
    derived_blocks,
    findings_blocks,
    sentence_case,
)
from runlib.report.collect import BranchRun, JsonObject, RunData, StageState, is_number, json_object
from runlib.report.curation_section import curation_blocks
from runlib.report.experts_section import expert_blocks
from runlib.report.ladder_section import ladder_blocks
from runlib.report.plots import PLOTS
from runlib.spec.units import format_count
from runlib.store.keys import spec_key

__all__ = [
    "CHANCE_METRICS",
    "HELDOUT_METRICS",
    "TASK_INFO_KEYS",
    "TASK_METRIC_ORDER",
    "audit_blocks",
    "branch_table",
    "build_blocks",
    "format_seconds",
]

HELDOUT_METRICS = (
    ("loss", "Held-out loss", ".4f"),
    ("perplexity", "Held-out perplexity", ".2f"),
    ("bits_per_byte", "Held-out bits per byte", ".4f"),
)
TASK_METRIC_ORDER = ("acc", "acc_norm", "loglik_mean", "loglik_per_token")
TASK_INFO_KEYS = ("kind", "n", "chance_acc", "examples_requested", "examples_cap")  # not metrics
CHANCE_METRICS = ("acc", "acc_norm")  # compared with chance_acc


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


def _fmt(x: object, spec: str = ".4g") -> str:
    return format(float(x), spec) if is_number(x) else "n/a"


def _count(x: object) -> str:
    return format_count(x) if is_number(x) else "n/a"


def _int(x: object) -> str:
    return f"{int(x):,}" if is_number(x) else "n/a"


def _size(x: object) -> int:
    """How many entries a JSON list (or object) has; 0 for anything else."""
    return len(x) if isinstance(x, (list, dict)) else 0


def _items(x: object) -> list[object]:
    """A JSON list's items; [] for anything else."""
    return list(x) if isinstance(x, list) else []


def _tasks(data: JsonObject | None) -> JsonObject:
    """eval.json's tasks: task name -> its result ({} for none)."""
    return json_object((data or {}).get("tasks"))


# --- content -------------------------------------------------------------------------------------


def build_blocks(run: RunData) -> list[Block]:
    """The report's content, format-neutral (rendered by the audit report's renderers)."""
    return [
        *_header(run),
        *curation_blocks(run),
        *_training(run),
        *expert_blocks(run),
        *_evaluation(run),
        *_branches(run),
        *_plan_vs_measured(run),
        *_wall_times(run),
        *_stages(run),
        *audit_blocks(run),
        *_ladder(run),
        Heading(2, "Plots"),
        *(Image(file, title, caption) for file, title, caption in PLOTS),
    ]


def _ladder(run: RunData) -> list[Block]:
    """The scaling ladder's rungs, fits and prediction (runlib.report.ladder_section), for a spec with a ladder."""
    return ladder_blocks(run) if run.spec.ladder is not None else []


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
            if is_number(end_step) and end_step >= span.start_step
            else _int(end_step)
        )
        tokens = (
            f"{format_count(end_tokens - span.start_tokens)} (to {format_count(end_tokens)})"
            if is_number(end_tokens) and end_tokens >= span.start_tokens
            else _count(end_tokens)
        )
        spikes = counts.get("spikes")
        if spikes is None and p.spikes is not None:
            spikes = _size(p.spikes.get("spikes"))
        skipped = _size((p.spikes or {}).get("skipped_data_steps"))
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
        mesh = json_object(details.get("mesh"))
        memory = json_object(details.get("memory"))
        peaks = [x for x in _items(memory.get("measured_peak_bytes_per_rank")) if is_number(x)]
        estimate = memory.get("estimate_bytes_per_device")
        processes, wall = counts.get("processes"), p.train.wall_seconds if p.train is not None else None
        rows.append(
            (
                p.name,
                " x ".join(f"{k} {v}" for k, v in mesh.items() if v != 1) or "1 process",
                _fmt(wall * processes / 3600, ".3g") if is_number(processes) and wall is not None else "–",
                _fmt(p.plan.hours * p.plan.settings.devices, ".3g"),
                _count(counts.get("tokens_per_s")),
                _fmt(counts.get("mfu"), ".3f"),
                _fmt(run.spec.hardware.mfu, ".3f"),
                f"{max(peaks) / 2**20:,.0f} MiB ({memory.get('measured_kind', '?')})" if peaks else "–",
                f"{estimate / 2**20:,.0f} MiB" if is_number(estimate) else "–",
                _fmt(estimate / max(peaks), ".2f") if peaks and is_number(estimate) else "–",
            )
        )
    if not rows:
        return []
    unit = device_hours_unit(run.spec.hardware.accelerator)
    headers: tuple[str, ...] = ("Phase", "Mesh", sentence_case(unit), f"Planned {unit}", "Tokens/s", "MFU")
    headers += ("Planned MFU", "Peak memory", "Planned memory", "Plan/measured")
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
                entry = json_object(json_object((p.eval_data or {}).get("heldout")).get(source))
                cells.append(_fmt(entry.get(metric), spec) if p.eval_data is not None else "–")
            rows.append((source, *cells))
        blocks += [Heading(3, title), Table(("Source", *heads), rows)]

    kinds: dict[str, str] = {}  # task name -> its kind, in first-seen order
    metrics: dict[str, list[str]] = {}  # task name -> the metrics its results record
    for p in evaluated:
        for name, result in _tasks(p.eval_data).items():
            kinds.setdefault(name, "")
            metrics.setdefault(name, [])
            if isinstance(result, dict):
                kinds[name] = kinds[name] or str(result.get("kind", ""))
                metrics[name] += [k for k, v in result.items() if k not in TASK_INFO_KEYS and is_number(v)]
    if not kinds:
        return [*blocks, Heading(3, "Tasks"), Para("No task results.")]
    rows, caps = [], []
    for name, kind in kinds.items():
        names = list(dict.fromkeys(metrics[name]))
        names.sort(key=lambda m: TASK_METRIC_ORDER.index(m) if m in TASK_METRIC_ORDER else len(TASK_METRIC_ORDER))
        results = [_tasks(p.eval_data).get(name) for p in evaluated]
        latest = json_object(next((r for r in reversed(results) if isinstance(r, dict)), {}))  # the last one's
        n, requested = latest.get("n"), latest.get("examples_requested")
        examples = _int(n)
        if is_number(n) and is_number(requested) and requested > n:
            examples = f"{int(n):,} of {int(requested):,} requested"
        if latest.get("examples_cap"):
            caps.append(f"{name}: {latest['examples_cap']}.")
        chance = latest.get("chance_acc")
        for metric in names:
            cells = [_fmt(r.get(metric), ".4f") if isinstance(r, dict) else "–" for r in results]
            level = (_fmt(chance, ".4f") if is_number(chance) else "n/a") if metric in CHANCE_METRICS else "–"
            rows.append((name, kind, metric, examples, level, *cells))
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
            f"end of the phase before it), and their soup where the spec averages them (no tokens of its own). "
            f"Held-out loss per source and task scores from each one's eval.json "
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
        entry = json_object(json_object(b.eval_data.get("heldout")).get(source))
        return _fmt(entry.get("loss"), ".4f")

    tasks: dict[str, str] = {}  # task -> its headline metric
    for b in branches:
        for name, result in _tasks(b.eval_data).items():
            if isinstance(result, dict) and name not in tasks:
                metrics = [k for k, v in result.items() if k not in TASK_INFO_KEYS and is_number(v)]
                ordered = [m for m in TASK_METRIC_ORDER if m in metrics] + metrics
                if ordered:
                    tasks[name] = ordered[0]

    def task(b: BranchRun, name: str) -> str:
        result = _tasks(b.eval_data).get(name)
        return _fmt(result.get(tasks[name]), ".4f") if isinstance(result, dict) else "–"

    def measured(b: BranchRun) -> str:
        manifest = b.train.manifest if b.train is not None and b.train.built else None
        processes = manifest.counts.get("processes") if manifest is not None else None
        wall = b.train.wall_seconds if b.train is not None else None
        return _fmt(wall * processes / 3600, ".3g") if is_number(processes) and wall is not None else "–"

    rows = [(f"held-out loss: {s}", *(heldout(b, s) for b in branches)) for s in sources]
    rows += [(f"{name} ({metric})", *(task(b, name) for b in branches)) for name, metric in tasks.items()]
    rows += [
        ("tokens", *("–" if b.soup else _count(b.plan.tokens) for b in branches)),
        (f"planned {unit}", *("–" if b.soup else _fmt(b.plan.hours * b.devices, ".3g") for b in branches)),
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


def audit_blocks(run: RunData) -> list[Block]:
    """The run's audit as `runlib audit` reports it (the JSON view, json_view.audit_view): the counts, the
    derived table (runlib.audit.render.report.derived_blocks) and the findings, a level down."""
    result = run.audit
    view = audit_view(result)
    assert view.derived is not None  # an audited spec has a plan: only a load failure has none
    s = view.summary
    derived = [b for b in derived_blocks(result, view.derived) if isinstance(b, Table)]
    return [
        Heading(2, "Audit"),
        Para(
            f"{s.error} errors, {s.warning} warnings, {s.info} info; {len(view.ignored)} silenced "
            f"(runlib audit {run.spec_path} --format html for the full audit report)."
        ),
        Heading(3, "Key derived numbers"),
        *derived,
        *_demote(findings_blocks(view)),
    ]
