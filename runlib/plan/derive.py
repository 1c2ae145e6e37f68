"""derive(spec) -> Plan: the numbers a planner needs, all from the spec, all pure arithmetic."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from runlib.plan import flops as F
from runlib.plan import scaling
from runlib.plan.effective import PhaseSettings, all_phase_settings, devices
from runlib.plan.memory import MemoryBreakdown, phase_layout, phase_memory, state_bytes_per_param
from runlib.plan.moe import MoePhasePlan, moe_phase_plan
from runlib.plan.params import ParamCounts, attention_flop_width, count_params, windowed_layers
from runlib.plan.schedule import PhasePath, Schedule, build_schedule, phase_lr, planned_lr
from runlib.plan.timeline import (
    PhaseSpan,
    RampStretch,
    build_timeline,
    phase_at_tokens,
    ramp_stretches,
    step_at_tokens,
    tokens_at_step,
)
from runlib.spec.hardware import Accelerator, cpu_device_memory, host_memory_bytes, interconnect_gb_per_s, resolve
from runlib.spec.models import RunSpec
from runlib.spec.units import Duration

VOCAB_PAD_MULTIPLE = 128  # Megatron's make_vocab_size_divisible_by default (vocab_utils.py), times tensor


@dataclass(frozen=True)
class PhasePlan:
    name: str
    kind: str
    settings: PhaseSettings
    span: PhaseSpan
    lr_start: float
    lr_end: float
    source_tokens: dict[str, float]
    flops_per_token: float
    flops: float
    memory: MemoryBreakdown
    hours: float  # wall-clock hours of the phase at the assumed MFU
    lr_scale: float = 1.0  # phases[].optimizer.lr_scale: the schedule's LR times this within the phase
    lr_path: PhasePath | None = None  # the phase's own LR path (phases[].optimizer.lr_decay_to, lr_rewarm)
    moe: MoePhasePlan | None = None  # with model.moe: tokens per expert, the all-to-all per step

    @property
    def tokens(self) -> int:
        return self.span.tokens

    @property
    def steps(self) -> int:
        return self.span.steps

    @property
    def tokens_per_step(self) -> int:
        return self.span.segments[-1].tokens_per_step


@dataclass(frozen=True)
class SourcePlan:
    name: str
    tokens_available: int | None
    tokens_used: float
    epochs: float | None  # None: availability unknown; inf: none available
    tokens_basis: str = "declared"  # "measured": counted in the tokenized shards; "declared": the spec's `tokens`


@dataclass(frozen=True)
class CheckpointPlan:
    size_bytes: float
    write_seconds: float
    interval_tokens: float | None
    interval_steps: float | None
    interval_hours: float | None
    job_mtbf_hours: float | None
    young_optimum_hours: float | None  # sqrt(2 * write time * MTBF), Young 1974; the write time with async_save
    count: int  # checkpoints written over the run (intervals + phase ends)
    write_gb_per_s: float = 0.0  # min(nodes x per-node bandwidth, storage bandwidth)
    mtbf_basis: str = ""  # how job_mtbf_hours was found, for messages ("" when there is none)
    stall_seconds: float = 0.0  # training time one checkpoint costs: the write, or with async_save the wait


@dataclass(frozen=True)
class Plan:
    spec: RunSpec
    accelerator: Accelerator
    vocab_rows: int
    tokenizer_ids: int  # learned vocab + reserved + domain tokens: the ids the model must embed
    params: ParamCounts
    devices: int
    phases: list[PhasePlan]
    sources: list[SourcePlan]
    schedule: Schedule
    flops_total: float
    flops_kaplan: float
    flops_causal: float
    gpu_hours: float
    wall_days: float
    checkpoint: CheckpointPlan
    references: scaling.References
    warmup_tokens: float
    decay_tokens: float | None

    @property
    def tokens_total(self) -> int:
        return self.phases[-1].span.end_tokens if self.phases else 0

    @property
    def steps_total(self) -> int:
        return self.phases[-1].span.end_step if self.phases else 0

    @property
    def data_parallel(self) -> int:
        return self.phases[0].settings.data_parallel if self.phases else 1

    @property
    def flops_per_token(self) -> float:
        return self.flops_total / self.tokens_total if self.tokens_total else 0.0

    def duration_tokens(self, duration: Duration) -> float:
        """A duration in tokens on this run's timeline."""
        if duration.unit == "percent":
            return duration.amount / 100.0 * self.spec.tokens
        if duration.unit == "steps":
            return tokens_at_step([p.span for p in self.phases], duration.amount)
        return duration.amount

    def lr_at(self, tokens: float, phase: int | None = None) -> float:
        """The planned LR of the step that ends after `tokens` (runlib.plan.schedule.planned_lr): the schedule
        times the lr_scale of `phase`, by default the phase that step belongs to (timeline.phase_at_tokens)."""
        if not self.phases:
            return planned_lr(self.schedule, tokens)
        index = phase if phase is not None else phase_at_tokens([p.span for p in self.phases], tokens)
        p = self.phases[index]
        return phase_lr(self.schedule, tokens, p.lr_scale, p.lr_path)

    def lr_at_step(self, step: float, phase: int | None = None) -> float:
        """lr_at for the step count: the LR of optimizer step `step` (counted over the run, from 1)."""
        return self.lr_at(tokens_at_step([p.span for p in self.phases], step), phase)

    def duration_steps(self, duration: Duration) -> float:
        if duration.unit == "steps":
            return duration.amount
        return step_at_tokens([p.span for p in self.phases], self.duration_tokens(duration))

    def peak_flops(self) -> float:
        """The dense peak FLOP/s of one device that MFU and the plan's hours are quoted against."""
        return mfu_peak_flops(self.accelerator, self.spec.precision.compute)


