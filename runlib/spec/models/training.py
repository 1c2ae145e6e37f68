"""How the run trains: parallelism, batch, optimizer, schedule, precision, and what a phase may
override of the first three (derived from them: base.override_of)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from runlib.spec.models.base import (
    MAX_MICRO,
    MAX_PARALLEL,
    PLANNING_ONLY,
    KeyedWhenSet,
    PhaseOverride,
    SpecModel,
    override_of,
)
from runlib.spec.units import BatchSizeField, Duration, DurationField

Sharding = Literal["none", "zero1", "zero2", "fsdp", "hsdp"]
Recompute = Literal["none", "selective", "selective_op", "mlp", "full"]


class ParallelismSpec(SpecModel):
    tensor: int = Field(1, ge=1, le=MAX_PARALLEL)
    """Tensor-parallel degree (with sequence parallelism unless sequence_parallel is false)."""
    pipeline: int = Field(1, ge=1, le=MAX_PARALLEL)
    """Pipeline-parallel degree."""
    context: int = Field(1, ge=1, le=MAX_PARALLEL)
    """Context-parallel degree (the sequence split across devices)."""
    expert: int = Field(1, ge=1, le=MAX_PARALLEL)
    """Expert-parallel degree with model.moe: each MoE layer's routed experts split over this many ranks, tokens sent to their experts' ranks and back by all-to-all (GShard, Lepikhin et al. 2020, arXiv 2006.16668). The ranks are borrowed from the data-parallel x context-parallel ones (torchtitan's ParallelDims: ep divides dp_shard x cp), so the degree adds no devices; expert weights are sharded over the rest of those ranks (FSDP over dp_shard x cp / ep)."""
    sharding: Sharding = "none"
    """Sharding of model states over the data-parallel ranks (times the context-parallel degree, as torchtitan and Megatron-LM shard): none | zero1 | zero2 | fsdp (= zero3) | hsdp (fsdp within each node, replicated across nodes)."""
    activation_checkpointing: Recompute = "none"
    """Activation recomputation: none; selective (the attention core, Korthikanti et al. 2022 section 4.1: saves the s^2 scores of an eager kernel); selective_op (torchtitan's op-level policy: each layer keeps its input, the attention kernel's output and every other matmul's output, and recomputes norms, RoPE, activations and the other matmuls); mlp (the MLP's hidden activations recomputed, the attention's kept: OLMo-core's selected_modules ["blocks.*.feed_forward"], allenai/OLMo-core src/olmo_core/train/train_module/transformer/config.py, as its 32B run trained); full (each layer keeps only its input)."""
    offload: bool = False
    """Optimizer states and master weights kept in host memory."""
    hsdp_shard_nodes: int | None = Field(None, ge=1, le=MAX_PARALLEL)
    """With sharding hsdp: the nodes one shard group spans, the states sharded over their devices and replicated across the groups (OLMo 2 32B: 4 replicas over 1024 GPUs, so 32 nodes of 8 per shard group; allenai/OLMo-core src/scripts/train/OLMo2-32B.py at d7301e6); omitted: 1, within a node."""
    sequence_parallel: bool = Field(True, json_schema_extra=PLANNING_ONLY)
    """With tensor > 1: norms and residuals split along the sequence over the tensor ranks (Korthikanti et al. 2022 section 4.2.2; runlib's trainer always does); false: replicated, as Megatron-LM without --sequence-parallel (BLOOM), for the memory model (planning only: read by the audit, not by any stage)."""
    attention_kernel: Literal["fused", "eager"] = Field("fused", json_schema_extra=PLANNING_ONLY)
    """fused: a Flash-style kernel that stores no s x s scores (runlib's trainer: scaled_dot_product_attention); eager: softmax scores kept for the backward, 2 bytes x heads x s^2 per sequence and layer (Megatron's fused softmax, as BLOOM trained), for the memory model (planning only: read by the audit, not by any stage)."""
    pipeline_schedule: Literal["1f1b", "interleaved_1f1b", "gpipe"] = "1f1b"
    """With pipeline > 1, the order of the micro-batches' forward and backward passes over the stages (torch.distributed.pipelining): 1f1b (one forward, one backward: at most pipeline micro-batches in flight, Narayanan et al. 2021 section 2.2.1), interleaved_1f1b (pipeline_virtual_stages model chunks per device, a smaller bubble, section 2.2.2), gpipe (all forwards, then all backwards: every micro-batch in flight, Huang et al. 2019)."""
    pipeline_virtual_stages: int = Field(1, ge=1, le=MAX_PARALLEL)
    """Model chunks per pipeline rank with interleaved_1f1b (at least 2; Megatron-LM --num-virtual-stages-per-pipeline-rank); 1 with the other schedules."""
    pipeline_first_stage_layers: int | None = Field(None, ge=1, le=100_000)
    """Transformer layers on the first pipeline stage when the split is uneven (Megatron-LM --decoder-first-pipeline-num-layers; e.g. Llama 3.1 405B: 126 layers over 16 stages, 7 on the first and last); the other stages share the rest evenly."""
    pipeline_last_stage_layers: int | None = Field(None, ge=1, le=100_000)
    """Transformer layers on the last pipeline stage when the split is uneven (Megatron-LM --decoder-last-pipeline-num-layers)."""
    sequence_parallel_saves: Literal["gathered", "sharded"] = Field("gathered", json_schema_extra=PLANNING_ONLY)
    """With sequence parallelism, what the attention and MLP blocks keep of their input for the backward: gathered (the all-gathered input, s x b x h on every tensor rank: DTensor's PrepareModuleInput + ColwiseParallel, as runlib's trainer and torchtitan apply them); sharded (the sequence-sharded input, all-gathered again in the backward: Megatron-LM, Korthikanti et al. 2022 section 4.2.2), for the memory model (planning only: read by the audit, not by any stage)."""
    grad_accumulation: Literal["in_place", "separate_buffer"] = Field("in_place", json_schema_extra=PLANNING_ONLY)
    """Where the micro-batches' gradients add up: in_place (the gradients are the accumulator, in precision.grads' dtype: runlib's trainer, FSDP, Megatron-LM's main_grad); separate_buffer (each backward leaves the gradients on the parameters in the compute dtype, and they are added into a separate buffer in precision.grads' dtype; both stay allocated, the compute-dtype copy not sharded: DeepSpeed's BF16_Optimizer for bf16 with ZeRO stage 0/1, as BLOOM trained, 2 bytes per parameter more), for the memory model (planning only: read by the audit, not by any stage)."""


@override_of(
    ParallelismSpec,
    exclude={
        "grad_accumulation": "how the training framework adds up micro-batch gradients (in place, or DeepSpeed's "
        "separate buffer) is one choice for the run: a phase changes the layout, not the framework",
    },
)
class ParallelismOverride(PhaseOverride):
    """The parallel layout of one phase: each field of ParallelismSpec (but grad_accumulation), omitted or
    null: the run's."""


class RampStage(SpecModel):
    after: DurationField
    """Tokens seen from which this global batch applies ('<count> tokens' or '<p>%')."""
    global_batch: BatchSizeField
    """Global batch from then on."""
    micro_batch: int | None = Field(None, ge=1, le=MAX_MICRO)
    """Sequences per data-parallel rank per micro-step from then on (default batch.micro_batch): a ramp that starts below micro_batch x dp sequences needs a smaller micro-batch early (GPT-3's 32K-token start, Brown et al. 2020 section 2.3). Read by the memory plan (the phase's estimate) and BATCH002; the trainer keeps batch.micro_batch throughout and refuses another value (RUN010)."""


class LinearRamp(SpecModel):
    """Megatron's --rampup-batch-size <start> <increment> <samples> (NVIDIA/Megatron-LM,
    megatron/core/num_microbatches_calculator.py, RampupBatchsizeNumMicroBatchesCalculator): the global
    batch starts at `start` and grows by `increment` in equal stretches of `over`, reaching the steady
    global batch (micro_batch x grad_accum x data parallel) at the end of `over`."""

    start: BatchSizeField
    """Global batch at the start of the run."""
    increment: BatchSizeField
    """Growth of the global batch at each step of the ramp."""
    over: DurationField
    """Tokens (or % of the run) over which the batch reaches the steady global batch."""

    @field_validator("over")
    @classmethod
    def _over_in_tokens(cls, over: Duration) -> Duration:
        if over.unit == "steps":
            raise ValueError(
                f"linear_ramp.over: {over} counts steps, whose size the ramp changes; give tokens "
                "(BLOOM's 9,765,625 samples x 2048: '20B tokens') or a % of the run"
            )
        return over


class BatchSpec(KeyedWhenSet):
    KEYED_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"linear_ramp"})

    micro_batch: int = Field(ge=1, le=MAX_MICRO)
    """Sequences per data-parallel rank per micro-step."""
    grad_accum: int = Field(1, ge=1, le=MAX_MICRO)
    """Micro-steps per optimizer step on each rank (steady state)."""
    global_batch: BatchSizeField | None = Field(None, json_schema_extra=PLANNING_ONLY)
    """Optional declaration, checked against micro_batch * grad_accum * dp, times seq_len for a count in tokens (planning only: read by the audit, not by any stage)."""
    ramp: list[RampStage] | None = Field(None, max_length=256)
    """The global batch by tokens seen; grad_accum follows and must stay whole."""
    linear_ramp: LinearRamp | None = None
    """A ramp in equal increments without one `ramp` entry per step (BLOOM: 192 to 2048 sequences by 16 over 20B tokens); the plan expands it into the same timeline segments as `ramp`; not with `ramp`."""

    @field_validator("linear_ramp")
    @classmethod
    def _one_ramp(cls, linear_ramp: LinearRamp | None, info: ValidationInfo) -> LinearRamp | None:
        if linear_ramp is not None and info.data.get("ramp"):
            raise ValueError("batch.ramp and batch.linear_ramp both given: keep one (linear_ramp for equal increments)")
        return linear_ramp


