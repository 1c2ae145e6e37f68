"""`runlib shrink`'s shape choice: the model for the minutes asked, and the sections that follow from the
machine (tokenizer, parallelism, precision), each with the header comments that say what changed."""

from __future__ import annotations

from typing import Any

from runlib.audit.checks.tok004_reserved_tokens_out_of_range import LOW as RESERVED_LOW
from runlib.spec import RunSpec
from runlib.spec.models import ParallelismOverride, ParallelismSpec

DEVICES = 2  # one training process per core of a 2-core machine
MICRO_BATCH = 4
VOCAB_IDS = 1024
TRAIN_BYTES = 400_000
# Training tokens per second assumed for each shape on 2 cores with 2 gloo processes. DEMO: the README's
# measured rate of the demo's foundation phase (~3,500 tokens/s; runlib.bench.train_step measures ~5,900
# for the step alone). SMALL: an assumption, a fifth of the demo model's FLOPs per token; the one measured
# run (OLMo 2 7B shrunk for 2 minutes, on a 2-core machine shared with other jobs at load ~10) trained
# at ~2,150 tokens/s, so on a busy machine the run takes longer than asked. Half of the wall time is left
# to the data stages, the tokenizer, evaluation and each job's start.
SMALL = {"layers": 2, "d_model": 64, "heads": 4, "seq_len": 128, "tokens_per_s": 6_000}
DEMO = {"layers": 4, "d_model": 128, "heads": 4, "seq_len": 256, "tokens_per_s": 3_500}
TRAIN_SHARE = 0.5
FP32 = {"compute": "fp32", "master_weights": "fp32", "grads": "fp32", "optimizer_states": "fp32"}


def choose_shape(minutes: float) -> dict[str, int]:
    """The demo's 4 x 128 from 10 minutes, 2 x 64 below."""
    return dict(DEMO if minutes >= 10 else SMALL)


def model_section(spec: RunSpec, shape: dict[str, int]) -> tuple[dict[str, Any], list[str]]:
    """The shrunk model: the shape's size, the published d_ff and GQA ratios and the block's structure."""
    m = spec.model
    heads = shape["heads"]
    kv_ratio = (m.kv_heads or m.heads) / m.heads
    kv_heads = max(1, round(heads * kv_ratio))
    while heads % kv_heads:
        kv_heads -= 1
    d_model = shape["d_model"]
    d_ff = max(8, round(d_model * m.d_ff / m.d_model / 8) * 8)  # the published d_ff / d_model ratio
    position = m.position
    notes = [
        f"model: {m.layers} layers x {m.d_model} (d_ff {m.d_ff}, {m.heads}/{m.kv_heads or m.heads} heads) -> "
        f"{shape['layers']} x {d_model} (d_ff {d_ff}, {heads}/{kv_heads} heads), the same d_ff ratio and GQA ratio"
    ]
    if position == "relative":
        # runlib's attention has no Transformer-XL relative term (Dai et al. 2019, section 3.3): the trainer
        # refuses it (RUN008). ALiBi (Press et al. 2022) is the relative scheme it builds: no position
        # parameters, a per-head penalty on the distance
        position = "alibi"
        notes.append("model: position relative -> alibi (the trainer has no Transformer-XL relative attention: RUN008)")
    model: dict[str, Any] = {
        "layers": shape["layers"],
        "d_model": d_model,
        "heads": heads,
        "kv_heads": kv_heads,
        "d_ff": d_ff,
        "activation": m.activation,
        "norm": m.norm,
        "bias": m.bias,
        "position": position,
        "rope_theta": m.rope_theta,
        "qk_norm": m.qk_norm,
        "tie_embeddings": m.tie_embeddings,
        "vocab_size": VOCAB_IDS,
        "seq_len": shape["seq_len"],
    }
    # the block's structure, enacted by the trainer at tensor 1 (RUN008 refuses them only under tensor
    # parallelism): Falcon's biased LayerNorm and parallel block, BLOOM's embedding norm, OPT's dropout
    if m.norm_bias is not None:
        model["norm_bias"] = m.norm_bias
    for name in ("parallel_block", "embedding_norm"):
        if getattr(m, name):
            model[name] = True
    if m.dropout:
        model["dropout"] = m.dropout
    # Qwen2's q/k/v biases and OLMo 2's or Gemma's norm placement: the same block at any width
    if m.qkv_bias is not None:
        model["qkv_bias"] = m.qkv_bias
    if m.norm_position != "pre":
        model["norm_position"] = m.norm_position
    sparse, sparse_notes = sparse_sections(spec, shape, d_model / m.d_model)
    model.update(sparse)
    if m.attention is not None:
        model["kv_heads"] = heads  # latent attention gives every head its keys and values
    return model, notes + sparse_notes


