"""The JSON view: a stable contract other tools and tests read (`runlib audit --format json`).

The contract is the dataclasses below: each field is one key of the output, in the order declared, and the
output is `dataclasses.asdict` of an `AuditView` (`to_dict`), so no key is written by hand and none can be
misnamed or left out on one path only. Keys are only ever added. Byte counts are bytes, token counts tokens,
times hours or days as named; JSON has no inf/nan, so a field typed `float | None` is None where the plan's
number is not finite.

Every field of the plan's dataclasses is either shown (a view field of the same name, or under the view key
named in SHOWN_AS) or listed in NOT_SHOWN with the reason; `uncovered_plan_fields()` names any that is
neither, and the test suite requires it to name none (tests/audit/test_json_view.py), so a field added to
the plan is a decision about the contract, not an omission.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields

from runlib import __version__
from runlib.audit import AuditResult, Ignored
from runlib.audit.registry import Finding, JsonValue, Severity
from runlib.audit.render.numbers import days_text, device_hours_unit, hours_text
from runlib.errors import Diagnostic
from runlib.plan import Plan
from runlib.plan.derive import CheckpointPlan, PhasePlan, SourcePlan
from runlib.plan.effective import PhaseSettings
from runlib.plan.flops import CONVENTION
from runlib.plan.memory import MemoryBreakdown
from runlib.plan.moe import MoePhasePlan
from runlib.plan.params import ParamCounts
from runlib.plan.scaling import References
from runlib.plan.schedule import Schedule
from runlib.plan.timeline import PhaseSpan, Segment
from runlib.spec.hardware import Accelerator, device_memory_text

__all__ = [
    "NOT_SHOWN",
    "SCHEMA_VERSION",
    "SHOWN_AS",
    "AcceleratorView",
    "AuditView",
    "CheckpointView",
    "DerivedView",
    "FindingView",
    "FlopsView",
    "IgnoredView",
    "LadderPredictionView",
    "MemoryBytesView",
    "ParamsView",
    "PhaseView",
    "ReferencesView",
    "ScheduleView",
    "SegmentView",
    "SourceView",
    "SummaryView",
    "audit_view",
    "days_text",
    "derived",
    "device_hours_unit",
    "hours_text",
    "ladder_prediction",
    "load_failure_dict",
    "load_failure_view",
    "derived_view",
    "render",
    "render_load_failure",
    "to_dict",
    "uncovered_plan_fields",
]

SCHEMA_VERSION = 1


def _num(x: float | None) -> float | None:
    """JSON has no inf/nan: map them to None (an int stays an int)."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return None
    return x


def _scalar(x: object) -> JsonValue:
    """A plan value that is a JSON scalar as it is (a non-finite float as None); anything else is refused
    (TypeError) rather than written as something the contract does not describe."""
    if x is None or isinstance(x, (str, bool, int)):
        return x
    if isinstance(x, float):
        return _num(x)
    raise TypeError(f"not a JSON scalar: {x!r} ({type(x).__name__})")


# --- the contract: derived.* ---------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ParamsView:
    """derived.params: parameter counts (runlib.plan.params.ParamCounts)."""

    total: int
    embedding: int
    non_embedding: int
    per_layer: int
    active: int
    """parameters one token passes through: total less the routed experts it skips (= total when dense)"""
    expert: int
    """the routed experts' parameters, all layers (0 when dense)"""
    mtp: int
    """the multi-token prediction modules' parameters, trained beside the model and not in total"""


@dataclass(frozen=True, kw_only=True)
class FlopsView:
    """derived.flops: training FLOPs of the whole run in the PaLM convention, and the two others."""

    total: float | None
    per_token: float | None
    convention: str
    kaplan_6nd: float | None
    megatron_causal: float | None


@dataclass(frozen=True, kw_only=True)
class AcceleratorView:
    """derived.accelerator: the device the plan assumes (runlib.spec.hardware.Accelerator) and its MFU."""

    key: str
    memory_gib: float
    memory_basis: str  # "": the catalog's figure
    memory_text: str
    peak_tflops: dict[str, float]
    mfu: float


@dataclass(frozen=True, kw_only=True)
class ScheduleView:
    """derived.schedule: the LR schedule over the run's tokens (runlib.plan.schedule.Schedule)."""

    kind: str
    peak_lr: float
    floor_lr: float
    warmup_tokens: float | None
    decay_start_tokens: float | None
    decay_end_tokens: float | None