def mfu_peak_flops(accelerator: Accelerator, compute: str) -> float:
    """The dense peak FLOP/s of one device in the dtype MFU is quoted against: the compute dtype, but bf16 for
    fp8 compute (fp8 runs only the large matmuls in fp8; torchtitan's MFU uses the bf16 peak for float8 training
    too, pytorch/torchtitan torchtitan/tools/utils.py get_peak_flops), so an fp8 run's hours at a given MFU
    are not halved by the fp8 peak."""
    dtype = "bf16" if compute == "fp8" and "bf16" in accelerator.peak_tflops else compute
    return (accelerator.peak_tflops.get(dtype) or accelerator.peak_tflops.get("fp32") or 0.0) * 1e12


def tokenizer_ids(spec: RunSpec) -> int:
    tok = spec.tokenizer
    return (tok.vocab_size or 0) + tok.reserved_tokens + len(set(tok.domain_tokens))


def vocab_rows(spec: RunSpec, max_tensor: int = 1) -> int:
    """model.vocab_size, or the tokenizer's ids padded to a multiple of lcm(128, 64 * tensor)."""
    if spec.model.vocab_size:
        return spec.model.vocab_size
    multiple = math.lcm(VOCAB_PAD_MULTIPLE, 64 * max_tensor)
    return math.ceil(tokenizer_ids(spec) / multiple) * multiple


def _largest_micro_batch(s: PhaseSettings, span: PhaseSpan, stretches: list[RampStretch]) -> PhaseSettings:
    """The phase's settings at its largest micro-batch: a ramp stage with its own micro_batch
    (batch.ramp[].micro_batch) that covers part of the phase may hold more activations than the steady one."""
    if s.batch_overridden:
        return s
    covering = [
        r.micro_batch
        for r in stretches
        if r.micro_batch is not None and span.start_tokens < r.end_tokens and span.end_tokens > r.start_tokens
    ]
    largest = max([s.micro_batch, *covering])
    return s if largest == s.micro_batch else replace(s, micro_batch=largest)


def phase_path(
    s: PhaseSettings, span: PhaseSpan, schedule: Schedule, to_tokens: Callable[[Duration | None], float | None]
) -> PhasePath | None:
    """The phase's own LR path (runlib.plan.schedule.PhasePath), None when it follows the schedule."""
    o = s.phase.optimizer
    if o is None or (o.lr_decay_to is None and o.lr_rewarm is None):
        return None
    return PhasePath(
        start_tokens=span.start_tokens,
        end_tokens=span.end_tokens,
        start_lr=planned_lr(schedule, span.start_tokens, s.lr_scale),
        end_lr=o.lr_decay_to * schedule.peak_lr if o.lr_decay_to is not None else None,
        shape=o.lr_decay_shape or "linear",
        rewarm_tokens=min(to_tokens(o.lr_rewarm) or 0.0, float(span.tokens)),
    )


