"""Peak memory per device for one phase: model states, activations, logits, buffers, fragmentation.

GPU: a model of named parts, evaluated for the first and the last pipeline stage (the device that needs
most is reported); the assumptions behind each figure travel with it (MemoryBreakdown.assumptions, in
the plan's JSON as memory_assumptions). tests/plan/test_memory_published.py holds it against published
measurements (torchtitan, ZeRO, Korthikanti et al., BigScience).

Model states (ZeRO, Rajbhandari et al. 2019, arXiv 1910.02054, Fig. 1 reproduced exactly): bytes per
parameter of weights, fp32 master copy, gradients and Adam moments. Sharded ones are divided over the
data-parallel ranks times the context-parallel degree (torchtitan's dp_shard_cp mesh, Megatron-LM's
data-parallel group with context parallelism): zero1 shards master + moments, zero2 also gradients,
fsdp everything; hsdp shards within a node (Zhao et al. 2023, arXiv 2304.11277, section 3.2).
Parameters on a device are its pipeline stage's (its layers; the first stage also the token table, the
last the output head, or with tied embeddings Megatron's copy of it) over the tensor degree.

Pipeline: the stages' layers as parallelism.pipeline_first/last_stage_layers state them (else an even
split, the larger share first); a 1F1B schedule keeps p - i micro-batches in flight on stage i
(Narayanan et al. 2021, arXiv 2104.04473), at most grad_accum. The first, the second (the fullest
middle stage) and the last stage are evaluated. A stage that is not the last keeps each in-flight
micro-batch's output for its backward and a buffer to receive the output's gradient in, each
s x b x h / t (torch.distributed.pipelining stage.py: fwd_cache and the per-micro-batch grad_recv_info
buffers, pytorch/pytorch @ cf30153c4c131c8164ee7798e5022d810682e2cb; DeepSpeed's pipe engine keeps the
outputs partitioned over the tensor ranks, deepspeed/runtime/pipe/engine.py @ 56c5223).

Activations per layer (Korthikanti et al. 2022, arXiv 2205.05198, Table 2, re-derived for gated MLPs,
grouped-query attention and no dropout; with dropout the function reproduces Table 2 exactly), in
bytes of 16-bit activations (x2 for fp32): norm inputs 4sbh, attention and MLP inputs 4sbh (these
replicated on the tensor ranks without sequence parallelism), q/k/v 2sb(a*hd + 2*kv*hd), attention
output 2sb*a*hd, MLP hidden 8sbf (SwiGLU: gate, up, silu(gate), product) or 4sbf (GELU), all over t.
An eager attention kernel adds the softmax output 2*a*s^2*b (fused kernels store none); selective
recompute removes it (the attention core is recomputed); selective_op keeps the layer's input, the
kernel's output and every other matmul's output (op_selective_bytes_per_layer); mlp drops the MLP hidden
(mlp_hidden_bytes: OLMo-core's feed-forward-only recomputation); full recompute keeps each layer's input
(2sbh, over t with sequence parallelism) and recomputes one layer at a time. The last layer's backward
holds one layer's activations more (their gradients). Context parallelism divides s by c.
Logits: LOGIT_BYTES per value of the micro-batch's s x V logits over t, on the last stage.
Buffers: FSDP's gathered 16-bit layers (two) and one layer's unsharded gradient, plus the root group
(embedding, head) held through the pass; under a pipeline, the stage's gathered weights and unsharded
gradients for the whole step; the pipeline's buffers; with parallelism.grad_accumulation separate_buffer
(DeepSpeed's BF16_Optimizer) the compute-dtype gradients kept on the parameters beside the accumulator, and its engine's flattened
all-reduce bucket after the backward, which the caching allocator keeps reserved (`allocator_cache`:
what the device reports, not what runs out).
Tensor parallelism with sequence parallelism keeps the attention and MLP inputs all-gathered
(parallelism.sequence_parallel_saves: gathered, DTensor as runlib's trainer and torchtitan) or sharded
(Megatron-LM, Korthikanti's accounting). With an embedding norm the first stage keeps its input per
micro-batch in flight (it runs outside the recomputed layers). Fragmentation: FRAGMENTATION of the transient parts. Plus the runtime
overhead of the device (CUDA context, communication buffers).

CPU (hardware.accelerator "cpu": a device is one core running one training process, and what is
measured is that process's peak RSS; `cpu_phase_memory`). What runlib's CPU path allocates, read from
runlib/model/transformer.py and runlib/train/accumulate.py, the attention kernel checked with
torch.profiler(profile_memory=True) on torch 2.13:
  * attention: F.scaled_dot_product_attention dispatches to the fused CPU flash kernel
    (aten::_scaled_dot_product_flash_attention_for_cpu and its backward), with the document mask
    and with GQA: no [b, a, s, s] scores are stored. But the boolean document mask [b, 1, s, s] is
    turned into an additive mask of the activation dtype inside every call and saved for the
    backward: b*s^2 values per layer (when rows hold several documents, as packing `document` does);
  * saved per layer: the block input and the residual after attention (RMSNorm inputs, 2sbh), both
    norm outputs (the inputs of the q/k/v and w1/w3 projections, 2sbh), RoPE-rotated q, k and v
    (sb(a*hd + 2*kv*hd)), the kernel's output (sb*a*hd) and its head-merged copy, the o-projection's
    input (sb*a*hd), the MLP hidden: SwiGLU keeps 4sbf (w1 out, silu out, w3 out, product), GELU 2sbf;
    QK-norm adds its inputs (sb(a + kv)hd); selective recompute (Attention.recompute_core) drops the
    kernel's output and the additive mask, which the recomputed core rebuilds;
  * outside the layers: the final norm's input and output (2sbh) and the fp32 logits [sb, V] with
    their gradient (one [sb, V] tensor: accumulate.py's token_losses writes it in place), plus, under
    16-bit compute, the 16-bit logits before the fp32 cast;
  * held-out evaluation (monitor.eval_every, and at the phase's end) runs in the same process under
    no_grad: batches of 8 windows (runlib/train/heldout.py), whose fp32 logits and cross-entropy
    log-softmax are 2 x 4*8*s*V bytes. It adds to the step's transient rather than reusing it: glibc
    malloc keeps the step's freed blocks in its arenas (it returns memory to the system only from the
    top of a heap), and the evaluation's differently sized blocks do not fit them. Measured: taking the
    larger of the two underestimates the demo's long phase by 20%, the sum fits every phase within 3%;
  * DDP (sharding none, data parallel > 1) keeps its gradient buckets beside the gradients (torch's
    default gradient_as_bucket_view=False: one more copy of the gradients);
  * the runtime: CPU_RUNTIME_BYTES (measured, see the constant).
The breakdown's `logits` is the step's logits and gradient plus the evaluation's logits and log-softmax.
"""