@dataclass(frozen=True, kw_only=True)
class SegmentView:
    """derived.phases[].segments[]: a stretch of a phase at constant tokens per step."""

    start_tokens: int
    start_step: int
    tokens_per_step: int
    steps: int


@dataclass(frozen=True, kw_only=True)
class MoePhaseView:
    """derived.phases[].moe: a mixture of experts' traffic in the phase (runlib.plan.moe.MoePhasePlan), per device."""

    moe_layers: int
    moe_layers_per_device: float
    tokens_per_expert_per_step: float | None
    all_to_all_bytes_per_step: float | None
    all_to_all_seconds_per_step: float | None
    compute_seconds_per_step: float | None
    ep_nodes: int
    capacity_drop_share: float | None


@dataclass(frozen=True, kw_only=True)
class MemoryBytesView:
    """derived.phases[].memory_breakdown_bytes: the parts MemoryBreakdown.total sums (its as_dict)."""

    weights: float | None
    master_weights: float | None
    gradients: float | None
    optimizer_states: float | None
    activations: float | None
    logits: float | None
    buffers: float | None
    runtime_overhead: float | None
    fragmentation: float | None


@dataclass(frozen=True, kw_only=True)
class PhaseView:
    """derived.phases[]: one phase of the plan (runlib.plan.derive.PhasePlan, its span and settings)."""

    name: str
    kind: str
    tokens: int
    nominal_tokens: float | None
    drift_tokens: float | None
    steps: int
    start_tokens: int
    end_tokens: int
    start_step: int
    end_step: int
    tokens_per_step: int
    segments: list[SegmentView]
    seq_len: int
    rope_theta: float
    micro_batch: int
    grad_accum: int
    data_parallel: int
    nodes: int  # the phase's machines (phases[].hardware, else hardware)
    devices_per_node: int
    parallelism: dict[str, JsonValue]
    lr_start: float
    lr_end: float
    lr_scale: float  # phases[].optimizer.lr_scale, already in lr_start and lr_end
    mixture: dict[str, float]
    source_tokens: dict[str, float | None]
    flops: float | None
    flops_per_token: float | None
    hours: float | None
    memory_bytes_per_device: float | None
    memory_device_reported_bytes: float | None
    memory_breakdown_bytes: MemoryBytesView
    memory_assumptions: dict[str, JsonValue]
    moe: MoePhaseView | None  # with model.moe: expert traffic (runlib.plan.moe.MoePhasePlan)


@dataclass(frozen=True, kw_only=True)
class SourceView:
    """derived.sources[]: a data source's tokens and epochs over the run (runlib.plan.derive.SourcePlan)."""

    name: str
    tokens_available: int | None
    tokens_used: float | None
    epochs: float | None


@dataclass(frozen=True, kw_only=True)
class CheckpointView:
    """derived.checkpoint: checkpoint size, cost and interval (runlib.plan.derive.CheckpointPlan)."""

    size_bytes: float | None
    write_seconds: float | None
    interval_tokens: float | None
    interval_steps: float | None
    interval_hours: float | None
    job_mtbf_hours: float | None
    young_optimum_hours: float | None
    count: int
    stall_seconds: float | None


@dataclass(frozen=True, kw_only=True)
class ReferencesView:
    """derived.references: the published fits at this run's size (runlib.plan.scaling.References)."""

    tokens_per_param: float | None
    chinchilla_tokens_per_param: float
    optimal_params: float | None
    optimal_tokens: float | None
    optimal_batch_tokens: float | None
    optimal_lr: float | None
    predicted_loss: float | None
    predicted_loss_note: str  # predicted_loss None: why (outside the fitted range)


@dataclass(frozen=True, kw_only=True)
class LadderPredictionView:
    """derived.ladder_prediction: the held-out loss the spec's built fit_ladder artifact predicts for this run
    (runlib.graph.measured.ladder_prediction); `withheld`: why not to use it, or None."""

    loss: float | None
    low: float | None
    high: float | None
    resamples: int
    source: str  # "fit_ladder <key>"
    withheld: str | None


