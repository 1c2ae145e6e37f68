"""The train_phase stage's config: everything one training phase reads, and so its cache key.

`build_train_phase_configs(spec, plan)` is the one function that makes it (one per phase). The worker
receives this config and its inputs' artifact directories, never the RunSpec, so a spec edit reruns a
phase exactly when it changes something the phase reads: its model shape (with learned positions, the
table has max(seq_len over all phases) rows, so a later phase's seq_len changes every phase), its data
order (runlib.data.loader_config), the LR schedule inside the phase, optimizer, precision, parallel
layout, checkpointing and monitoring. No torch import here: `runlib plan` builds these.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from runlib.data.loader_config import LoaderConfig, build_loader_config
from runlib.plan.derive import Plan
from runlib.plan.effective import PhaseSettings
from runlib.plan.layout import Layout, build_layout
from runlib.plan.schedule import PhasePath, Schedule
from runlib.plan.timeline import PhaseSpan
from runlib.spec.models import ModelSpec, OptimizerSpec, PrecisionSpec, RopeScalingSpec, RunSpec, SpikeSpec
from runlib.spec.models.training import ParallelismSpec, Recompute
from runlib.spec.units import Duration
from runlib.store.stageconfig import StageConfig
from runlib.util.keyed import omit_new_fields_at_default

TRAINING_EVAL_TOKENS = 32 * 1024  # held-out tokens per source in an evaluation during training by default


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class ParallelConfig(_Part):
    """The phase's device mesh as the spec lays it out: world = nodes * processes_per_node
    = dp_replicate * dp_shard * tp * cp * pp. The fields of runlib.plan.layout.Layout (`layout`, `of`),
    spelled as the stage keys have always held them."""

    nodes: int
    """Machines (hardware.nodes)."""
    processes_per_node: int
    """Training processes per machine, one per device (hardware.devices_per_node)."""
    dp_replicate: int
    """Data-parallel replicas holding whole copies of the (TP-sharded) states (DDP; HSDP: across nodes)."""
    dp_shard: int
    """Data-parallel ranks sharding the states (FSDP2; HSDP: within a node)."""
    tp: int
    """Tensor-parallel degree."""
    cp: int
    """Context-parallel degree."""
    pp: int
    """Pipeline-parallel degree."""
    sharding: Literal["none", "zero1", "zero2", "fsdp", "hsdp"]
    """parallelism.sharding."""
    activation_checkpointing: Recompute
    """parallelism.activation_checkpointing."""
    offload: bool
    """parallelism.offload."""
    pipeline_schedule: Literal["1f1b", "interleaved_1f1b", "gpipe"] = "1f1b"
    """parallelism.pipeline_schedule (with pp > 1)."""
    pipeline_virtual_stages: int = 1
    """parallelism.pipeline_virtual_stages."""
    pipeline_first_stage_layers: int | None = None
    """parallelism.pipeline_first_stage_layers."""
    pipeline_last_stage_layers: int | None = None
    """parallelism.pipeline_last_stage_layers."""
    hsdp_shard_nodes: int = 1
    """parallelism.hsdp_shard_nodes (with hsdp)."""
    ep: int = 1
    """Expert-parallel degree (parallelism.expert, with model.moe)."""

    # fields added after the keys existed: left out of the key at their default, so no dense run reruns
    KEYED_WHEN_SET: ClassVar[frozenset[str]] = frozenset(
        {
            "pipeline_schedule",
            "pipeline_virtual_stages",
            "pipeline_first_stage_layers",
            "pipeline_last_stage_layers",
            "hsdp_shard_nodes",
            "ep",
        }
    )

    @model_serializer(mode="wrap")
    def _omit_new_fields_at_default(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return omit_new_fields_at_default(self, self.KEYED_WHEN_SET, data)

    @classmethod
    def of(
        cls, layout: Layout, activation_checkpointing: Recompute, pipeline: ParallelismSpec | None = None
    ) -> ParallelConfig:
        """The config of a layout, with the pipeline's schedule and split from `pipeline` (the phase's
        parallelism; keyed only when set)."""
        extra: dict[str, Any] = (
            {
                "pipeline_schedule": pipeline.pipeline_schedule,
                "pipeline_virtual_stages": pipeline.pipeline_virtual_stages,
                "pipeline_first_stage_layers": pipeline.pipeline_first_stage_layers,
                "pipeline_last_stage_layers": pipeline.pipeline_last_stage_layers,
            }
            if pipeline is not None
            else {}
        )
        return cls(
            **extra,
            hsdp_shard_nodes=layout.hsdp_shard_nodes,
            ep=layout.ep,
            nodes=layout.nodes,
            processes_per_node=layout.devices_per_node,
            dp_replicate=layout.dp_replicate,
            dp_shard=layout.dp_shard,
            tp=layout.tp,
            cp=layout.cp,
            pp=layout.pp,
            sharding=layout.sharding,
            activation_checkpointing=activation_checkpointing,
            offload=layout.offload,
        )

    @property
    def layout(self) -> Layout:
        return Layout(
            nodes=self.nodes,
            devices_per_node=self.processes_per_node,
            dp_replicate=self.dp_replicate,
            dp_shard=self.dp_shard,
            cp=self.cp,
            tp=self.tp,
            pp=self.pp,
            ep=self.ep,
            sharding=self.sharding,
            offload=self.offload,
            pp_schedule=self.pipeline_schedule,
            pp_virtual=self.pipeline_virtual_stages,
            pp_first_layers=self.pipeline_first_stage_layers,
            pp_last_layers=self.pipeline_last_stage_layers,
            hsdp_shard_nodes=self.hsdp_shard_nodes,
        )

    @property
    def world(self) -> int:
        return self.layout.world_size

    @property
    def data_parallel(self) -> int:
        return self.layout.data_parallel


class PhasePathConfig(_Part):
    """runlib.plan.schedule.PhasePath of a phase, as its config holds it."""

    start_tokens: float
    end_tokens: float
    start_lr: float
    end_lr: float | None
    shape: Literal["linear", "cosine"]
    rewarm_tokens: float

    def path(self) -> PhasePath:
        return PhasePath(self.start_tokens, self.end_tokens, self.start_lr, self.end_lr, self.shape, self.rewarm_tokens)


class ScheduleConfig(_Part):
    """The LR schedule's parameters that matter inside the phase (Schedule.lr_at on the run's token
    timeline); a part that cannot apply inside the phase is None, so editing a later phase leaves an
    earlier phase's key alone."""

    kind: Literal["wsd", "cosine", "linear", "constant", "multistep", "inverse_sqrt"]
    """schedule.kind."""
    peak_lr: float
    """optimizer.lr."""
    warmup_tokens: float | None
    """End of the linear warmup (None: the phase starts after it)."""
    floor_lr: float | None
    """peak_lr * min_lr_ratio (None: the phase ends before the decay starts)."""
    decay_start_tokens: float | None
    """Where the LR starts to fall below the peak."""
    decay_end_tokens: float | None
    """Where it reaches the floor."""
    levels: list[tuple[float, float]] | None = None
    """multistep: (tokens from which, LR) of the levels that start before the phase ends (None otherwise:
    left out of the config, and so of the key)."""
    phase_path: PhasePathConfig | None = None
    """The phase's own LR path (phases[].optimizer.lr_decay_to, lr_rewarm; None: left out of the key)."""

    @model_serializer(mode="wrap")
    def _omit_levels(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for name in ("levels", "phase_path"):
            if getattr(self, name) is None:
                data.pop(name, None)
        return data

    def lr_at(self, tokens: float) -> float:
        if self.phase_path is not None:
            own = self.phase_path.path().lr_at(tokens)
            if own is not None:
                return own
        return self._schedule_lr_at(tokens)

    def _schedule_lr_at(self, tokens: float) -> float:
        start, end = self.decay_start_tokens, self.decay_end_tokens
        decay = start is not None and self.kind != "constant"
        return Schedule(
            self.kind,
            self.peak_lr,
            self.floor_lr if self.floor_lr is not None else self.peak_lr,
            self.warmup_tokens or 0.0,
            start if decay and start is not None else float("inf"),
            end if decay and end is not None else float("inf"),
            0.0,
            tuple((at, lr) for at, lr in self.levels or ()),
        ).lr_at(tokens)


class SpanConfig(_Part):
    """Where the phase lies on the run's timeline: the ends of its runlib.plan.timeline.PhaseSpan (`of`),
    not its segments (a batch ramp inside the phase is the loader's)."""

    start_step: int
    """First optimizer step (counted over the run)."""
    end_step: int
    """One past the last optimizer step."""
    start_tokens: int
    """Tokens seen before the phase."""
    end_tokens: int
    """Tokens seen after the phase."""

    @classmethod
    def of(cls, span: PhaseSpan) -> SpanConfig:
        return cls(
            start_step=span.start_step,
            end_step=span.end_step,
            start_tokens=span.start_tokens,
            end_tokens=span.end_tokens,
        )


class CheckpointConfig(_Part):
    every_steps: int | None
    """Save the resumable state every this many steps (None: at the phase's end only)."""
    keep: int
    """Checkpoints kept in the phase's scratch directory."""
    state: list[Literal["model", "optimizer", "scheduler", "rng", "data", "scaler"]]
    """What a checkpoint holds (checkpoint.state)."""
    async_save: bool = False
    """Write the shards in the background (checkpoint.async_save); left out of the key while false."""

    @model_serializer(mode="wrap")
    def _omit_async_save_unset(self, handler: Any) -> Any:
        return omit_new_fields_at_default(self, frozenset({"async_save"}), handler(self))


class SpikeConfig(SpikeSpec):
    """monitor.spike as the phase reads it: the spec's policy (zscore, window, action, max_retries,
    max_skips_per_window), with its rollback distance in steps on this run's timeline for the duration."""

    rollback: None = Field(None, exclude=True)
    """Not held: rollback_steps is (the serialized config keeps the fields it always had)."""
    rollback_steps: int | None
    """Roll back to the newest checkpoint at least this many steps before the spike (None: the newest)."""

    @classmethod
    def of(cls, spike: SpikeSpec, rollback_steps: int | None) -> SpikeConfig:
        return cls(**spike.model_dump(exclude={"rollback"}), rollback_steps=rollback_steps)


class MonitorConfig(_Part):
    log_every_tokens: int
    """Training metrics (the mean loss over the interval) each time the run's token count crosses a multiple
    of this, and at the phase's end: one interval for every phase (monitor.log_every in tokens; default:
    about DEFAULT_LOG_POINTS records over the run, a whole number of the longest step)."""
    eval_every_steps: int | None
    """Held-out loss per source every this many steps (monitor.eval_every)."""
    eval_tokens: int
    """Held-out tokens per source in each of those evaluations: monitor.eval_tokens, default 32Ki (a quick
    signal during training). Not eval.heldout_tokens: that is the eval stage's, and editing the eval section
    must rerun only the evaluations (README, "editing the eval section reruns only evaluation")."""
    spike: SpikeConfig | None
    """Loss-spike policy."""


class EstimateConfig(_Part):
    """The plan's figures, recorded in the manifest beside what was measured."""

    memory_bytes_per_device: float
    """Planned peak memory of one device in this phase."""
    flops_per_token: float
    """Training FLOPs per token (model FLOPs, for MFU)."""
    peak_flops_per_device: float
    """Dense peak FLOP/s of one device in the compute dtype (for MFU)."""


class TrainPhaseConfig(StageConfig):
    """One training phase: everything its processes read."""

    KEYED_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"rope_scaling"})

    phase_index: int
    """Index of the phase in the run."""
    phase_name: str
    """phases[].name."""
    seed: int
    """Seed of initialization (the data order's seed is in `loader`)."""
    accelerator: str
    """hardware.accelerator (catalog key)."""
    model: ModelSpec
    """The model's shape (model.seq_len and rope_theta: the first phase's; this phase's are below)."""
    vocab_rows: int
    """Embedding rows (model.vocab_size or the padded tokenizer size)."""
    position_rows: int
    """Rows of the learned position table (max seq_len over all phases); the RoPE table size otherwise."""
    seq_len: int
    """Context length of this phase."""
    rope_theta: float
    """RoPE base of this phase."""
    rope_scaling: RopeScalingSpec | None = None
    """phases[].rope_scaling: RoPE frequencies rescaled in this phase."""
    micro_batch: int
    """Sequences per data-parallel rank per micro-step."""
    loss_normalization: Literal["global_tokens", "micro_batch_mean"]
    """data.loss_normalization."""
    loader: LoaderConfig
    """The phase's data order."""
    span: SpanConfig
    """Where the phase lies on the timeline."""
    schedule: ScheduleConfig
    """The LR inside the phase."""
    optimizer: OptimizerSpec
    """optimizer.* (lr: the peak; the LR of a step comes from `schedule`)."""
    precision: PrecisionSpec
    """precision.*."""
    parallel: ParallelConfig
    """The mesh and the memory-saving settings of this phase."""
    checkpoint: CheckpointConfig
    """Checkpointing."""
    monitor: MonitorConfig
    """Logging, evaluation during training, spikes."""
    estimates: EstimateConfig
    """Plan figures to compare with measurements."""

    @property
    def micro_batch_counts(self) -> set[int]:
        """Micro-batches per step on each rank in each of the phase's segments (a batch ramp changes them;
        runlib.train.step divides a step's sequences the same way)."""
        per_step = self.micro_batch * self.parallel.layout.data_parallel
        return {max(1, s.batch_sequences // per_step) for s in self.loader.segments}


def schedule_within(
    plan: Plan, start_tokens: float, end_tokens: float, lr_scale: float | None = None, path: PhasePath | None = None
) -> ScheduleConfig:
    """lr_scale: a phase's optimizer.lr_scale, multiplying every LR of the schedule within the phase; path: the
    phase's own LR path, which replaces the schedule where it applies."""
    s = plan.schedule
    scale = 1.0 if lr_scale is None else lr_scale
    warmup = s.warmup_tokens if start_tokens < s.warmup_tokens else None
    decays = s.kind != "constant" and end_tokens > s.decay_start_tokens
    levels = [(t, lr * scale) for t, lr in s.levels if t < end_tokens] if s.kind == "multistep" else None
    return ScheduleConfig(
        kind=s.kind,
        peak_lr=s.peak_lr * scale,
        warmup_tokens=warmup,
        floor_lr=s.floor_lr * scale if decays else None,
        decay_start_tokens=s.decay_start_tokens if decays else None,
        # inverse_sqrt decays without end (None here, infinity in Schedule.lr_at)
        decay_end_tokens=s.decay_end_tokens if decays and math.isfinite(s.decay_end_tokens) else None,
        levels=levels if decays else None,
        phase_path=PhasePathConfig(
            start_tokens=path.start_tokens,
            end_tokens=path.end_tokens,
            start_lr=path.start_lr,
            end_lr=path.end_lr,
            shape="cosine" if path.shape == "cosine" else "linear",
            rewarm_tokens=path.rewarm_tokens,
        )
        if path is not None
        else None,
    )


def parallel_config(spec: RunSpec, settings: PhaseSettings) -> ParallelConfig:
    """The phase's layout (runlib.plan.layout.build_layout) on its machines (phases[].hardware, else the run's),
    as its config holds it."""
    p = settings.parallelism
    layout = build_layout(p, nodes=settings.nodes, devices_per_node=settings.devices_per_node)
    return ParallelConfig.of(layout, p.activation_checkpointing, p)


def _steps(plan: Plan, duration: Duration | None) -> int | None:
    return max(1, round(plan.duration_steps(duration))) if duration is not None else None


DEFAULT_LOG_POINTS = 200  # training-metric records over a whole run when monitor.log_every is not set


def log_every_tokens(plan: Plan, duration: Duration | None) -> int:
    """monitor.log_every on the run's token timeline (a steps or % duration converted there); default: the
    run's tokens / DEFAULT_LOG_POINTS, rounded up to a whole number of the longest step of any phase."""
    if duration is not None:
        return max(1, round(plan.duration_tokens(duration)))
    step_tokens = max([seg.tokens_per_step for p in plan.phases for seg in p.span.segments], default=1)
    return max(1, step_tokens * math.ceil(plan.tokens_total / DEFAULT_LOG_POINTS / max(1, step_tokens)))


def build_train_phase_configs(spec: RunSpec, plan: Plan) -> list[TrainPhaseConfig]:
    """One TrainPhaseConfig per phase of the plan (pure)."""
    longest = max([p.settings.seq_len for p in plan.phases] + [spec.model.seq_len])
    learned = spec.model.position == "learned"
    spike = spec.monitor.spike
    checkpoint = CheckpointConfig(
        every_steps=_steps(plan, spec.checkpoint.every),
        keep=spec.checkpoint.keep,
        state=list(spec.checkpoint.state),
        async_save=spec.checkpoint.async_save,
    )
    eval_tokens = int(spec.monitor.eval_tokens or TRAINING_EVAL_TOKENS)
    configs = []
    for i, phase in enumerate(plan.phases):
        s = phase.settings
        monitor = MonitorConfig(
            log_every_tokens=log_every_tokens(plan, spec.monitor.log_every),
            eval_every_steps=_steps(plan, spec.monitor.eval_every),
            eval_tokens=eval_tokens,
            spike=SpikeConfig.of(spike, _steps(plan, spike.rollback)) if spike else None,
        )
        configs.append(
            TrainPhaseConfig(
                phase_index=i,
                phase_name=phase.name,
                seed=int(spec.seed),
                accelerator=spec.hardware.accelerator,
                model=spec.model,
                vocab_rows=plan.vocab_rows,
                position_rows=longest if learned else s.seq_len,
                seq_len=s.seq_len,
                rope_theta=s.rope_theta,
                rope_scaling=s.rope_scaling,
                micro_batch=s.micro_batch,
                loss_normalization=spec.data.loss_normalization,
                loader=build_loader_config(spec, plan, i),
                span=SpanConfig.of(phase.span),
                schedule=schedule_within(
                    plan, phase.span.start_tokens, phase.span.end_tokens, s.lr_scale, phase.lr_path
                ),
                optimizer=s.optimizer,  # the phase's optimizer override merged (runlib.plan.effective)
                precision=spec.precision,
                parallel=parallel_config(spec, s),
                checkpoint=checkpoint,
                monitor=monitor,
                estimates=EstimateConfig(
                    memory_bytes_per_device=float(phase.memory.total),
                    flops_per_token=float(phase.flops_per_token),
                    peak_flops_per_device=float(plan.peak_flops()),
                ),
            )
        )
    return configs