from __future__ import annotations

from dataclasses import dataclass

from runlib.plan.effective import PhaseSettings
from runlib.plan.layout import Layout, State, build_layout, pipeline_stage_layers
from runlib.plan.moe import activation_twin, moe_dispatch_bytes_per_layer
from runlib.plan.params import ParamCounts, gated_mlp, head_dim, kv_heads
from runlib.spec.models import ModelSpec, PrecisionSpec

GIB = 2**30
MIB = 2**20

# What one runlib.train.worker process holds whatever the model's size: the interpreter with torch
# 2.13.0+cpu, accelerate 1.15 and runlib.train (283 MiB), the gloo process group and the phase's loader
# (291 MiB before the model is built), then the DDP reducer, the optimizer's and the checkpoint's
# imports and the autograd and gloo threads. Fitted as the peak RSS minus the modelled parts over the
# demo's foundation and long phases and the tiny spec's foundation phase (2 processes, x86-64 Linux,
# Python 3.11; `python -m runlib.bench.memory_check`, 2026-12): 340.5, 335 and 343.5 MiB.
CPU_RUNTIME_BYTES = 340 * MIB
HELDOUT_BATCH = 8  # windows per held-out forward (runlib.train.heldout.heldout_metrics' batch_size)


# The allocator's share on top of what the step allocates while it changes shape (activations, logits,
# gathered buffers): PyTorch's caching allocator rounds blocks up and keeps freed blocks of other sizes,
# so the memory it reserves exceeds the peak of live tensors. Stated, not derived: 10% of the transient
# parts brings torchtitan's published Llama 3.1 8B and 70B rows (docs/performance.md, peak reserved
# memory) within their tolerances (tests/plan/test_memory_published.py); model states are allocated once
# in large blocks and are not counted.
FRAGMENTATION = 0.10
# DeepSpeed's data-parallel gradient all-reduce outside ZeRO-2/3 (engine.buffered_allreduce_fallback ->
# allreduce_no_retain -> allreduce_bucket, deepspeed/runtime/engine.py @ 56c522386878df2513ccb548de76b50191ae3af7):
# the gradients go in buckets closed once they pass MEMORY_OPT_ALLREDUCE_SIZE = 5e8 elements; each bucket is
# flattened (a copy in the gradients' fp32) and cast to the 16-bit communication dtype
# (engine.communication_data_type: bf16 or fp16 under 16-bit training) before the all-reduce.
DEEPSPEED_ALLREDUCE_BUCKET_ELEMENTS = 500_000_000
DEEPSPEED_ALLREDUCE_BYTES_PER_ELEMENT = 4 + 2
# bytes per logit at the step's peak, the loss computed in fp32 (runlib/train/accumulate.py token_losses,
# torchtitan, Megatron's vocab-parallel cross entropy): the fp32 logits and their gradient. The 16-bit
# lm_head output before the cast is transient on GPU frameworks that free it (torchtitan `del pred`;
# Megatron casts inside the loss); Megatron's fused loss holds less (the softmax written over the fp32
# logits: ~6 bytes), so published Megatron runs with large vocabularies come out high here.
LOGIT_BYTES = 8.0