@dataclass(frozen=True, kw_only=True)
class DerivedView:
    """derived: the plan's numbers, then (ladder_prediction) what the spec's built artifacts predict."""

    params: ParamsView
    vocab_rows: int
    tokenizer_ids: int
    tokens_total: int
    steps_total: int
    flops: FlopsView
    gpu_hours: float | None
    device_hours_unit: str  # gpu_hours' unit in words
    wall_days: float | None
    devices: int
    data_parallel: int
    accelerator: AcceleratorView
    schedule: ScheduleView
    phases: list[PhaseView]
    sources: list[SourceView]
    checkpoint: CheckpointView
    references: ReferencesView
    ladder_prediction: LadderPredictionView | None  # None: no ladder, or its fit not built here


# --- the contract: the document ------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class FindingView:
    """findings[]: one finding of a check (runlib.audit.registry.Finding)."""

    code: str
    severity: Severity
    path: str
    line: int | None
    col: int | None
    message: str
    fix: str
    value: JsonValue  # the corrected value, when there is exactly one


@dataclass(frozen=True, kw_only=True)
class IgnoredView(FindingView):
    """ignored[]: a finding that audit.ignore silenced, with the reason given there."""

    reason: str


@dataclass(frozen=True, kw_only=True)
class SummaryView:
    """summary: how many findings of each severity (silenced ones not counted)."""

    error: int
    warning: int
    info: int


@dataclass(frozen=True, kw_only=True)
class AuditView:
    """The whole document. `derived` is None and exit_code 2 for a spec that does not load."""

    schema_version: int
    runlib_version: str
    file: str
    name: str | None
    exit_code: int
    summary: SummaryView
    derived: DerivedView | None
    findings: list[FindingView]
    ignored: list[IgnoredView]


# --- what of the plan is shown where -------------------------------------------------------------

# plan (or audit) class -> the view class whose same-named fields show it
VIEW_OF: dict[type, type] = {
    ParamCounts: ParamsView,
    Accelerator: AcceleratorView,
    Schedule: ScheduleView,
    Segment: SegmentView,
    MemoryBreakdown: MemoryBytesView,
    PhasePlan: PhaseView,
    MoePhasePlan: MoePhaseView,
    PhaseSpan: PhaseView,
    PhaseSettings: PhaseView,
    SourcePlan: SourceView,
    CheckpointPlan: CheckpointView,
    References: ReferencesView,
    Plan: DerivedView,
    Finding: FindingView,
    Ignored: IgnoredView,
    AuditResult: AuditView,
}

# "Class.field" -> the view keys that show it under other names
SHOWN_AS: dict[str, str] = {
    "Plan.flops_total": "flops.total",
    "Plan.flops_kaplan": "flops.kaplan_6nd",
    "Plan.flops_causal": "flops.megatron_causal",
    "PhasePlan.settings": "phases[].seq_len, rope_theta, micro_batch, grad_accum, data_parallel, parallelism, mixture",
    "PhasePlan.span": "phases[].nominal_tokens, drift_tokens, start_tokens, end_tokens, start_step, end_step, segments",
    "PhasePlan.memory": "phases[].memory_bytes_per_device, memory_device_reported_bytes, memory_breakdown_bytes, "
    "memory_assumptions",
    "PhaseSettings.phase": "phases[].mixture (the phase's spec: the rest is in the spec file)",
    "MemoryBreakdown.allocator_cache": "phases[].memory_device_reported_bytes (memory_bytes_per_device + it)",
    "MemoryBreakdown.assumptions": "phases[].memory_assumptions",
    "Ignored.finding": "ignored[]: the finding's keys beside reason",
    "AuditResult.spec": "name",
    "AuditResult.plan": "derived",
    "AuditResult.ladder_prediction": "derived.ladder_prediction",
}