def derive(spec: RunSpec, measured_tokens: dict[str, int] | None = None) -> Plan:
    """measured_tokens: training tokens per source counted in tokenized shards; they replace `tokens`.

    Over 80 lines: it is the plan's one assembly: each figure reads the ones before it."""
    measured_tokens = measured_tokens or {}
    accelerator = resolve(spec.hardware.accelerator, spec.hardware.memory_gib, spec.hardware.peak_tflops)
    if spec.hardware.accelerator == "cpu" and spec.hardware.memory_gib is None:
        # a CPU device's memory is this machine's, shared by the node's processes (not the catalog's placeholder)
        accelerator = cpu_device_memory(accelerator, spec.hardware.devices_per_node, host_memory_bytes())
    settings = all_phase_settings(spec)
    rows = vocab_rows(spec, max([s.parallelism.tensor for s in settings] + [spec.parallelism.tensor]))
    max_seq = max([s.seq_len for s in settings] + [spec.model.seq_len])
    params = count_params(spec.model, rows, max_seq)
    spans = build_timeline(spec, settings)
    run_tokens = spans[-1].end_tokens if spans else spec.tokens

    def to_tokens(d: Duration | None) -> float | None:
        if d is None:
            return None
        if d.unit == "percent":
            return d.amount / 100.0 * spec.tokens
        if d.unit == "steps":
            return tokens_at_step(spans, d.amount)
        return d.amount

    warmup = to_tokens(spec.schedule.warmup) or 0.0
    decay = to_tokens(spec.schedule.decay)
    if spec.schedule.kind == "wsd" and spec.schedule.decay is not None and spec.schedule.decay.unit == "steps":
        # a WSD decay runs over the run's last N steps: count them back from the end
        end_step = spans[-1].end_step if spans else 0
        decay = run_tokens - tokens_at_step(spans, max(0.0, end_step - spec.schedule.decay.amount))
    lr_steps = [(to_tokens(x.after) or 0.0, x.lr_ratio) for x in spec.schedule.lr_steps or []]
    hold = to_tokens(spec.schedule.hold) or 0.0
    schedule = build_schedule(
        spec.schedule.kind, spec.optimizer.lr, spec.schedule.min_lr_ratio, warmup, decay, run_tokens, lr_steps, hold
    )

    peak = mfu_peak_flops(accelerator, spec.precision.compute)
    per_device = peak * spec.hardware.mfu  # model FLOP/s of one device; a phase runs on its own devices
    attn_width = attention_flop_width(spec.model)
    # each MTP module adds a block, its scores included (DeepSeek-V3, arXiv 2412.19437 section 2.2)
    score_layers = spec.model.layers + (spec.model.mtp.depth if spec.model.mtp else 0)
    relative = spec.model.position == "relative"  # one more score matmul per layer (flops.py)
    windowed = sum(windowed_layers(spec.model))  # sliding-window layers score at most the window's keys
    phases: list[PhasePlan] = []
    used: dict[str, float] = {name: 0.0 for name in spec.data.sources}
    stretches = ramp_stretches(spec)
    for s, span in zip(settings, spans, strict=False):
        per_token = F.flops_per_token(
            params.matmul, score_layers, attn_width, s.seq_len, relative, spec.model.sliding_window, windowed
        )
        weights_total = sum(s.phase.mixture.values()) or 1.0
        source_tokens = {k: span.tokens * w / weights_total for k, w in s.phase.mixture.items()}
        for k, v in source_tokens.items():
            used[k] = used.get(k, 0.0) + v
        phase_flops = per_token * span.tokens
        lr_scale = s.lr_scale  # a mid-run LR change (runlib.plan.effective merges the phase's optimizer)
        path = phase_path(s, span, schedule, to_tokens)
        phases.append(
            PhasePlan(
                name=s.phase.name,
                kind=s.phase.kind,
                settings=s,
                span=span,
                lr_start=phase_lr(schedule, span.start_tokens, lr_scale, path),
                lr_end=phase_lr(schedule, span.end_tokens, lr_scale, path),
                source_tokens=source_tokens,
                flops_per_token=per_token,
                flops=phase_flops,
                memory=phase_memory(
                    spec.model,
                    spec.precision,
                    params,
                    rows,
                    _largest_micro_batch(s, span, stretches),
                    accelerator.runtime_overhead_gib,
                    nodes=s.nodes,
                    accelerator=spec.hardware.accelerator,
                ),
                hours=phase_flops / (per_device * s.devices) / 3600 if per_device > 0 else math.inf,
                lr_scale=lr_scale,
                lr_path=path,
                moe=_moe_plan(spec, params, s, span, per_token, per_device),
            )
        )

    sources = []
    for name, used_tokens in used.items():
        basis = "measured" if name in measured_tokens else "declared"
        available = measured_tokens.get(name, spec.data.sources[name].tokens if name in spec.data.sources else None)
        if available is None:
            epochs = None
        elif available == 0:
            epochs = math.inf if used_tokens > 0 else 0.0
        else:
            epochs = used_tokens / available
        sources.append(SourcePlan(name, available, used_tokens, epochs, basis))

    flops_total = sum(p.flops for p in phases)
    first_seq = settings[0].seq_len if settings else spec.model.seq_len
    flops_causal = sum(
        F.flops_per_token_causal(
            params.matmul,
            score_layers,
            attn_width,
            p.settings.seq_len,
            relative,
            spec.model.sliding_window,
            windowed,
        )
        * p.tokens
        for p in phases
    )
    gpu_hours = flops_total / (peak * spec.hardware.mfu) / 3600 if peak > 0 else math.inf
    n_devices = devices(spec)
    wall_hours = sum(p.hours for p in phases)  # each phase on its own devices
    wall_days = wall_hours / 24

    hours_per_token = wall_hours / run_tokens if run_tokens and per_device > 0 else math.inf
    checkpoint = _checkpoint_plan(spec, params, spans, hours_per_token, to_tokens)
    references = scaling.references(params, run_tokens, flops_total, spec.model, first_seq)
    return Plan(
        spec=spec,
        accelerator=accelerator,
        vocab_rows=rows,
        tokenizer_ids=tokenizer_ids(spec),
        params=params,
        devices=n_devices,
        phases=phases,
        sources=sources,
        schedule=schedule,
        flops_total=flops_total,
        flops_kaplan=F.flops_per_token_kaplan(params.non_embedding - (params.total - params.active)) * run_tokens,
        flops_causal=flops_causal,
        gpu_hours=gpu_hours,
        wall_days=wall_days,
        checkpoint=checkpoint,
        references=references,
        warmup_tokens=warmup,
        decay_tokens=decay,
    )