@dataclass(frozen=True, slots=True)
class MemoryBreakdown:
    weights: float
    master_weights: float
    gradients: float
    optimizer_states: float
    activations: float
    logits: float
    buffers: float
    runtime_overhead: float
    fragmentation: float = 0.0
    # bytes the caching allocator keeps reserved beyond the live peak (not in `total`): blocks allocated
    # after the activations are freed, in sizes the freed blocks cannot serve, so new segments are reserved.
    # What the device reports (nvidia-smi) is total + allocator_cache; what runs out of memory is `total`
    # (on a failed allocation the allocator frees its cached blocks and retries)
    allocator_cache: float = 0.0
    # the model's assumptions for this figure, shown in the plan's JSON: name -> value (hashable pairs)
    assumptions: tuple[tuple[str, object], ...] = ()

    @property
    def total(self) -> float:
        return (
            self.weights
            + self.master_weights
            + self.gradients
            + self.optimizer_states
            + self.activations
            + self.logits
            + self.buffers
            + self.runtime_overhead
            + self.fragmentation
        )

    @property
    def device_reported(self) -> float:
        """What the device reports in use (nvidia-smi): the live peak and the allocator's cache beyond it."""
        return self.total + self.allocator_cache

    @property
    def model_states(self) -> float:
        return self.weights + self.master_weights + self.gradients + self.optimizer_states

    def as_dict(self) -> dict[str, float]:
        return {
            "weights": self.weights,
            "master_weights": self.master_weights,
            "gradients": self.gradients,
            "optimizer_states": self.optimizer_states,
            "activations": self.activations,
            "logits": self.logits,
            "buffers": self.buffers,
            "runtime_overhead": self.runtime_overhead,
            "fragmentation": self.fragmentation,
        }

    def assumptions_dict(self) -> dict[str, object]:
        return dict(self.assumptions)


def state_bytes_per_param(precision: PrecisionSpec) -> tuple[int, int, int, int]:
    """(weights, master, gradients, optimizer states) bytes per parameter."""
    optimizer = 8 if precision.optimizer_states == "fp32" else 4
    if precision.compute == "fp32":
        return 4, 0, 4, optimizer
    master = 4 if precision.master_weights == "fp32" else 0
    grads = 4 if precision.grads == "fp32" else 2
    return 2, master, grads, optimizer  # fp8 keeps 16-bit weights and casts per matmul