@override_of(
    BatchSpec,
    exclude={
        "ramp": "the batch ramp runs on the run's token timeline; a phase with a batch override leaves it",
        "linear_ramp": "as ramp",
    },
)
class BatchOverride(PhaseOverride):
    """The batch of one phase: micro_batch, grad_accum and the declared global_batch (checked like
    batch.global_batch), each omitted or null: the run's; the batch ramp does not apply to the phase."""


class OptimizerSpec(KeyedWhenSet):
    KEYED_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"decay_embeddings", "weight_decay_follows_lr"})

    kind: Literal["adamw", "adam", "adafactor", "muon", "lion"] = "adamw"
    """adamw: decoupled weight decay; adam: L2 penalty through the gradient; adafactor: factored second moments; muon: orthogonalized momentum on 2-D hidden matrices (AdamW for embeddings, head, norms); lion: sign momentum (Chen et al. 2023, via lion-pytorch)."""
    lr: float = Field(ge=-1e3, le=1e3)
    """Peak learning rate (the audit reports one that is not positive: SCHED003)."""
    betas: tuple[Annotated[float, Field(ge=0, lt=1)], Annotated[float, Field(ge=0, lt=1)]] = (0.9, 0.95)
    """Adam beta1, beta2, each in [0, 1) as torch.optim.Adam/AdamW require (they raise otherwise)."""
    eps: float = Field(1e-8, gt=0, le=1)
    """Adam epsilon."""
    weight_decay: float = Field(0.1, ge=0, le=100)
    """Weight decay (not applied to norms and biases)."""
    weight_decay_follows_lr: bool = False
    """true: the weight decay at each step is weight_decay x lr_k / lr (it falls and rises with the schedule), so a decoupled decay shrinks the weights by lr_k x that per step: with weight_decay equal to lr, by lr_k^2, PaLM's "dynamic weight decay of lr^2.0" (arXiv 2204.02311, section 5); false: weight_decay throughout."""
    decay_embeddings: bool = True
    """Weight decay on the input embedding tables (token and learned positions; a tied head is the token table); false: none there, as OLMo 2 (arXiv 2501.00656, its optimizer settings: no weight decay on embeddings) and SmolLM3."""
    grad_clip: float | None = Field(1.0, ge=0, le=1e6)
    """Clip the global gradient norm to this value (default 1.0); 0 or null: no clipping."""
    z_loss: float = Field(0.0, ge=0, le=100)
    """Coefficient of the z-loss (log Z squared) on the output logits."""