def _moe_plan(
    spec: RunSpec, params: ParamCounts, s: PhaseSettings, span: PhaseSpan, per_token: float, per_device: float
) -> MoePhasePlan | None:
    """The phase's expert traffic (runlib.plan.moe) on its layout and the catalog's interconnect."""
    if spec.model.moe is None:
        return None
    layout = phase_layout(s, s.nodes)
    link, network = interconnect_gb_per_s(spec.hardware.accelerator)
    tokens_per_step = span.segments[-1].tokens_per_step if span.segments else s.seq_len * s.micro_batch
    compute = per_token * tokens_per_step / (per_device * s.devices) if per_device > 0 else math.inf
    return moe_phase_plan(
        spec.model,
        params,
        seq_len=s.seq_len,
        micro_batch=s.micro_batch,
        grad_accum=s.grad_accum,
        tokens_per_step=tokens_per_step,
        ep=layout.ep,
        cp=layout.cp,
        pp=layout.pp,
        devices_per_node=layout.devices_per_node,
        act_bytes=4 if spec.precision.compute == "fp32" else 2,
        link_gb_per_s=link,
        network_gb_per_s=network,
        compute_seconds_per_step=compute,
    )


def checkpoint_bytes_per_param(spec: RunSpec) -> int:
    """Weights at their highest precision (the fp32 master if kept) + Adam moments."""
    weights, master, _, optimizer = state_bytes_per_param(spec.precision)
    return max(weights, master) + optimizer