def activation_bytes_per_layer(
    model: ModelSpec,
    seq_len: int,
    micro_batch: int,
    tensor: int,
    context: int,
    act_bytes: int,
    *,
    attention_kernel: str = "fused",
    sequence_parallel: bool = True,
    selective: bool = False,
    dropout: bool = False,
    gathered_inputs: bool = False,
) -> float:
    """Bytes one layer keeps for its backward (module docstring: Activations). `dropout` adds
    Korthikanti's dropout masks and outputs (no spec field: runlib trains without dropout); it is
    there to reproduce the paper's Table 2. `gathered_inputs` (parallelism.sequence_parallel_saves:
    gathered): with sequence parallelism the attention and MLP inputs are kept all-gathered, s x b x h
    on every tensor rank, not sharded as in Korthikanti's accounting."""
    s, b, h, f = seq_len / context, micro_batch, model.d_model, model.d_ff
    a, kv, hd = model.heads, kv_heads(model), head_dim(model)
    # norm inputs (2h), attention input (h), MLP input (h): replicated on the tensor ranks without SP
    outside = s * b * (4 * h * act_bytes + (2 * h if dropout else 0))
    # DTensor's PrepareModuleInput(desired_input_layouts=Replicate()) hands wq/wk/wv and w1/w3 the
    # all-gathered input, which the matmuls save (runlib/model/parallelize.py apply_tensor_parallel;
    # torchtitan torchtitan/parallelisms/parallelize_llama.py @ 9dec370ad26b5f8e9a7333a0e36165018262644b)
    gathered = s * b * 2 * h * act_bytes if gathered_inputs else 0.0
    mlp_hidden = 4 * f if gated_mlp(model) else 2 * f  # gated: gate, up, act(gate), product
    # q, k, v (under context parallelism the kernel keeps the row's gathered k and v), attention out, MLP
    inside = s * b * act_bytes * (a * hd + 2 * kv * hd * context + a * hd + mlp_hidden)
    if attention_kernel == "eager" and not selective:
        # the softmax output (a x s x s_keys per sequence), with dropout its mask (1 byte) and output
        inside += a * s * seq_len * b * (act_bytes + (1 + act_bytes if dropout else 0))
    split = sequence_parallel and tensor > 1
    return inside / tensor + ((outside - gathered) / tensor + gathered if split else outside)


def mlp_hidden_bytes(model: ModelSpec, tokens: float, micro_batch: int, act_bytes: int) -> float:
    """The MLP's hidden activations of one layer (gated: gate, up, act(gate), product; else two): what
    activation_checkpointing mlp recomputes instead of keeping (before a tensor-parallel split)."""
    return tokens * micro_batch * act_bytes * (4 if gated_mlp(model) else 2) * model.d_ff


def op_selective_bytes_per_layer(
    model: ModelSpec, seq_len: int, micro_batch: int, tensor: int, context: int, act_bytes: int, sequence_parallel: bool
) -> float:
    """Bytes one layer keeps under op-level selective recomputation (parallelism.activation_checkpointing:
    selective_op; runlib.model.parallelize.op_selective_context, torchtitan's "op" policy): the layer's input,
    the attention kernel's output and the output of every other matmul in the order the block runs them
    (q, k, v, o, then the MLP's gate, up, down: the 1st, 3rd, 5th and 7th are kept)."""
    s, b, h, f = seq_len / context, micro_batch, model.d_model, model.d_ff
    a, kv, hd = model.heads, kv_heads(model), head_dim(model)
    matmuls = [a * hd, kv * hd, kv * hd, h, f, *([f] if gated_mlp(model) else []), h]
    kept = a * hd + sum(matmuls[0::2])  # the kernel's output and the odd-numbered matmuls
    layer_input = h / tensor if sequence_parallel and tensor > 1 else h
    return s * b * act_bytes * (kept / tensor + layer_input)