class LRStep(SpecModel):
    after: DurationField
    """Tokens seen (or % of the run, or steps) from which this LR applies."""
    lr_ratio: float = Field(ge=0, le=1e3)
    """The LR from then on, as a fraction of the peak."""


class ScheduleSpec(KeyedWhenSet):
    KEYED_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"lr_steps", "hold"})

    kind: Literal["wsd", "cosine", "linear", "constant", "multistep", "inverse_sqrt"] = "cosine"
    """LR shape after warmup: warmup-stable-decay, cosine, linear, constant, multistep (the peak, then the `lr_steps` levels: DeepSeek LLM, arXiv 2401.02954 section 2.3), or inverse_sqrt (the peak until warmup + hold, then peak x sqrt(that / tokens): Vaswani et al. 2017 section 5.3 after a linear warmup; T5 and PaLM, arXiv 2204.02311 section 5, after 10,000 steps at a constant 1e-2)."""
    warmup: DurationField
    """Linear warmup from 0 to the peak LR."""
    decay: DurationField | None = None
    """wsd: length of the final decay; cosine/linear: length of the decay after warmup (omitted: until the run's end)."""
    min_lr_ratio: float = Field(0.0, ge=0, le=1e3)
    """Floor as a fraction of the peak (multistep: the last of `lr_steps` is the floor)."""
    lr_steps: list[LRStep] | None = Field(None, max_length=64)
    """multistep only: the LR levels after the peak, in order (DeepSeek LLM: after 80% of the tokens 0.316, after 90% 0.1)."""
    hold: DurationField | None = None
    """inverse_sqrt only: the peak held this long after the warmup before the inverse square root begins (PaLM: 10,000 steps, with no warmup); omitted: none."""

    @model_validator(mode="after")
    def _steps_with_multistep(self) -> ScheduleSpec:
        if self.kind == "multistep" and not self.lr_steps:
            raise ValueError(
                "schedule.kind multistep needs schedule.lr_steps, e.g. [{after: 80%, lr_ratio: 0.316}, "
                "{after: 90%, lr_ratio: 0.1}]"
            )
        if self.kind != "multistep" and self.lr_steps:
            raise ValueError(f"schedule.lr_steps is read with kind: multistep only (kind is {self.kind})")
        if self.hold is not None and self.kind != "inverse_sqrt":
            raise ValueError(f"schedule.hold is read with kind: inverse_sqrt only (kind is {self.kind})")
        if self.kind == "inverse_sqrt" and self.warmup.amount == 0 and (self.hold is None or self.hold.amount == 0):
            raise ValueError(
                "schedule.kind inverse_sqrt decays as sqrt(start / tokens) from the end of warmup + hold, which is 0 "
                "here: give a warmup or a hold (PaLM: hold: 10000 steps)"
            )
        if self.kind == "inverse_sqrt" and self.decay is not None:
            raise ValueError("schedule.kind inverse_sqrt reads no decay (it decays until the run's end): remove it")
        if self.kind == "multistep" and (self.decay is not None or self.min_lr_ratio != 0):
            raise ValueError(
                "schedule.kind multistep reads neither decay nor min_lr_ratio (the levels are lr_steps, the last "
                "one the floor): remove them"
            )
        return self