SHRUNK_EXPERTS = 8  # routed experts of a shrunk MoE layer: enough to route among, small enough for a CPU


def _width(width: int, scale: float, multiple: int = 8) -> int:
    """A published width scaled with d_model, a multiple of `multiple`, at least `multiple`."""
    return max(multiple, round(width * scale / multiple) * multiple)


def sparse_sections(spec: RunSpec, shape: dict[str, int], scale: float) -> tuple[dict[str, Any], list[str]]:
    """model.moe, attention (MLA) and mtp at the shrunk width: at most SHRUNK_EXPERTS experts with top-2 (or
    the published top-k when smaller), widths scaled with d_model, the router and its balancing as published,
    dense layers in proportion (at least one when the run has any, never all)."""
    m, layers = spec.model, shape["layers"]
    out: dict[str, Any] = {}
    notes: list[str] = []
    if m.moe is not None:
        moe = m.moe
        experts = min(moe.experts, SHRUNK_EXPERTS)
        top_k = min(experts, moe.top_k, max(2, round(experts * moe.top_k / moe.experts)))
        section = moe.model_dump(exclude_defaults=True) | {
            "experts": experts,
            "top_k": top_k,
            "expert_d_ff": _width(moe.expert_d_ff, scale),
        }
        if moe.shared_d_ff is not None:
            section["shared_d_ff"] = _width(moe.shared_d_ff, scale)
        if moe.dense_layers:
            section["dense_layers"] = min(layers - 1, max(1, round(moe.dense_layers * layers / m.layers)))
        if moe.every > layers:
            section["every"] = layers
        if moe.groups is not None:
            groups = max(
                g for g in range(1, experts + 1) if experts % g == 0 and g <= moe.groups and g <= experts // 2 or g == 1
            )
            per_token = max(1, min(groups, round(groups * (moe.groups_per_token or moe.groups) / moe.groups)))
            while top_k > per_token * experts // groups:
                per_token += 1
            section["groups"], section["groups_per_token"] = groups, per_token
        out["moe"] = section
        notes.append(
            f"model.moe: {moe.experts} experts top-{moe.top_k} of {moe.expert_d_ff} -> {experts} top-{top_k} of "
            f"{section['expert_d_ff']}, dense layers {moe.dense_layers} -> {section.get('dense_layers', 0)}; the "
            "router and its balancing as published"
        )
    if m.attention is not None:
        a = m.attention
        head_scale = (shape["d_model"] / shape["heads"]) / (m.d_model / m.heads)
        out["attention"] = {
            "kind": "mla",
            **({"q_lora_rank": _width(a.q_lora_rank, scale)} if a.q_lora_rank is not None else {}),
            "kv_lora_rank": _width(a.kv_lora_rank, scale),
            "qk_rope_head_dim": _width(a.qk_rope_head_dim, head_scale, 2),
            "qk_nope_head_dim": _width(a.qk_nope_head_dim, head_scale) if a.qk_nope_head_dim else 0,
            "v_head_dim": _width(a.v_head_dim, head_scale),
        }
        notes.append("model.attention: latent attention kept, its ranks and head widths scaled with the model")
    if m.mtp is not None:
        out["mtp"] = m.mtp.model_dump()
    return out, notes