# Llama 3's published failure log (Dubey et al. 2024, "The Llama 3 Herd of Models", section 3.3.4):
# 419 unexpected interruptions in a 54-day snapshot of pre-training on 16,384 H100 GPUs, i.e. one per
# 54 * 24 * 16,384 / 419 = ~50,700 GPU-hours. A job on n GPUs fails about every 50,700 / n hours
# (failures of independent devices add up): 24.7 h on 2,048 GPUs, 3.1 h on all 16,384 (the paper's
# "roughly every three hours"). Used when hardware.node_mtbf_hours is not given, on GPUs only.
LLAMA3_INTERRUPTIONS = 419
LLAMA3_SNAPSHOT_DAYS = 54
LLAMA3_GPUS = 16_384
DEVICE_MTBF_HOURS = LLAMA3_SNAPSHOT_DAYS * 24 * LLAMA3_GPUS / LLAMA3_INTERRUPTIONS


def job_mtbf(spec: RunSpec) -> tuple[float | None, str]:
    """(mean hours between failures of the whole job, how it was found); (None, "") on a CPU without
    hardware.node_mtbf_hours (no published rate for it)."""
    hw = spec.hardware
    if hw.node_mtbf_hours:
        nodes = f"{hw.nodes} node{'s' if hw.nodes != 1 else ''}"
        return hw.node_mtbf_hours / hw.nodes, f"node MTBF {hw.node_mtbf_hours:,.4g} h / {nodes}"
    if hw.accelerator == "cpu":
        return None, ""
    n = devices(spec)
    return DEVICE_MTBF_HOURS / n, (
        f"{DEVICE_MTBF_HOURS:,.0f} GPU-hours per failure / {n:,} GPUs: no hardware.node_mtbf_hours, so Llama 3's "
        f"published rate ({LLAMA3_INTERRUPTIONS} unexpected interruptions in {LLAMA3_SNAPSHOT_DAYS} days on "
        f"{LLAMA3_GPUS:,} GPUs, Dubey et al. 2024 section 3.3.4)"
    )


def checkpoint_write_gb_per_s(spec: RunSpec) -> float:
    """The rate a checkpoint is written at: the nodes' links together, or the shared storage's cap if smaller."""
    hw = spec.hardware
    nodes = hw.nodes * hw.checkpoint_write_gb_per_s
    return min(nodes, hw.storage_write_gb_per_s) if hw.storage_write_gb_per_s is not None else nodes


def _checkpoint_plan(
    spec: RunSpec,
    params: ParamCounts,
    spans: list[PhaseSpan],
    hours_per_token: float,
    to_tokens: Callable[[Duration | None], float | None],
) -> CheckpointPlan:
    size = params.trained * checkpoint_bytes_per_param(spec)
    rate = checkpoint_write_gb_per_s(spec)
    write_seconds = size / (rate * 1e9)
    run_tokens = spans[-1].end_tokens if spans else 0
    interval_tokens = to_tokens(spec.checkpoint.every)
    interval_steps = step_at_tokens(spans, interval_tokens) if interval_tokens is not None else None
    interval_hours = interval_tokens * hours_per_token if interval_tokens is not None else None
    mtbf, basis = job_mtbf(spec)
    young = math.sqrt(2 * (write_seconds / 3600) * mtbf) if mtbf else None
    stall = write_seconds
    if spec.checkpoint.async_save:
        # the write overlaps training, which waits only when the next save comes before it ends (the copy in
        # memory before the write is not modelled): the best interval is the write time itself
        stall = max(0.0, write_seconds - interval_hours * 3600) if interval_hours else 0.0
        young = write_seconds / 3600 if mtbf else None
    count = len(spans)
    if interval_tokens and interval_tokens > 0:
        count += int(run_tokens // interval_tokens)
    return CheckpointPlan(
        size, write_seconds, interval_tokens, interval_steps, interval_hours, mtbf, young, count, rate, basis, stall
    )