class PrecisionSpec(SpecModel):
    compute: Literal["bf16", "fp16", "fp8", "fp32"] = "bf16"
    """Matmul/activation dtype."""
    master_weights: Literal["fp32", "none"] = "fp32"
    """fp32: an fp32 copy of the weights takes the updates; none: parameters stay in the compute dtype."""
    grads: Literal["fp32", "bf16", "fp16"] = "fp32"
    """Gradient reduction/accumulation dtype (fp16: Megatron's fp16 runs without --accumulate-allreduce-grads-in-fp32, e.g. BLOOM's precursors; the trainer refuses it, RUN009)."""
    optimizer_states: Literal["fp32", "bf16"] = "fp32"
    """Adam moment dtype."""
    loss_scaling: Literal["none", "static", "dynamic"] = "none"
    """Loss scaling (needed with fp16)."""
    loss_scale: float | None = Field(None, gt=0, le=2.0**64)
    """Initial (dynamic) or fixed (static) loss scale."""


@override_of(
    OptimizerSpec,
    exclude={
        "kind": "the optimizer's state carries from phase to phase, and another kind keeps other state",
        "lr": "the LR schedule is one curve across all phases: a phase scales it (lr_scale) or takes its own path "
        "from where it stands (lr_decay_to, lr_rewarm)",
        "betas": "run-wide, as no published run this spec describes changes them mid-run (OPT-175B's changed the "
        "LR and the clip)",
        "eps": "as betas",
        "weight_decay": "as betas; the audit checks it run-wide (OPT002)",
        "z_loss": "as betas; the audit checks it run-wide (OPT003)",
    },
    notes={"grad_clip": "Gradient-norm clip within the phase (OPT: 1.0 lowered to 0.3); 0: no clipping."},
)
class PhaseOptimizer(PhaseOverride):
    """What a phase changes in the optimizer mid-run (OPT-175B's restarts lowered the LR and the clip:
    Zhang et al. 2022, arXiv 2205.01068, section 2.5, and its logbook): lr_scale, and grad_clip from
    OptimizerSpec."""

    lr_scale: float | None = Field(None, gt=0, le=1e3)
    """The schedule's LR times this within the phase (OPT: the LR lowered after divergences)."""
    lr_decay_to: float | None = Field(None, ge=0, le=1e3)
    """The LR falls over the phase from the one it starts at (the schedule's at the phase's start, times lr_scale) to lr_decay_to x optimizer.lr at the phase's end, instead of following the schedule: OLMo 2's stage 2 decays linearly to 0 from where stage 1's cosine stopped (arXiv 2501.00656, mid-training); DeepSeek-V3 decays by a cosine to 0.1 of the peak over 4.3T tokens after 10T at the peak (arXiv 2412.19437, section 4.2)."""
    lr_decay_shape: Literal["linear", "cosine"] | None = None
    """The shape of the lr_decay_to fall (omitted: linear)."""
    lr_rewarm: DurationField | None = None
    """The LR rises linearly from 0 over this much of the phase's start back to the LR the phase starts at (a re-warmed LR after a decay, as SmolLM3's long-context stages after its WSD decay); then the schedule, or lr_decay_to, goes on."""

    @model_validator(mode="after")
    def _shape_with_a_decay(self) -> PhaseOptimizer:
        if self.lr_decay_shape is not None and self.lr_decay_to is None:
            raise ValueError(
                "optimizer.lr_decay_shape without lr_decay_to: it shapes the phase's own decay; give lr_decay_to "
                "(the LR at the phase's end over optimizer.lr), or remove it"
            )
        return self