def tokenizer_section(spec: RunSpec, first_mixture: dict[str, float]) -> tuple[dict[str, Any], list[str]]:
    """A BPE of VOCAB_IDS ids trained on the first phase's mixture, with the published options."""
    t = spec.tokenizer
    reserved = min(t.reserved_tokens, 256)
    if t.pretrained:  # a pretrained tokenizer's count of special tokens; the trained one reserves as TOK004 asks
        reserved = max(reserved, RESERVED_LOW)
    learned = VOCAB_IDS - reserved - len(set(t.domain_tokens))
    out: dict[str, Any] = {"vocab_size": learned, "reserved_tokens": reserved, "digits": t.digits}
    if t.domain_tokens:
        out["domain_tokens"] = list(t.domain_tokens)
    if t.drop_tokens:
        out["drop_tokens"] = list(t.drop_tokens)
    train_on = dict(t.train_on) or {k: w for k, w in first_mixture.items() if w > 0}
    out["train_on"] = train_on
    out["train_bytes"] = TRAIN_BYTES
    out["min_frequency"] = t.min_frequency
    notes = []
    if t.pretrained:
        notes.append(
            f"tokenizer: pretrained {t.pretrained} -> a {learned}-token BPE trained on the first phase's mixture "
            f"(+{reserved} reserved)"
        )
    else:
        notes.append(f"tokenizer: {t.vocab_size} learned tokens -> {learned} (+{reserved} reserved)")
    return out, notes


def parallelism_section(p: ParallelismSpec | ParallelismOverride, override: bool = False) -> dict[str, Any]:
    """The sharding kind and the recomputation, kept; tensor, pipeline and context 1 (not in a phase's override)."""
    out: dict[str, Any] = {}
    sharding = p.sharding
    if sharding == "hsdp":
        sharding = "fsdp"  # one node: hsdp is fsdp
    if sharding is not None:
        out["sharding"] = sharding
    if p.activation_checkpointing is not None:
        out["activation_checkpointing"] = p.activation_checkpointing
    if not override:
        out.update({"tensor": 1, "pipeline": 1, "context": 1})
    return out


def machine_notes(spec: RunSpec) -> list[str]:
    """The header's comments for what the CPU machine replaces: model parallelism and offload, precision,
    and the planning-only layout fields."""
    notes = []
    par = spec.parallelism
    if par.tensor * par.pipeline * par.context > 1 or par.offload:
        notes.append("parallelism: tensor, pipeline, context 1 and no offload (a CPU run enacts none of them)")
    p = spec.precision
    if p.compute != "fp32" or p.master_weights != "fp32" or p.optimizer_states != "fp32" or p.grads != "fp32":
        notes.append(f"precision: {p.compute} compute -> fp32 (what a CPU runs at full speed without autocast)")
    if p.grads == "fp16":
        notes.append("precision: grads fp16 -> fp32 (the trainer reduces gradients in fp32 or bf16 only: RUN009)")
    return notes + planning_only_notes(spec)


def planning_only_notes(spec: RunSpec) -> list[str]:
    """Comments for the parallelism fields the shrunk spec leaves at their defaults (planning only; they
    describe the memory of a layout that tensor, pipeline and context 1 on a CPU do not have)."""
    par = spec.parallelism
    layouts: list[ParallelismSpec | ParallelismOverride] = [par]
    layouts += [ph.parallelism for ph in spec.phases if ph.parallelism is not None]
    notes = []
    if any(p.attention_kernel == "eager" for p in layouts):
        notes.append(
            "parallelism: attention_kernel eager -> fused (planning only: the trainer runs torch's "
            "scaled_dot_product_attention, which stores no s x s scores)"
        )
    if any(p.pipeline_first_stage_layers or p.pipeline_last_stage_layers for p in layouts):
        notes.append("parallelism: pipeline_first/last_stage_layers dropped (pipeline 1: one stage holds every layer)")
    if any(p.sequence_parallel is False for p in layouts):
        notes.append("parallelism: sequence_parallel false dropped (tensor 1: nothing to split along the sequence)")
    return notes