# "Class.field" -> why the JSON view leaves it out
NOT_SHOWN: dict[str, str] = {
    "ParamCounts.matmul": "internal to the FLOP count (derived.flops.per_token)",
    "ParamCounts.layers_total": "internal to the memory plan (non_embedding less the final norms)",
    "ParamCounts.expert_per_layer": "internal to the memory plan (expert over the MoE layers)",
    "Accelerator.description": "prose for people; the key names the device",
    "Accelerator.runtime_overhead_gib": "inside each phase's memory_breakdown_bytes.runtime_overhead",
    "Schedule.run_tokens": "derived.tokens_total",
    "Schedule.levels": "the multistep levels as the spec's schedule section writes them",
    "PhaseSpan.index": "the phase's position in derived.phases",
    "PhaseSettings.index": "the phase's position in derived.phases",
    "PhaseSettings.global_batch": "the declared batch; the effective one is tokens_per_step",
    "PhaseSettings.batch_overridden": "a fact about the spec, not a number of the plan",
    "PhaseSettings.devices": "derived.phases[].nodes x devices_per_node",
    "PhaseSettings.model_parallel": "the product of the phase's parallelism degrees",
    "PhaseSettings.optimizer": "the spec's optimizer with the phase's override: the spec file (lr_scale is shown)",
    "PhasePlan.lr_path": "the phase's own LR path, drawn in lr_start and lr_end (the spec file holds its fields)",
    "PhaseSettings.rope_scaling": "the phase's RoPE frequency scaling as the spec file writes it (no derived number)",
    "SourcePlan.tokens_basis": "how tokens_available was counted: the text view's 'tokens counted' column",
    "CheckpointPlan.write_gb_per_s": "inside write_seconds",
    "CheckpointPlan.mtbf_basis": "prose for findings' messages",
    "References.deepseek_compute": "the C the DeepSeek fits are read at, inside optimal_batch_tokens and optimal_lr",
    "References.extrapolated_loss": "predicted_loss outside the fitted range, deliberately not shown",
    "Plan.spec": "the spec file itself (the document's file)",
    "Plan.warmup_tokens": "derived.schedule.warmup_tokens",
    "Plan.decay_tokens": "derived.schedule.decay_start_tokens and decay_end_tokens",
    "Ignored.entry": "the audit.ignore key; the reason is shown",
}


def uncovered_plan_fields() -> list[str]:
    """'Class.field' of each field of a class in VIEW_OF that its view neither shows by name nor lists in
    SHOWN_AS or NOT_SHOWN, then each SHOWN_AS or NOT_SHOWN entry that names no such field ([]: all covered)."""
    problems: list[str] = []
    named: set[str] = set()
    for cls, view in VIEW_OF.items():
        shown = {f.name for f in fields(view)}
        for f in fields(cls):
            name = f"{cls.__name__}.{f.name}"
            named.add(name)
            if f.name not in shown and name not in SHOWN_AS and name not in NOT_SHOWN:
                problems.append(f"{name}: not in {view.__name__}, SHOWN_AS or NOT_SHOWN")
    problems += [f"{name}: no such field" for name in [*SHOWN_AS, *NOT_SHOWN] if name not in named]
    return problems


# --- projection ----------------------------------------------------------------------------------


def _phase_view(p: PhasePlan) -> PhaseView:
    s, span, memory = p.settings, p.span, p.memory
    return PhaseView(
        name=p.name,
        kind=p.kind,
        tokens=p.tokens,
        nominal_tokens=_num(span.nominal_tokens),
        drift_tokens=_num(span.drift_tokens),
        steps=p.steps,
        start_tokens=span.start_tokens,
        end_tokens=span.end_tokens,
        start_step=span.start_step,
        end_step=span.end_step,
        tokens_per_step=p.tokens_per_step,
        segments=[
            SegmentView(
                start_tokens=g.start_tokens, start_step=g.start_step, tokens_per_step=g.tokens_per_step, steps=g.steps
            )
            for g in span.segments
        ],
        seq_len=s.seq_len,
        rope_theta=s.rope_theta,
        micro_batch=s.micro_batch,
        grad_accum=s.grad_accum,
        data_parallel=s.data_parallel,
        nodes=s.nodes,
        devices_per_node=s.devices_per_node,
        parallelism=s.parallelism.model_dump(),
        lr_start=p.lr_start,
        lr_end=p.lr_end,
        lr_scale=p.lr_scale,
        mixture=dict(s.phase.mixture),
        source_tokens={k: _num(v) for k, v in p.source_tokens.items()},
        flops=_num(p.flops),
        flops_per_token=_num(p.flops_per_token),
        hours=_num(p.hours),
        memory_bytes_per_device=_num(memory.total),
        memory_device_reported_bytes=_num(memory.device_reported),
        # as_dict's keys are the view's fields: a part added to one and not the other is a TypeError here
        memory_breakdown_bytes=MemoryBytesView(**{k: _num(v) for k, v in memory.as_dict().items()}),
        memory_assumptions={k: _scalar(v) for k, v in memory.assumptions_dict().items()},
        moe=_moe_view(p.moe) if p.moe is not None else None,
    )