def cpu_activation_bytes_per_layer(
    model: ModelSpec,
    seq_len: int,
    micro_batch: int,
    tensor: int,
    context: int,
    act_bytes: int,
    selective: bool = False,
) -> float:
    """Bytes one layer keeps for its backward on runlib's CPU path (module docstring: CPU)."""
    s, b, h, f = seq_len / context, micro_batch, model.d_model, model.d_ff
    hd, a, kv = head_dim(model), model.heads, kv_heads(model)
    values = (
        s
        * b
        * (
            (8 if model.norm_position == "sandwich" else 4) * h  # the norms' inputs and outputs (2 or 4 norms)
            + a * hd
            + 2 * kv * hd * context  # RoPE-rotated k and v: under context parallelism, gathered over the row
            + (1 if selective else 2) * a * hd  # the kernel's output (not under selective), the o-projection's input
            + (4 * f if gated_mlp(model) else 2 * f)  # MLP hidden
            + ((a + kv) * hd if model.qk_norm else 0)  # QK-norm inputs
        )
    )
    mask = 0 if selective else b * s * seq_len  # the additive document mask [b, 1, s, s], keys over the whole row
    return (values / tensor + mask) * act_bytes


def pipeline_buffer_bytes(stage_output_bytes: float, in_flight: float, pipeline: int, last: bool) -> float:
    """Pipeline send/receive buffers of a stage that is not the last (module docstring: Pipeline):
    each in-flight micro-batch's stage output, kept for its backward, and the buffer the output's
    gradient is received into. stage_output_bytes: one micro-batch's output on this device."""
    if pipeline <= 1 or last:
        return 0.0
    return (in_flight + 1) * stage_output_bytes


