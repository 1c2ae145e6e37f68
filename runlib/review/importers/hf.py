"""Hugging Face `config.json` (transformers), optionally with a TrainingArguments JSON.

Families, by `model_type` (field names as transformers' configuration_<family>.py defines them):
  llama, mistral, qwen2, olmo2,  RMSNorm, SwiGLU (intermediate_size), RoPE (rope_theta), GQA
  qwen3, phi3, olmo3, smollm3    (num_key_value_heads); qwen2 biases q, k and v only (qkv_bias); olmo2 adds
                                 QK-norm over the full q and k widths and its norms after the sublayers
                                 (norm_position: output), qwen3 QK-norm per head (qk_norm: per_head); phi3
                                 fuses qkv_proj and gate_up_proj (the same parameters); olmo3 is olmo2 with
                                 sliding windows (layer_types); smollm3 drops RoPE from every
                                 no_rope_layer_interval-th layer (nope_every)
  stablelm                       LayerNorm with biases, q/k/v biases (use_qkv_bias), partial RoPE
  gemma2, gemma3_text            GeGLU (activation geglu), RMSNorm before and after each sublayer
                                 (norm_position: sandwich), embeddings times sqrt(hidden_size), head_dim,
                                 query_pre_attn_scalar, soft-capping, alternating sliding windows, tied
                                 embeddings; gemma3 adds per-head QK-norm
  starcoder2                     LayerNorm and biases (use_bias), a plain GELU MLP, RoPE, GQA
  gpt2                           n_layer/n_embd/n_head/n_positions, n_inner (None: 4*n_embd), LayerNorm
                                 and biases, learned positions, tied head (tie_word_embeddings default True)
  gpt_neox                       LayerNorm and biases, GELU MLP, rotary on rotary_pct of each head
  nemotron                       LayerNorm scaled by 1 + weight, with a bias (layernorm1p), squared ReLU
                                 (up, down), RoPE on partial_rotary_factor of each head (Nemotron-4)
  mixtral, olmoe, qwen2_moe,     the llama block with mixture-of-experts MLPs (model.moe); olmoe with
  qwen3_moe, deepseek_v2,        QK-norm over the full projections, qwen2_moe with q/k/v biases, qwen3_moe
  deepseek_v3                    per-head QK-norm; DeepSeek's with multi-head latent attention
                                 (model.attention) and V3's multi-token prediction (model.mtp): the
                                 experts' keys in runlib.review.importers.hf_moe
Sliding windows (sliding_window with use_sliding_window, layer_types) become model.sliding_window and
global_every. What a run spec cannot express is stated in the header (NeoX's parallel residual with two
norms, a layer_types pattern that is not regular, rope_scaling, which is a context extension of the released
model), with its effect on the parameter count. The header states the total parameters and, for a mixture
of experts, the active ones (and the MTP modules'). The config says nothing about training: without
--training-args the batch and LR come from the DeepSeek LLM fit (arXiv 2401.02954, eq. 1) and the tokens
from ~20 per parameter (Chinchilla, arXiv 2203.15556), all marked `assumed:`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from runlib.plan import scaling
from runlib.plan.params import ParamCounts, attention_flop_width, count_params
from runlib.review.importers.common import fill_defaults, spec_name, whole
from runlib.review.importers.draft import Draft, HardwareChoice, UnmappableConfig
from runlib.review.importers.hf_moe import MLA_FAMILIES, MOE_FAMILIES, map_moe
from runlib.spec.models import ModelSpec

FAMILIES = (
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "olmo2",
    "olmo3",
    "phi3",
    "smollm3",
    "stablelm",
    "gemma2",
    "gemma3_text",
    "starcoder2",
    "gpt2",
    "gpt_neox",
    "nemotron",
    *MOE_FAMILIES,
)
MAX_PRETRAIN_SEQ = 8192  # a max_position_embeddings above this is taken as a context extension, not pretraining
CHINCHILLA_TOKENS_PER_PARAM = 20


def model_dir_name(path: Path) -> str:
    """The model's name from where its config.json lies: the folder, or in the Hugging Face hub cache
    (huggingface_hub's layout, models--<org>--<name>/snapshots/<commit>/config.json) the repository's
    name, not the commit hash (Llama 3.2's published config.json has no _name_or_path)."""
    folder = path.parent  # not resolved: in the cache config.json is a link into blobs/
    if folder.parent.name == "snapshots" and folder.parent.parent.name.startswith("models--"):
        return folder.parent.parent.name.split("--")[-1]
    return folder.name


def _need(config: dict[str, Any], key: str, file: str, family: str) -> int:
    if key not in config or config[key] is None:
        raise UnmappableConfig(f"{file}: {family} config without {key!r}; is this the model's config.json?")
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UnmappableConfig(f"{file}: {key} = {value!r} is not a number")
    return whole(value, file, key)  # every value read through _need is a count


# ------------------------------------------------------------------------ read and validate the file


def _family(config: dict[str, Any], file: str) -> str:
    """The config's model_type, one of FAMILIES."""
    family = config.get("model_type")
    if family not in FAMILIES:
        raise UnmappableConfig(
            f"{file}: model_type {family!r} is not a family runlib maps ({', '.join(FAMILIES)}); "
            "a config.json from transformers names it in `model_type`"
        )
    return str(family)


def _validated_model(d: Draft, file: str) -> ModelSpec:
    """The mapped model as the schema reads it; a value out of its bounds named by the config's key."""
    try:  # nested: model.moe.*, model.attention.* and model.mtp.* are sections of their own
        return ModelSpec.model_validate(d.nested().get("model", {}))
    except ValidationError as exc:  # the schema's bounds (layers, heads, widths), named by the config's keys
        refused = []
        for error in exc.errors()[:4]:
            where = "model." + ".".join(str(part) for part in error["loc"])
            source = d.comments.get(where, where).split(" ")[0]
            refused.append(f"{source} = {str(error.get('input'))[:40]} ({where}: {error['msg']})")
        raise UnmappableConfig(f"{file}: " + "; ".join(refused) + ": write the values of a real model") from None


# ----------------------------------------------------------------------------------- map the model


def _model(d: Draft, config: dict[str, Any], family: str, file: str) -> list[str]:
    """model.*, by family; the header's notes on what the spec cannot express."""
    if family == "gpt2":
        _gpt2_model(d, config, file)
        return []
    hidden = _need(config, "hidden_size", file, family)
    heads = _need(config, "num_attention_heads", file, family)
    d.set("model.layers", _need(config, "num_hidden_layers", file, family), "num_hidden_layers")
    d.set("model.d_model", hidden, "hidden_size")
    d.set("model.heads", heads, "num_attention_heads")
    kv = config.get("num_key_value_heads") or heads
    if family not in MLA_FAMILIES:  # latent attention: each head's keys and values from a shared latent
        d.set("model.kv_heads", int(kv), "num_key_value_heads")
    if config.get("head_dim") and int(config["head_dim"]) != hidden // heads and family not in MLA_FAMILIES:
        d.set("model.head_dim", int(config["head_dim"]), "head_dim")
    d.set("model.d_ff", _need(config, "intermediate_size", file, family), "intermediate_size")
    d.set("model.vocab_size", _need(config, "vocab_size", file, family), "vocab_size")
    d.set("model.position", "rope", "rotary embeddings")
    theta_key = "rotary_emb_base" if family == "gpt_neox" else "rope_theta"
    given = config.get("rope_parameters")
    nested: dict[str, Any] = given if isinstance(given, dict) else {}
    theta = config.get(theta_key) or nested.get("rope_theta") or 10000.0  # transformers 5.x nests it
    d.set("model.rope_theta", float(theta), theta_key)
    partial = config.get("partial_rotary_factor") or nested.get("partial_rotary_factor")
    if partial and float(partial) < 1:
        d.set("model.rope_fraction", float(partial), "partial_rotary_factor")
    if family == "gpt_neox":
        return _neox_block(d, config, file)
    if family == "starcoder2":
        return _starcoder2_block(d, config, file, hidden, heads, int(kv))
    if family in ("gemma2", "gemma3_text"):
        return _gemma_block(d, config, family, file, hidden, heads, int(kv))
    if family == "stablelm":
        return _stablelm_block(d, config, file)
    if family == "nemotron":
        return _nemotron_block(d, config, file)
    notes = _swiglu_block(d, config, family, file, hidden, heads, int(kv))
    return notes + (map_moe(d, config, family, file) if family in MOE_FAMILIES else [])


def _stablelm_block(d: Draft, config: dict[str, Any], file: str) -> list[str]:
    """StableLM 2 (transformers models/stablelm): LayerNorm with biases, bias-free linear layers but for q, k and
    v (use_qkv_bias), SwiGLU, RoPE on partial_rotary_factor of each head, optionally one norm for parallel
    attention and MLP (use_parallel_residual)."""
    if config.get("qk_layernorm"):
        raise UnmappableConfig(
            f"{file}: qk_layernorm true: StableLM's per-head LayerNorms (a weight per head) are not a runlib field"
        )
    act = str(config.get("hidden_act", "silu"))
    if act not in ("silu", "swish"):
        raise UnmappableConfig(f"{file}: hidden_act {act!r}: a stablelm MLP maps to swiglu (silu) only")
    d.set("model.activation", "swiglu", "SiLU-gated MLP (gate, up, down)")
    d.set("model.norm", "layernorm", "LayerNorm")
    d.set("model.norm_bias", True, "LayerNorm with a bias")
    d.set("model.bias", False, "no o_proj or MLP biases")
    d.set("model.qkv_bias", bool(config.get("use_qkv_bias", False)), "use_qkv_bias")
    if config.get("use_parallel_residual"):
        d.set("model.parallel_block", True, "use_parallel_residual: one norm before attention and MLP")
    d.set("model.tie_embeddings", bool(config.get("tie_word_embeddings", False)), "tie_word_embeddings")
    return _windows(d, config, "stablelm")


def _nemotron_block(d: Draft, config: dict[str, Any], file: str) -> list[str]:
    """Nemotron-4 (arXiv 2402.16819 section 2.1; transformers models/nemotron): NemotronLayerNorm1P, biased, in
    every norm; squared ReLU as down(relu(up(x))^2); untied embeddings by default."""
    act = str(config.get("hidden_act", "relu2"))
    if act != "relu2":
        raise UnmappableConfig(f"{file}: hidden_act {act!r}: a nemotron MLP maps to relu2 (squared ReLU) only")
    attention_bias, mlp_bias = bool(config.get("attention_bias", False)), bool(config.get("mlp_bias", False))
    if attention_bias != mlp_bias:
        raise UnmappableConfig(
            f"{file}: attention_bias={attention_bias} with mlp_bias={mlp_bias}: a spec's `bias` covers both; "
            "set them alike"
        )
    d.set("model.activation", "relu2", "hidden_act relu2: squared ReLU (up, down)")
    d.set("model.norm", "layernorm1p", "NemotronLayerNorm1P: LayerNorm scaled by 1 + weight")
    d.set("model.norm_bias", True, "NemotronLayerNorm1P has a bias")
    d.set("model.bias", attention_bias, "attention_bias, mlp_bias")
    d.set("model.tie_embeddings", bool(config.get("tie_word_embeddings", False)), "tie_word_embeddings")
    return _windows(d, config, "nemotron")


def _windows(d: Draft, config: dict[str, Any], family: str) -> list[str]:
    """model.sliding_window and global_every from the config (sliding_window with use_sliding_window, Gemma's
    alternation, Gemma 3's sliding_window_pattern or any config's layer_types); the header's notes."""
    notes = []
    window = config.get("sliding_window")
    if window and config.get("use_sliding_window", True):
        layers = int(d.get("model.layers"))
        kinds = config.get("layer_types")
        if not isinstance(kinds, list) or len(kinds) != layers:
            pattern = {"gemma2": 2, "gemma3_text": int(config.get("sliding_window_pattern") or 6)}.get(family)
            kinds = [
                "full_attention" if pattern and (i + 1) % pattern == 0 else "sliding_attention" for i in range(layers)
            ]
        full = [i for i, kind in enumerate(kinds) if kind != "sliding_attention"]
        every = full[0] + 1 if full else None
        if every is not None and full != [i for i in range(layers) if (i + 1) % every == 0]:
            notes.append(
                f"layer_types {kinds} is not a regular alternation: every {every}th layer global stands in for it."
            )
        d.set("model.sliding_window", int(window), "sliding_window")
        if every is not None:
            d.set("model.global_every", every, "layer_types: every this-th layer attends globally")
    if config.get("rope_scaling"):
        notes.append(
            f"rope_scaling {config['rope_scaling']} is a context extension applied after pretraining: not part of this spec."
        )
    return notes


def _starcoder2_block(d: Draft, config: dict[str, Any], file: str, hidden: int, heads: int, kv: int) -> list[str]:
    """StarCoder2 (Lozhkov et al. 2024, arXiv 2402.19173): LayerNorm, biases on every linear layer, c_fc/c_proj."""
    act = str(config.get("hidden_act", "gelu_pytorch_tanh"))
    if "gelu" not in act:
        raise UnmappableConfig(f"{file}: hidden_act {act!r}: a starcoder2 MLP maps to gelu only")
    if str(config.get("mlp_type", "default")) != "default":
        raise UnmappableConfig(f"{file}: mlp_type {config.get('mlp_type')!r}: only StarCoder2's plain MLP maps")
    d.set("model.activation", "gelu", f"hidden_act {act}")
    d.set("model.norm", "layernorm", "norm_type layer_norm")
    d.set("model.bias", bool(config.get("use_bias", True)), "use_bias")
    d.set("model.tie_embeddings", bool(config.get("tie_word_embeddings", True)), "tie_word_embeddings (default true)")
    return _windows(d, config, "starcoder2")


def _gemma_block(
    d: Draft, config: dict[str, Any], family: str, file: str, hidden: int, heads: int, kv: int
) -> list[str]:
    """Gemma 2 (arXiv 2408.00118) and Gemma 3 (arXiv 2503.19786): GeGLU, sandwich RMSNorm, tied embeddings."""
    act = str(config.get("hidden_activation") or config.get("hidden_act") or "gelu_pytorch_tanh")
    if "gelu" not in act:
        raise UnmappableConfig(f"{file}: hidden_activation {act!r}: a {family} MLP maps to a GELU gate only")
    d.set("model.activation", "geglu", f"GeGLU: {act} gate")
    d.set("model.norm", "rmsnorm", "RMSNorm (scaling by 1 + weight: the same function)")
    d.set("model.bias", bool(config.get("attention_bias", False)), "attention_bias")
    d.set("model.tie_embeddings", bool(config.get("tie_word_embeddings", True)), "tie_word_embeddings (default true)")
    d.set("model.norm_position", "sandwich", "RMSNorm before and after each sublayer")
    d.set("model.embedding_multiplier", hidden**0.5, "embeddings times sqrt(hidden_size)")
    hd = int(config.get("head_dim") or hidden // heads)
    scalar = config.get("query_pre_attn_scalar")
    if scalar and int(scalar) != hd:
        d.set("model.attention_scale_dim", int(scalar), "query_pre_attn_scalar")
    for key, field in (("attn_logit_softcapping", "attention_softcap"), ("final_logit_softcapping", "final_softcap")):
        if config.get(key):
            d.set(f"model.{field}", float(config[key]), key)
    if family == "gemma3_text":
        d.set("model.qk_norm", "per_head", "Gemma 3: RMSNorm on q and k per head")
    return _windows(d, config, family)


def _gpt2_model(d: Draft, config: dict[str, Any], file: str) -> None:
    family = "gpt2"
    n_embd = _need(config, "n_embd", file, family)
    d.set("model.layers", _need(config, "n_layer", file, family), "n_layer")
    d.set("model.d_model", n_embd, "n_embd")
    d.set("model.heads", _need(config, "n_head", file, family), "n_head")
    d.set("model.d_ff", int(config.get("n_inner") or 4 * n_embd), "n_inner (None: 4 * n_embd)")
    d.set("model.activation", "gelu", f"activation_function {config.get('activation_function', 'gelu_new')}")
    d.set("model.norm", "layernorm", "GPT-2 LayerNorm")
    d.set("model.bias", True, "Conv1D and LayerNorm biases")
    d.set("model.position", "learned", "wpe")
    d.set("model.tie_embeddings", bool(config.get("tie_word_embeddings", True)), "tie_word_embeddings (default true)")
    d.set("model.vocab_size", _need(config, "vocab_size", file, family), "vocab_size")
    d.set("model.seq_len", _need(config, "n_positions", file, family), "n_positions")


def _neox_block(d: Draft, config: dict[str, Any], file: str) -> list[str]:
    act = str(config.get("hidden_act", "gelu"))
    if "gelu" not in act:
        raise UnmappableConfig(f"{file}: hidden_act {act!r}: a GPT-NeoX MLP maps to gelu only")
    d.set("model.activation", "gelu", f"hidden_act {act}")
    d.set("model.norm", "layernorm", "LayerNorm with bias")
    d.set("model.bias", bool(config.get("attention_bias", True)), "attention_bias (default true); dense layers biased")
    d.set("model.tie_embeddings", bool(config.get("tie_word_embeddings", False)), "tie_word_embeddings")
    pct = float(config.get("rotary_pct", 1.0))
    d.set("model.rope_fraction", pct, "rotary_pct: the share of each head RoPE rotates")
    if config.get("use_parallel_residual", True):  # GPTNeoXConfig's default
        d.set("model.parallel_block", True, "use_parallel_residual: x + attn(ln1(x)) + mlp(ln2(x))")
        d.set("model.parallel_norms", 2, "input_layernorm and post_attention_layernorm, one per branch")
    return []


def _swiglu_block(
    d: Draft, config: dict[str, Any], family: str, file: str, hidden: int, heads: int, kv: int
) -> list[str]:
    """llama, mistral, qwen2, qwen3, olmo2, phi3 and the MoE families: SwiGLU and RMSNorm; biases, QK-norm,
    and what the spec cannot express."""
    notes: list[str] = []
    act = str(config.get("hidden_act", "silu"))
    if act not in ("silu", "swish"):
        raise UnmappableConfig(f"{file}: hidden_act {act!r}: a {family} MLP maps to swiglu (silu) only")
    d.set("model.activation", "swiglu", "SiLU-gated MLP (gate, up, down)")
    d.set("model.norm", "rmsnorm", "RMSNorm")
    if family in ("qwen2", "qwen2_moe"):
        d.set("model.bias", False, "no o_proj or MLP biases")
        qkv = config.get("qkv_bias", True)  # configuration_qwen2_moe.py: qkv_bias, default true
        d.set("model.qkv_bias", qkv is not False, "Qwen2: q_proj, k_proj and v_proj with biases (qkv_bias)")
    else:
        bias = bool(config.get("attention_bias", False)) or bool(config.get("mlp_bias", False))
        if bool(config.get("attention_bias", False)) != bool(config.get("mlp_bias", False)):
            raise UnmappableConfig(
                f"{file}: attention_bias={config.get('attention_bias')} with mlp_bias={config.get('mlp_bias')}: a spec's "
                "`bias` covers both; set them alike"
            )
        d.set("model.bias", bias, "attention_bias, mlp_bias")
    d.set("model.tie_embeddings", bool(config.get("tie_word_embeddings", False)), "tie_word_embeddings")
    if family in ("olmo2", "olmo3"):
        d.set("model.qk_norm", True, "OLMo 2 and 3: RMSNorm over the full q and k projections")
        d.set("model.norm_position", "output", "OLMo 2 and 3: the norms after the attention and the MLP")
    if family == "smollm3":
        notes += _nope_layers(d, config, int(d.get("model.layers")))
    if family in ("qwen3", "qwen3_moe"):
        d.set("model.qk_norm", "per_head", "Qwen3: RMSNorm on q and k per head")
    if family == "olmoe":
        d.set("model.qk_norm", True, "OLMoE: RMSNorm over the full q and k projections (q_norm, k_norm)")
    if family == "phi3":
        notes.append(
            "Phi-3 fuses q, k, v (qkv_proj) and the gate and up projections (gate_up_proj): the same parameters."
        )
    return notes + _windows(d, config, family)


def _nope_layers(d: Draft, config: dict[str, Any], layers: int) -> list[str]:
    """SmolLM3's layers without RoPE: no_rope_layers (1: RoPE, 0: none), else every no_rope_layer_interval-th."""
    interval = int(config.get("no_rope_layer_interval") or 4)
    said = config.get("no_rope_layers")
    pattern = [int((i + 1) % interval != 0) for i in range(layers)]
    d.set("model.nope_every", interval, "no_rope_layer_interval: every this-th layer without RoPE")
    if isinstance(said, list) and [int(x) for x in said] != pattern:
        return [f"no_rope_layers {said} is not every {interval}th layer: that pattern stands in for it."]
    return []


def _seq_len(d: Draft, config: dict[str, Any], args: dict[str, Any] | None, file: str) -> int:
    """model.seq_len: n_positions (gpt2), max_position_embeddings up to MAX_PRETRAIN_SEQ, or the arguments'."""
    seq = int(d.get("model.seq_len") or config.get("max_position_embeddings") or 0)
    scaling = config.get("rope_scaling")
    original = scaling.get("original_max_position_embeddings") if isinstance(scaling, dict) else None
    if not d.has("model.seq_len") and isinstance(original, int) and 0 < original < seq:
        # YaRN and Llama 3.1's scaling extend a model pretrained at original_max_position_embeddings
        d.set("model.seq_len", original, f"rope_scaling.original_max_position_embeddings (extended to {seq})")
    if not d.has("model.seq_len"):
        if seq <= 0:
            raise UnmappableConfig(f"{file}: no max_position_embeddings; give the training sequence length")
        if seq > MAX_PRETRAIN_SEQ:
            d.set(
                "model.seq_len",
                MAX_PRETRAIN_SEQ,
                f"assumed: pretraining context (max_position_embeddings {seq} is the extended one)",
            )
        else:
            d.set("model.seq_len", seq, "max_position_embeddings")
    seq = int(d.get("model.seq_len"))
    if args and (args.get("block_size") or args.get("max_seq_length")):
        seq = int(args.get("block_size") or args["max_seq_length"])
        d.set("model.seq_len", seq, "block_size / max_seq_length [ARGS]")
    return seq


def _tokenizer(d: Draft, config: dict[str, Any], family: str) -> None:
    vocab = int(d.get("model.vocab_size"))
    d.set(
        "tokenizer.pretrained",
        f"tokenizers/{spec_name(str(config.get('_name_or_path') or family))}/tokenizer.json",
        "assumed: the model's own tokenizer, saved here",
    )
    d.set("tokenizer.vocab_size", vocab - 1, "assumed: every embedding row a token id")
    d.set("tokenizer.reserved_tokens", 1, "assumed: one end-of-document token among them")


# --------------------------------------------------------------------------------- map the training


def _hardware(d: Draft, params: ParamCounts) -> int:
    """The devices, sized to the model (the config names none); their count, all data-parallel."""
    devices_total = 8 if params.total < 3e9 else 64 if params.total < 30e9 else 512
    d.set("hardware.accelerator", "h100-sxm", "assumed: the config names no hardware")
    d.set("hardware.nodes", devices_total // 8, "assumed: sized to the model (8 GPUs below 3B, 64 below 30B, else 512)")
    d.set("hardware.devices_per_node", 8, "assumed: 8-GPU nodes")
    d.set("parallelism.sharding", "fsdp", "assumed: FSDP, no model parallelism")
    experts = d.get("model.moe.experts")
    if experts:
        # the routed experts split over one node's devices (all-to-all on NVLink); an MoE layer keeps top_k
        # copies of each token for its backward, so every layer is recomputed
        d.set("parallelism.expert", math.gcd(int(experts), 8), "assumed: expert parallelism within a node")
        d.set("parallelism.activation_checkpointing", "full", "assumed: MoE layers keep top_k copies of each token")
    else:
        d.set("parallelism.activation_checkpointing", "selective", "assumed")
    chosen = d.chosen_hardware()
    return chosen if chosen is not None else devices_total


def _batch_from_args(d: Draft, args: dict[str, Any], dp: int, seq: int) -> int:
    """The batch and the run's tokens from TrainingArguments' max_steps and batch sizes."""
    micro = int(args["per_device_train_batch_size"])
    accum = int(args.get("gradient_accumulation_steps", 1))
    steps = int(args["max_steps"])
    d.set("batch.micro_batch", micro, "per_device_train_batch_size [ARGS]")
    d.set("batch.grad_accum", accum, "gradient_accumulation_steps [ARGS]")
    run_tokens = steps * micro * accum * dp * seq
    d.set("tokens", run_tokens, f"max_steps {steps:,} [ARGS] * {micro * accum * dp * seq:,} tokens per step")
    return run_tokens


def _batch_from_fit(d: Draft, params: ParamCounts, model: ModelSpec, dp: int, seq: int) -> int:
    """Chinchilla's ~20 tokens per parameter, DeepSeek LLM's B_opt and eta_opt at that compute."""
    run_tokens = CHINCHILLA_TOKENS_PER_PARAM * params.total
    # non-embedding FLOPs per token (arXiv 2401.02954 eq. 3) on the active path: a mixture of experts computes
    # the routed experts a token goes to (active - embedding = non_embedding for a dense model)
    m = 6.0 * (params.active - params.embedding) + 6.0 * model.layers * attention_flop_width(model) * seq
    b_opt = scaling.deepseek_optimal_batch_tokens(m * run_tokens)
    seqs = max(dp, round(b_opt / seq / dp) * dp)
    d.set("batch.micro_batch", 1, "assumed")
    d.set(
        "batch.grad_accum",
        seqs // dp,
        f"assumed: {seqs} sequences per step, DeepSeek LLM's B_opt {b_opt:,.0f} tokens (arXiv 2401.02954, eq. 1)",
    )
    steps = max(1, round(run_tokens / (seqs * seq)))
    run_tokens = steps * seqs * seq
    d.set(
        "tokens",
        run_tokens,
        f"assumed: ~{CHINCHILLA_TOKENS_PER_PARAM} tokens per parameter (Chinchilla), {steps:,} whole steps",
    )
    d.set(
        "optimizer.lr",
        float(f"{scaling.deepseek_optimal_lr(m * run_tokens):.3g}"),
        "assumed: DeepSeek LLM's eta_opt (arXiv 2401.02954, eq. 1)",
    )
    return run_tokens


def _optimizer(d: Draft, args: dict[str, Any]) -> None:
    """AdamW with TrainingArguments' values, or Llama 2's without them."""
    d.set("optimizer.kind", "adamw", "transformers' default optimizer (adamw_torch)" if args else "assumed: AdamW")
    if "learning_rate" in args:
        d.set("optimizer.lr", float(args["learning_rate"]), "learning_rate [ARGS]")
    d.assume("optimizer.lr", 5e-5, "TrainingArguments' default learning_rate")
    d.set(
        "optimizer.betas",
        [float(args.get("adam_beta1", 0.9)), float(args.get("adam_beta2", 0.95 if not args else 0.999))],
        "adam_beta1, adam_beta2" + (" [ARGS]" if args else " (assumed: Llama 2's)"),
    )
    d.set("optimizer.eps", float(args.get("adam_epsilon", 1e-8)), "adam_epsilon")
    d.set(
        "optimizer.weight_decay",
        float(args.get("weight_decay", 0.0 if args else 0.1)),
        "weight_decay" + (" [ARGS]" if args else " (assumed: Llama 2's)"),
    )
    d.set("optimizer.grad_clip", float(args.get("max_grad_norm", 1.0)), "max_grad_norm")


SCHEDULES = {
    "linear": "linear",
    "cosine": "cosine",
    "constant": "constant",
    "constant_with_warmup": "constant",
    "warmup_stable_decay": "wsd",
}  # transformers' lr_scheduler_type -> runlib's schedule.kind


def _schedule(d: Draft, args: dict[str, Any]) -> None:
    kind = str(args.get("lr_scheduler_type", "linear" if args else "cosine"))
    if kind not in SCHEDULES:
        raise UnmappableConfig(
            f"training arguments: lr_scheduler_type {kind!r} has no runlib schedule ({', '.join(SCHEDULES)})"
        )
    d.set("schedule.kind", SCHEDULES[kind], "lr_scheduler_type" + (" [ARGS]" if args else " (assumed: cosine)"))
    if args.get("warmup_steps"):
        d.set("schedule.warmup", f"{int(args['warmup_steps'])} steps", "warmup_steps [ARGS]")
    elif args.get("warmup_ratio"):
        d.set("schedule.warmup", f"{float(args['warmup_ratio']) * 100:g}%", "warmup_ratio [ARGS]")
    else:
        d.set(
            "schedule.warmup",
            "1%" if not args else "0 steps",
            "assumed: 1% of the run" if not args else "no warmup_steps/ratio [ARGS]",
        )
    if SCHEDULES[kind] == "wsd":
        d.set("schedule.decay", "10%", "assumed: a 10% cooldown (Hägele et al. 2024, arXiv 2405.18392)")
    d.set(
        "schedule.min_lr_ratio",
        0.0 if args else 0.1,
        "decays to 0 (transformers' schedules)" if args else "assumed: 10% floor",
    )


def _precision_and_cadence(d: Draft, args: dict[str, Any]) -> None:
    if args.get("fp16"):
        d.set("precision.compute", "fp16", "fp16 [ARGS]")
        d.set("precision.loss_scaling", "dynamic", "torch.amp GradScaler")
    elif args and not args.get("bf16"):
        d.set("precision.compute", "fp32", "neither bf16 nor fp16 [ARGS]")
    else:
        d.set("precision.compute", "bf16", "bf16 [ARGS]" if args else "assumed")
    if "seed" in args:
        d.set("seed", int(args["seed"]), "seed [ARGS]")
    if args.get("save_steps"):
        d.set("checkpoint.every", f"{int(args['save_steps'])} steps", "save_steps [ARGS]")
    if args.get("eval_steps"):
        d.set("monitor.eval_every", f"{int(args['eval_steps'])} steps", "eval_steps [ARGS]")
    else:
        d.assume("monitor.eval_every", "2%", "held-out loss every 2% of the run")
    if args.get("logging_steps"):
        d.set("monitor.log_every", f"{int(args['logging_steps'])} steps", "logging_steps [ARGS]")


# ----------------------------------------------------------------------------------------- the steps


def _billions(params: ParamCounts) -> str:
    """'46.7B' for a dense model, '46.7B total, 12.9B active' for a mixture of experts."""
    total = f"{params.total / 1e9:.3g}B"
    return total if params.active == params.total else f"{total} total, {params.active / 1e9:.3g}B active"


def _parameter_lines(params: ParamCounts, model: ModelSpec) -> list[str]:
    """The header's parameter counts: total, and with model.moe the active ones, with model.mtp the MTP's."""
    lines = [f"Parameters: {params.total:,} as this spec counts them."]
    if model.moe is not None:
        active = f"Active parameters: {params.active:,} per token (the total less the routed experts a token skips"
        if not model.tie_embeddings and model.position != "learned":  # embedding: the input table and the head
            # DeepSeek's activated counts leave the input table out: V3's 37B (arXiv 2412.19437, abstract) is
            # 36.6B without it, 37.6B with it
            active += f"; {params.active - params.embedding // 2:,} without the input embedding, as DeepSeek counts"
        lines.append(active + ").")
    if model.mtp is not None:
        lines.append(
            f"MTP modules: {params.mtp:,} more, trained beside the model ({params.trained:,} in all), not in the total."
        )
    return lines


def import_hf(
    path: Path, config: dict[str, Any], args: dict[str, Any] | None, hardware: HardwareChoice | None = None
) -> Draft:
    """Read and validate (model_type, the schema's bounds), map the model, then the training (from the
    arguments or assumed), and report in the header what the spec cannot express."""
    file = str(path)
    family = _family(config, file)
    d = Draft(choice=hardware or HardwareChoice())
    not_imported = _model(d, config, family, file)
    seq = _seq_len(d, config, args, file)
    _tokenizer(d, config, family)
    model = _validated_model(d, file)
    params = count_params(model, int(d.get("model.vocab_size")), seq)
    name = spec_name(str(config.get("_name_or_path") or model_dir_name(path) or family).split("/")[-1])
    d.set("name", name)
    d.set("description", f"Imported from {path.name} ({family}, {_billions(params)} parameters)")
    d.header = [
        f"Imported by `runlib import` from {path.name} (Hugging Face {family} config"
        + (" and training arguments [ARGS])." if args else ")."),
        "The config gives the model only: `assumed:` marks everything about training.",
        *_parameter_lines(params, model),
    ] + not_imported
    dp = _hardware(d, params)
    args = args or {}
    if args.get("max_steps") and args.get("per_device_train_batch_size"):
        run_tokens = _batch_from_args(d, args, dp, seq)
    else:
        run_tokens = _batch_from_fit(d, params, model, dp, seq)
    _optimizer(d, args)
    _schedule(d, args)
    _precision_and_cadence(d, args)
    if not math.isfinite(run_tokens) or run_tokens <= 0:
        raise UnmappableConfig(f"{file}: no training tokens follow from the arguments")
    fill_defaults(d, int(run_tokens))
    return d