def _moe_view(m: MoePhasePlan) -> MoePhaseView:
    return MoePhaseView(
        moe_layers=m.moe_layers,
        moe_layers_per_device=m.moe_layers_per_device,
        tokens_per_expert_per_step=_num(m.tokens_per_expert_per_step),
        all_to_all_bytes_per_step=_num(m.all_to_all_bytes_per_step),
        all_to_all_seconds_per_step=_num(m.all_to_all_seconds_per_step),
        compute_seconds_per_step=_num(m.compute_seconds_per_step),
        ep_nodes=m.ep_nodes,
        capacity_drop_share=_num(m.capacity_drop_share) if m.capacity_drop_share is not None else None,
    )


def derived_view(plan: Plan, ladder: LadderPredictionView | None = None) -> DerivedView:
    """`derived`, typed: the plan's numbers and the ladder's prediction (`ladder_prediction(result)`)."""
    spec, params, acc, sched = plan.spec, plan.params, plan.accelerator, plan.schedule
    ck, refs = plan.checkpoint, plan.references
    return DerivedView(
        params=ParamsView(
            total=params.total,
            embedding=params.embedding,
            non_embedding=params.non_embedding,
            per_layer=params.per_layer,
            active=params.active,
            expert=params.expert,
            mtp=params.mtp,
        ),
        vocab_rows=plan.vocab_rows,
        tokenizer_ids=plan.tokenizer_ids,
        tokens_total=plan.tokens_total,
        steps_total=plan.steps_total,
        flops=FlopsView(
            total=_num(plan.flops_total),
            per_token=_num(plan.flops_per_token),
            convention=CONVENTION,
            kaplan_6nd=_num(plan.flops_kaplan),
            megatron_causal=_num(plan.flops_causal),
        ),
        gpu_hours=_num(plan.gpu_hours),
        device_hours_unit=device_hours_unit(spec.hardware.accelerator),
        wall_days=_num(plan.wall_days),
        devices=plan.devices,
        data_parallel=plan.data_parallel,
        accelerator=AcceleratorView(
            key=acc.key,
            memory_gib=acc.memory_gib,
            memory_basis=acc.memory_basis,
            memory_text=device_memory_text(acc, "each"),
            peak_tflops={k: v for k, v in acc.peak_tflops.items()},
            mfu=spec.hardware.mfu,
        ),
        schedule=ScheduleView(
            kind=sched.kind,
            peak_lr=sched.peak_lr,
            floor_lr=sched.floor_lr,
            warmup_tokens=_num(sched.warmup_tokens),
            decay_start_tokens=_num(sched.decay_start_tokens),
            decay_end_tokens=_num(sched.decay_end_tokens),
        ),
        phases=[_phase_view(p) for p in plan.phases],
        sources=[
            SourceView(
                name=s.name, tokens_available=s.tokens_available, tokens_used=_num(s.tokens_used), epochs=_num(s.epochs)
            )
            for s in plan.sources
        ],
        checkpoint=CheckpointView(
            size_bytes=_num(ck.size_bytes),
            write_seconds=_num(ck.write_seconds),
            interval_tokens=_num(ck.interval_tokens),
            interval_steps=_num(ck.interval_steps),
            interval_hours=_num(ck.interval_hours),
            job_mtbf_hours=_num(ck.job_mtbf_hours),
            young_optimum_hours=_num(ck.young_optimum_hours),
            count=ck.count,
            stall_seconds=_num(ck.stall_seconds),
        ),
        references=ReferencesView(
            tokens_per_param=_num(refs.tokens_per_param),
            chinchilla_tokens_per_param=refs.chinchilla_tokens_per_param,
            optimal_params=_num(refs.optimal_params),
            optimal_tokens=_num(refs.optimal_tokens),
            optimal_batch_tokens=_num(refs.optimal_batch_tokens),
            optimal_lr=_num(refs.optimal_lr),
            predicted_loss=_num(refs.predicted_loss),
            predicted_loss_note=refs.predicted_loss_note,
        ),
        ladder_prediction=ladder,
    )