def phase_layout(settings: PhaseSettings, nodes: int) -> Layout:
    """The layout the memory model reads: the settings' parallelism on their devices over `nodes` machines
    (a caller may shrink settings.devices, e.g. to one process: runlib.bench.memory_check)."""
    return build_layout(settings.parallelism, nodes=nodes, devices_per_node=settings.devices // nodes)


def phase_memory(
    model: ModelSpec,
    precision: PrecisionSpec,
    params: ParamCounts,
    vocab_rows: int,
    settings: PhaseSettings,
    runtime_overhead_gib: float,
    nodes: int = 1,
    accelerator: str | None = None,
) -> MemoryBreakdown:
    """The breakdown of the device that needs most; accelerator "cpu" (hardware.accelerator) uses the CPU model."""
    if accelerator == "cpu":
        return cpu_phase_memory(model, precision, params, vocab_rows, settings, nodes)
    par = settings.parallelism
    p = phase_layout(settings, nodes).pp
    stages = pipeline_stage_layers(
        model.layers, p, par.pipeline_first_stage_layers, par.pipeline_last_stage_layers
    ) or _ceil_stages(model.layers, p)
    m = settings.grad_accum
    # (stage index, layers, params on the stage): the first holds the embedding and the most micro-batches
    # in flight, the last the output head (or, tied, a copy of the embedding: Megatron's) and the logits
    token_table = params.embedding - _head_params(model, vocab_rows)  # token (and position) tables
    head = vocab_rows * model.d_model
    candidates = []
    # the first stage holds the most micro-batches in flight, the second the most among the middle
    # stages (all as many layers, fewer in flight further on), the last the logits
    for i in sorted({0, min(1, len(stages) - 1), len(stages) - 1}):
        # a stage's share of the layers' parameters and of the routed experts among them (an even spread of
        # the MoE layers: DeepSeek-V3's 3 dense layers of 61 are not placed)
        stage_params = stages[i] * params.layers_total / model.layers
        stage_experts = stages[i] * params.expert / model.layers
        if i == 0:
            stage_params += token_table
        if i == len(stages) - 1:
            stage_params += head if (p > 1 or not model.tie_embeddings) else 0
            stage_params += params.non_embedding - params.layers_total  # final norm
            # the MTP modules follow the last layer (DeepSeek-V3 section 2.2), their experts with them
            stage_params += params.mtp
            stage_experts += params.expert_per_layer * (model.mtp.depth if model.mtp else 0)
        in_flight = pipeline_in_flight(par.pipeline_schedule, p, par.pipeline_virtual_stages, i, m)
        candidates.append(
            _device_memory(
                model,
                precision,
                params,
                vocab_rows,
                settings,
                nodes,
                runtime_overhead_gib,
                stage=i,
                stage_layers=stages[i],
                stage_params=stage_params,
                stage_experts=stage_experts,
                in_flight=in_flight,
                logits=i == len(stages) - 1,
            )
        )
    return max(candidates, key=lambda mb: mb.total)


def pipeline_in_flight(schedule: str, pipeline: int, virtual: int, stage: int, micro_batches: int) -> float:
    """Micro-batches whose activations pipeline stage `stage` holds at its peak, in units of its whole
    stage's activations: 1F1B stage i keeps pipeline - i forwards before its first backward (Narayanan et
    al. 2021, arXiv 2104.04473 section 2.2.1); GPipe runs every forward first (Huang et al. 2019); interleaved
    1F1B warms up with 2 (pipeline - i - 1) + (virtual - 1) pipeline chunk forwards plus the one in flight,
    each a 1/virtual of the stage (Megatron-LM, megatron/core/pipeline_parallel/schedules.py,
    forward_backward_pipelining_with_interleaving: num_warmup_microbatches); never more than the step's."""
    if pipeline <= 1:
        return 1.0
    if schedule == "gpipe":
        return float(micro_batches)
    if schedule == "interleaved_1f1b" and virtual > 1:
        chunks = 2 * (pipeline - stage - 1) + (virtual - 1) * pipeline + 1
        return min(chunks, micro_batches * virtual) / virtual
    return float(min(pipeline - stage, micro_batches))


def _ceil_stages(layers: int, pipeline: int) -> list[int]:
    """An uneven split without stated first/last stages (PAR003 reports it): the larger share first."""
    base, extra = divmod(layers, pipeline)
    return [base + (1 if i < extra else 0) for i in range(pipeline)]


def _head_params(model: ModelSpec, vocab_rows: int) -> int:
    return 0 if model.tie_embeddings else vocab_rows * model.d_model


def _device_memory(
    model: ModelSpec,
    precision: PrecisionSpec,
    params: ParamCounts,
    vocab_rows: int,
    settings: PhaseSettings,
    nodes: int,
    runtime_overhead_gib: float,
    *,
    stage: int,
    stage_layers: int,
    stage_params: float,
    in_flight: float,
    logits: bool,
    stage_experts: float = 0.0,
) -> MemoryBreakdown:
    """One device's breakdown on pipeline stage `stage` (module docstring: model states, buffers, activations).

    Over 80 lines: every part reads the same stage facts; the parts are named in the module docstring."""
    par = settings.parallelism
    layout = phase_layout(settings, nodes)
    t, c = layout.tp, layout.cp
    # FSDP and ZeRO shard over every data-parallel rank of the context-parallel group as well
    # (runlib.plan.layout: torchtitan's dp_shard_cp mesh, Megatron's data-parallel group with context parallelism)
    n_local = (stage_params - stage_experts) / t
    experts_local = stage_experts / t  # the routed experts: split over the ep ranks, then sharded

    def held(bytes_per_param: int, state: State) -> float:
        return bytes_per_param * (n_local / layout.shards(state) + experts_local / layout.expert_shards(state))

    weights_b, master_b, grads_b, optim_b = state_bytes_per_param(precision)
    master = held(master_b, "master_weights")
    optimizer = held(optim_b, "optimizer_states")
    if layout.offload:
        master = optimizer = 0.0
    gradients = held(grads_b, "gradients")
    sharded_weights = layout.is_sharded("weights")  # fsdp, hsdp: the gathered copies below
    weights = held(weights_b, "weights")
    # what a rank gathers of a stage, and of its largest layer: the routed experts only over the rest of
    # the shard group once the ep ranks hold experts / ep each
    stage_gathered = stage_params - stage_experts * (1 - 1 / layout.ep)
    layer_gathered = params.per_layer - params.expert_per_layer * (1 - 1 / layout.ep)
    buffers = 0.0
    if sharded_weights and layout.pp > 1:
        # under a pipeline FSDP keeps the stage's weights gathered and its gradients unsharded across the
        # micro-batches of a step (torchtitan parallelize: reshard_after_forward off with pp, gradient
        # sync on the last micro-batch only)
        buffers = stage_gathered * (weights_b + grads_b) / t
    elif sharded_weights:
        # gathered 16-bit copies: the layer computed and the one prefetched, the unsharded gradient of
        # the layer before its reduce-scatter, and the root group (embedding, head) for the whole pass
        root = stage_params - stage_layers * params.layers_total / model.layers - params.mtp * logits
        buffers = (layer_gathered * (2 * weights_b + grads_b) + root * weights_b) / t
    # parallelism.grad_accumulation separate_buffer, DeepSpeed's BF16_Optimizer: the accumulator is an fp32
    # gradient of every parameter (deepspeed/runtime/bf16_optimizer.py fp32_groups_gradients_flat, the
    # `gradients` above), and each backward's compute-dtype gradients stay on the parameters beside it,
    # not sharded (update_hp_grads(clear_lp_grads=False) in deepspeed/runtime/pipe/engine.py;
    # deepspeedai/DeepSpeed @ 56c522386878df2513ccb548de76b50191ae3af7)
    grad_buffer = (
        (n_local + experts_local / layout.ep) * weights_b if par.grad_accumulation == "separate_buffer" else 0.0
    )
    buffers += grad_buffer
    # separate_buffer is DeepSpeed's BF16_Optimizer, whose engine all-reduces the fp32 gradients in flattened
    # buckets after the backward (DEEPSPEED_ALLREDUCE_*): held by the allocator, not live at the peak
    allreduce_bucket = (
        min(n_local, DEEPSPEED_ALLREDUCE_BUCKET_ELEMENTS) * DEEPSPEED_ALLREDUCE_BYTES_PER_ELEMENT
        if par.grad_accumulation == "separate_buffer" and layout.data_parallel > 1
        else 0.0
    )

    act_bytes = 4 if precision.compute == "fp32" else 2
    s, b = settings.seq_len / c, settings.micro_batch
    sp = par.sequence_parallel and t > 1
    gathered = par.sequence_parallel_saves == "gathered"
    act_model = activation_twin(model)  # an MoE layer keeps its top_k experts' hidden units
    per_layer = moe_dispatch_bytes_per_layer(model, s, b, act_bytes) + activation_bytes_per_layer(
        act_model,
        settings.seq_len,
        b,
        t,
        c,
        act_bytes,
        attention_kernel=par.attention_kernel,
        sequence_parallel=par.sequence_parallel,
        selective=par.activation_checkpointing == "selective",
        gathered_inputs=gathered,
    )
    # the backward of the last layer holds, beside what is saved, gradients of the same tensors: one
    # layer's activations more (under full recompute: the layer recomputed, and its gradients)
    if par.activation_checkpointing == "full":
        layer_input = s * b * model.d_model * act_bytes / (t if sp else 1)
        activations = stage_layers * in_flight * layer_input + 2 * per_layer
    elif par.activation_checkpointing == "selective_op":
        kept = op_selective_bytes_per_layer(act_model, settings.seq_len, b, t, c, act_bytes, par.sequence_parallel)
        activations = stage_layers * in_flight * kept + 2 * per_layer
    elif par.activation_checkpointing == "mlp":  # the MLP's hidden recomputed: its input stays (in per_layer)
        kept = per_layer - mlp_hidden_bytes(act_model, s, b, act_bytes) / t
        activations = stage_layers * in_flight * kept + per_layer
    else:
        activations = stage_layers * in_flight * per_layer + per_layer
    if stage == 0 and model.embedding_norm:
        # the embedding norm sits outside the recomputed blocks and keeps its input, the embedding's
        # output, for each micro-batch in flight (deepspeed/runtime/pipe/module.py _is_checkpointable @
        # 56c522386878df2513ccb548de76b50191ae3af7: a GPTModelPipe checkpoints only its
        # ParallelTransformerLayerPipe layers; the embedding and its norm run outside)
        activations += in_flight * s * b * model.d_model * act_bytes / (t if sp else 1)
    logit_bytes = LOGIT_BYTES
    logit_mem = logit_bytes * s * b * vocab_rows / t if logits else 0.0
    pipe_buffers = pipeline_buffer_bytes(s * b * model.d_model * act_bytes / t, in_flight, layout.pp, last=logits)
    buffers += pipe_buffers
    fragmentation = FRAGMENTATION * (activations + logit_mem + buffers - grad_buffer)
    assumptions = (
        ("stage", stage),
        ("stage_layers", stage_layers),
        ("stage_params", int(stage_params)),
        ("in_flight_micro_batches", in_flight),
        ("pipeline_schedule", par.pipeline_schedule if layout.pp > 1 else "none"),
        ("state_shard_ranks", layout.shards("optimizer_states")),
        ("attention_kernel", par.attention_kernel),
        ("sequence_parallel", sp),
        ("sequence_parallel_saves", par.sequence_parallel_saves if sp else "n/a"),
        ("recompute", par.activation_checkpointing),
        ("activation_bytes_per_layer", per_layer),
        ("logit_bytes_per_value", logit_bytes),
        ("fragmentation_factor", FRAGMENTATION),
        ("pipeline_buffer_bytes", pipe_buffers),
        ("grad_accumulation", par.grad_accumulation),
        ("param_grad_copy_bytes", grad_buffer),
        ("allreduce_bucket_bytes", allreduce_bucket),
    )
    return MemoryBreakdown(
        weights,
        master,
        gradients,
        optimizer,
        activations,
        logit_mem,
        buffers,
        runtime_overhead_gib * GIB,
        fragmentation,
        allreduce_bucket,
        assumptions,
    )


def cpu_phase_memory(
    model: ModelSpec,
    precision: PrecisionSpec,
    params: ParamCounts,
    vocab_rows: int,
    settings: PhaseSettings,
    nodes: int = 1,
) -> MemoryBreakdown:
    """Peak RSS of one CPU training process (module docstring: CPU): model states as on GPU, DDP's
    gradient buckets, the CPU path's activations, the step's and the evaluation's logits, CPU_RUNTIME_BYTES."""
    par = settings.parallelism
    layout = phase_layout(settings, nodes)
    t, c, p = layout.tp, layout.cp, layout.pp
    states = phase_memory(model, precision, params, vocab_rows, settings, 0.0, nodes)
    # FSDP gathers one layer ahead: 2 unsharded layers (runlib's CPU path: no root group held, measured)
    layer_gathered = params.per_layer - params.expert_per_layer * (1 - 1 / layout.ep)
    buffers = 2 * layer_gathered * state_bytes_per_param(precision)[0] / t if layout.is_sharded("weights") else 0.0
    if layout.sharding == "none" and layout.data_parallel * layout.cp > 1:  # DDP's gradient buckets (over dp x cp)
        held = params.trained - params.expert * (1 - 1 / layout.ep)
        buffers += held / (t * p) * state_bytes_per_param(precision)[2]
    act_bytes = 4 if precision.compute == "fp32" else 2
    s, b = settings.seq_len / c, settings.micro_batch
    selective = par.activation_checkpointing == "selective"
    act_model = activation_twin(model)  # an MoE layer keeps its top_k experts' hidden units
    per_layer = cpu_activation_bytes_per_layer(act_model, settings.seq_len, b, t, c, act_bytes, selective)
    per_layer += moe_dispatch_bytes_per_layer(model, s, b, act_bytes)
    in_flight = min(1.0, settings.grad_accum / p) if p > 1 else 1.0
    if par.activation_checkpointing == "full":
        activations = model.layers * s * b * model.d_model * act_bytes / t * in_flight + per_layer
    elif par.activation_checkpointing == "selective_op":
        kept = op_selective_bytes_per_layer(act_model, settings.seq_len, b, t, c, act_bytes, True)
        activations = model.layers * kept * in_flight + per_layer
    elif par.activation_checkpointing == "mlp":
        kept = per_layer - mlp_hidden_bytes(act_model, s, b, act_bytes) / t
        activations = model.layers * kept * in_flight + per_layer
    else:
        activations = model.layers * per_layer * in_flight
    activations += 2 * s * b * model.d_model * act_bytes / t  # the final norm's input and output
    # fp32 logits and their gradient (16-bit compute also holds the lm_head's 16-bit output), plus the
    # held-out evaluation's fp32 logits and log-softmax over HELDOUT_BATCH whole windows
    step_logits = (8.0 + (0 if act_bytes == 4 else 2)) * s * b * vocab_rows / t
    eval_logits = 2 * 4.0 * HELDOUT_BATCH * settings.seq_len * vocab_rows / t
    return MemoryBreakdown(
        states.weights,
        states.master_weights,
        states.gradients,
        states.optimizer_states,
        activations,
        step_logits + eval_logits,
        buffers,
        CPU_RUNTIME_BYTES,
    )