def derived(plan: Plan) -> dict[str, JsonValue]:
    """`derived` as JSON data without ladder_prediction (which needs the built artifacts): what the plan alone
    says, as the MLflow parent run logs it (runlib.track.mlflow_track)."""
    out = asdict(derived_view(plan))
    del out["ladder_prediction"]
    return out


def _float(x: object) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError(f"not a number: {x!r}")
    return _num(x)


def ladder_prediction(result: AuditResult) -> LadderPredictionView | None:
    """The held-out loss the spec's built fit_ladder artifact predicts for this run, or None: no ladder, or
    its fit not built here. The producer's keys must be the view's (a KeyError or TypeError otherwise)."""
    p = result.ladder_prediction
    if p is None:
        return None
    if set(p) != {f.name for f in fields(LadderPredictionView)}:
        raise KeyError(f"ladder prediction keys {sorted(p)} are not {[f.name for f in fields(LadderPredictionView)]}")
    resamples, source, withheld = p["resamples"], p["source"], p["withheld"]
    if not isinstance(resamples, int) or not isinstance(source, str) or not isinstance(withheld, (str, type(None))):
        raise TypeError(f"ladder prediction of the wrong types: {dict(p)!r}")
    return LadderPredictionView(
        loss=_float(p["loss"]),
        low=_float(p["low"]),
        high=_float(p["high"]),
        resamples=resamples,
        source=source,
        withheld=withheld,
    )


def _finding_view(f: Finding) -> FindingView:
    return FindingView(
        code=f.code,
        severity=f.severity,
        path=f.path,
        line=f.line,
        col=f.col,
        message=f.message,
        fix=f.fix,
        value=f.value,
    )


def _ignored_view(i: Ignored) -> IgnoredView:
    f = i.finding
    return IgnoredView(
        code=f.code,
        severity=f.severity,
        path=f.path,
        line=f.line,
        col=f.col,
        message=f.message,
        fix=f.fix,
        value=f.value,
        reason=i.reason,
    )


def audit_view(result: AuditResult) -> AuditView:
    """The JSON document of an audit, typed (what the markdown and HTML reports read too)."""
    return AuditView(
        schema_version=SCHEMA_VERSION,
        runlib_version=__version__,
        file=result.file,
        name=result.spec.name,
        exit_code=result.exit_code(),
        summary=SummaryView(error=result.count("error"), warning=result.count("warning"), info=result.count("info")),
        derived=derived_view(result.plan, ladder_prediction(result)),
        findings=[_finding_view(f) for f in result.findings],
        ignored=[_ignored_view(i) for i in result.ignored],
    )


def to_dict(result: AuditResult) -> dict[str, JsonValue]:
    """The JSON document of an audit as JSON data: audit_view, serialized by dataclasses.asdict."""
    return asdict(audit_view(result))


def render(result: AuditResult) -> str:
    """`runlib audit --format json`."""
    return json.dumps(to_dict(result), indent=2, sort_keys=False, allow_nan=False)


def load_failure_view(file: str, diagnostics: list[Diagnostic]) -> AuditView:
    """The contract for a spec that does not load: the same keys, `derived` null, `exit_code` 2, and
    each SPEC diagnostic as an error finding (code, path, line, col, message, fix; value null)."""
    return AuditView(
        schema_version=SCHEMA_VERSION,
        runlib_version=__version__,
        file=file,
        name=None,
        exit_code=2,
        summary=SummaryView(error=len(diagnostics), warning=0, info=0),
        derived=None,
        findings=[
            FindingView(
                code=d.code,
                severity="error",
                path=d.path,
                line=d.line,
                col=d.col,
                message=d.message,
                fix=d.fix,
                value=None,
            )
            for d in diagnostics
        ],
        ignored=[],
    )


def load_failure_dict(file: str, diagnostics: list[Diagnostic]) -> dict[str, JsonValue]:
    """load_failure_view as JSON data."""
    return asdict(load_failure_view(file, diagnostics))


def render_load_failure(file: str, diagnostics: list[Diagnostic]) -> str:
    """`runlib audit --format json` for a spec that does not load."""
    return json.dumps(load_failure_dict(file, diagnostics), indent=2, allow_nan=False)
