"""A phase's model as a Hugging Face checkpoint: `runlib export SPEC --phase NAME --out DIR`.

    hf_architecture(model) -> "LlamaForCausalLM" | "Qwen2ForCausalLM" | ... (UserError: what has no equivalent)
    hf_config(shape) -> config.json as a dict
    hf_state_dict(state, shape) -> {HF parameter name: tensor}
    write_export(state, shape, tokenizer_dir, out_dir, provenance)   (atomic: a temporary folder, then rename)

Which architecture. runlib's block (runlib.model.transformer) maps onto transformers architectures that
compute exactly the same function:
  * LlamaForCausalLM (transformers src/transformers/models/llama/modeling_llama.py): RMSNorm, RoPE in the
    rotate-half form (the same as ours, so q/k weights need no permutation), SwiGLU as
    down(silu(gate(x)) * up(x)), grouped-query attention, an explicit head_dim, attention_bias and
    mlp_bias for model.bias, tie_word_embeddings;
  * Qwen2ForCausalLM (models/qwen2): the same block with biases on q, k and v only (model.qkv_bias);
  * Qwen3ForCausalLM (models/qwen3): the same with RMSNorm on q and k per head (qk_norm: per_head);
  * SmolLM3ForCausalLM (models/smollm3): Llama's block with RoPE left out of every nope_every-th layer
    (no_rope_layers, 1 where RoPE applies);
  * Olmo2ForCausalLM (models/olmo2): QK-norm over the whole projections and the norms after the
    sublayers, x + norm(attn(x)) (qk_norm: true, norm_position: output; Groeneveld et al. 2025, arXiv
    2501.00656, section 3.2);
  * NemotronForCausalLM (models/nemotron): LayerNorm scaled by 1 + weight with a bias (NemotronLayerNorm1P,
    norm: layernorm1p), squared ReLU as down(relu(up(x))^2), RoPE on partial_rotary_factor of each head
    (rope_fraction; Nemotron-4, arXiv 2402.16819 section 2.1);
  * GPT2LMHeadModel (models/gpt2/modeling_gpt2.py): LayerNorm, learned absolute positions, a GELU MLP,
    multi-head attention; its Conv1D layers store weights as [in, out] (transposed) and q, k, v fused in
    c_attn. GPT-2 always has biases: a spec without them exports zero biases (the same function);
  * mixtures of experts (model.moe) and DeepSeek's latent attention (model.attention kind mla):
    MixtralForCausalLM, OlmoeForCausalLM, Qwen3MoeForCausalLM, Qwen2MoeForCausalLM, DeepseekV3ForCausalLM,
    mapped and refused by runlib.export.hf_moe. MTP modules (model.mtp) are no part of any of them: dropped.
Refused, with the reason: parallel blocks (Falcon), an embedding norm (BLOOM), ALiBi and relative
positions, plain ReLU activations, full-width QK-norm in a pre-norm block, sandwich norms (Gemma 2: its GeGLU,
soft-capping and sliding windows are not runlib's yet), and the mixed shapes (RoPE with LayerNorm or
GELU, learned positions with RMSNorm or SwiGLU, grouped-query attention with learned positions) that no
architecture has.

The export holds the phase's weights in their stored dtype (float32 master weights), the RoPE base and
context of that phase (a long-context phase exports its own theta), and the tokenizer with the spec's
special tokens (id 0 the end of document, runlib.tokenizer.special). A user loads it with
`AutoModelForCausalLM.from_pretrained(DIR)` and `AutoTokenizer.from_pretrained(DIR)`.

config.json reads as the same model in transformers 4.x and 5.x (and in other stacks that read the classic
keys): every key either version reads is written explicitly, none left to a default, and the RoPE base is
written in both layouts (rope_config below).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runlib.errors import UserError
from runlib.export.hf_moe import MOE_MODEL_TYPES, moe_architecture, moe_config, moe_state_dict
from runlib.plan.params import head_dim as spec_head_dim
from runlib.plan.params import kv_heads as spec_kv_heads
from runlib.plan.params import norm_has_bias, qkv_has_bias, windowed_layers
from runlib.spec.models import ModelSpec, RopeScalingSpec
from runlib.util.atomic import replace_dir

if TYPE_CHECKING:  # torch is imported by the functions that build tensors: `runlib plan` and the Snakefile load this
    import torch

NORM_EPS = 1e-5  # runlib.model.norms.NORM_EPS (not imported: this module must not import torch)
# the config's model_type of each RoPE architecture (transformers' models/<model_type>/)
ROPE_MODEL_TYPES = {
    "LlamaForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Olmo2ForCausalLM": "olmo2",
    "SmolLM3ForCausalLM": "smollm3",
    "NemotronForCausalLM": "nemotron",
    **MOE_MODEL_TYPES,
}
MARKER = "runlib_export.json"  # names a folder as an export, so a rerun may replace it
# in MARKER: 2 writes the RoPE base in the keys of transformers 4.x and 5.x (rope_config); 1 (runlib 0.1 before this change)
# wrote it only in `rope_parameters`, which 4.x never reads (it ran such an export at base 10000)
EXPORT_FORMAT = 2
TOKENIZER_FILE = "tokenizer.json"


@dataclass(frozen=True)
class ExportShape:
    """What the exported model is: the spec's model section and the phase's sizes."""

    model: ModelSpec
    vocab_rows: int  # embedding rows (the tokenizer's ids padded)
    position_rows: int  # rows of the learned position table (learned positions only)
    seq_len: int  # the phase's context length
    rope_theta: float  # the phase's RoPE base
    eos_id: int
    pad_id: int | None
    rope_scaling: RopeScalingSpec | None = None  # the phase's RoPE frequency scaling


def _rope_family(model: ModelSpec) -> tuple[str | None, str]:
    """The transformers class of a RoPE + RMSNorm + SwiGLU model (None when none computes it), and why not."""
    qkv, o = qkv_has_bias(model), model.bias
    if model.nope_every is not None:
        llama_block = model.norm_position == "pre" and not model.qk_norm and qkv == o
        if llama_block and spec_head_dim(model) * model.heads == model.d_model:
            return "SmolLM3ForCausalLM", ""
        return None, "model.nope_every with other than SmolLM3's block (Llama's, with head_dim = d_model / heads)"
    if model.norm_position == "sandwich":
        return (
            None,
            "model.norm_position: sandwich (Gemma 2's norms: its GeGLU, soft-capping and windows are not exported yet)",
        )
    if model.norm_position == "output":
        if model.qk_norm is True and not qkv and not o:
            return "Olmo2ForCausalLM", ""
        return None, (
            "model.norm_position: output needs OLMo 2's shape (qk_norm: true over the whole projections, no biases)"
        )
    if model.qk_norm == "per_head":
        if not qkv and not o:
            return "Qwen3ForCausalLM", ""
        return None, "model.qk_norm: per_head with biases (Qwen3's attention_bias would bias the MLP-free o too)"
    if model.qk_norm:
        return None, (
            "model.qk_norm: true with norm_position: pre (OLMo 2 normalizes q and k over the whole projection but "
            "its norms follow the sublayers: norm_position: output)"
        )
    if qkv == o:
        return "LlamaForCausalLM", ""
    if qkv and not o and spec_head_dim(model) * model.heads == model.d_model:
        return "Qwen2ForCausalLM", ""
    return None, "model.qkv_bias differs from model.bias in a way no architecture has (Qwen2: q, k, v biased only)"


def _nemotron_problems(model: ModelSpec) -> list[str]:
    """What keeps a RoPE + LayerNorm1P + squared-ReLU model from being NemotronForCausalLM (transformers
    models/nemotron/modeling_nemotron.py: pre-norm blocks, biased LayerNorm1P, one bias flag per sublayer)."""
    problems = []
    if not norm_has_bias(model):
        problems.append("model.norm_bias: false (NemotronLayerNorm1P always has a bias)")
    if model.norm_position != "pre" or model.qk_norm or model.nope_every is not None:
        problems.append("model.norm_position, model.qk_norm or model.nope_every (Nemotron's block has none)")
    if qkv_has_bias(model) != model.bias:
        problems.append("model.qkv_bias differing from model.bias (Nemotron biases q, k, v and o alike)")
    if any(getattr(model, name) is not None for name in GEMMA_FIELDS):
        problems.append("Gemma 2's soft-capping, scaling or windows (Nemotron has none)")
    return problems


GEMMA_FIELDS = ("attention_softcap", "final_softcap", "attention_scale_dim", "embedding_multiplier", "sliding_window")


def _gemma2_problems(model: ModelSpec) -> list[str]:
    """What keeps a RoPE + RMSNorm + GeGLU + sandwich-norm model from being Gemma2ForCausalLM (transformers
    models/gemma2/modeling_gemma2.py: embeddings times sqrt(hidden_size), no biases, q and k without norms)."""
    problems = []
    if qkv_has_bias(model) or model.bias:
        problems.append("model.bias / model.qkv_bias (Gemma 2 has no biases)")
    if model.qk_norm:
        problems.append("model.qk_norm (Gemma 2 has none; Gemma 3's per-head QK-norm is not exported yet)")
    root = model.d_model**0.5
    if model.embedding_multiplier is None or abs(model.embedding_multiplier - root) > 1e-6 * root:
        problems.append(
            f"model.embedding_multiplier {model.embedding_multiplier} (Gemma 2 scales by sqrt(d_model) = {root:g})"
        )
    if model.d_model % model.heads:
        problems.append("model.heads not dividing d_model (Gemma2Config refuses it)")
    return problems


def hf_architecture(model: ModelSpec) -> str:
    """The transformers class that computes exactly runlib's block for this shape; UserError otherwise."""
    if model.moe is not None or model.attention is not None:
        return moe_architecture(model)
    problems = []
    if model.parallel_block:
        problems.append("model.parallel_block: true (Falcon's parallel block: no architecture here computes it)")
    nemotron_like = model.position == "rope" and model.norm == "layernorm1p" and model.activation == "relu2"
    if model.rope_fraction < 1 and not nemotron_like:
        problems.append("model.rope_fraction (partial RoPE is exported with Nemotron's block only)")
    if model.embedding_norm:
        problems.append("model.embedding_norm: true (BLOOM's embedding LayerNorm: neither Llama nor GPT-2 has it)")
    llama_like = model.position == "rope" and model.norm == "rmsnorm" and model.activation == "swiglu"
    gpt2_like = model.position == "learned" and model.norm == "layernorm" and model.activation == "gelu"
    gemma_like = model.position == "rope" and model.norm == "rmsnorm" and model.activation == "geglu"
    family: str | None = None
    if nemotron_like:
        family = "NemotronForCausalLM"
        problems += _nemotron_problems(model)
    elif gemma_like and model.norm_position == "sandwich":
        family = "Gemma2ForCausalLM"
        problems += _gemma2_problems(model)
    elif gemma_like:
        problems.append("activation: geglu without norm_position: sandwich (Gemma 2's block has both)")
    elif any(getattr(model, name) is not None for name in GEMMA_FIELDS):
        named = [name for name in GEMMA_FIELDS if getattr(model, name) is not None]
        problems.append(f"model.{', model.'.join(named)} (Gemma 2's: with activation geglu and sandwich norms)")
    if llama_like:
        family, why = _rope_family(model)
        if family is None:
            problems.append(why)
    elif gpt2_like:
        family = "GPT2LMHeadModel"
        if model.qk_norm or model.norm_position != "pre" or qkv_has_bias(model) != model.bias:
            problems.append(
                "model.qk_norm, model.norm_position or model.qkv_bias with learned positions (GPT-2 has none)"
            )
    elif not (gemma_like or nemotron_like):
        problems.append(
            f"position: {model.position}, norm: {model.norm}, activation: {model.activation} (LlamaForCausalLM needs "
            "rope + rmsnorm + swiglu; Gemma2ForCausalLM rope + rmsnorm + geglu; GPT2LMHeadModel needs learned + "
            "layernorm + gelu)"
        )
    if gpt2_like and spec_kv_heads(model) != model.heads:
        problems.append(
            f"model.kv_heads: {model.kv_heads} with learned positions (GPT-2 has no grouped-query attention)"
        )
    if gpt2_like and spec_head_dim(model) * model.heads != model.d_model:
        problems.append("model.head_dim: GPT-2's heads split d_model evenly (head_dim = d_model / heads)")
    if problems or family is None:
        raise UserError(
            "runlib export: the model has no Hugging Face equivalent: "
            + "; ".join(problems)
            + ". Fix: export a model with the shape of Llama, Qwen2 (qkv_bias), Qwen3 (qk_norm: per_head), OLMo 2 "
            "(qk_norm: true, norm_position: output), Nemotron (layernorm1p, relu2) or GPT-2 (learned, layernorm, gelu)"
        )
    return family


def rope_config(theta: float, scaling: RopeScalingSpec | None = None) -> dict[str, Any]:
    """runlib's plain RoPE at base theta, in the keys of both transformers layouts.

    transformers 4.46.3 (src/transformers/models/llama/configuration_llama.py, LlamaConfig.__init__) reads
    `rope_theta` (default 10000.0) and `rope_scaling` (None: the "default" RoPE); `rope_parameters` is an
    unknown key there, kept as an attribute and never read: a config with the base only inside it runs at
    10000. transformers 5.24.0 (src/transformers/modeling_rope_utils.py,
    RotaryEmbeddingConfigMixin.convert_rope_params_to_dict) reads `rope_parameters`, and a non-null
    `rope_scaling` in config.json replaces it (`self.rope_parameters = rope_scaling or self.rope_parameters`);
    a top-level `rope_theta` only fills a `rope_parameters` without one. So: `rope_scaling` null, the base in
    `rope_theta` for 4.x and in `rope_parameters` for 5.x. A phase's frequency scaling (llama3, yarn) goes into
    both `rope_scaling` and `rope_parameters`, each with the base, in the keys of
    modeling_rope_utils.py (factor, original_max_position_embeddings, low/high_freq_factor, beta_fast/slow).
    """
    if scaling is None:
        return {
            "rope_theta": theta,
            "rope_scaling": None,
            "rope_parameters": {"rope_type": "default", "rope_theta": theta},
        }
    params: dict[str, Any] = {
        "rope_type": scaling.kind,
        "rope_theta": theta,
        "factor": scaling.factor,
        "original_max_position_embeddings": scaling.original_seq_len,
    }
    if scaling.kind == "llama3":
        params |= {"low_freq_factor": scaling.low_freq_factor, "high_freq_factor": scaling.high_freq_factor}
    else:
        params |= {"beta_fast": scaling.beta_fast, "beta_slow": scaling.beta_slow}
    return {"rope_theta": theta, "rope_scaling": dict(params), "rope_parameters": dict(params)}


def _gemma2_config(shape: ExportShape, common: dict[str, Any]) -> dict[str, Any]:
    """Gemma2ForCausalLM's config.json: GeGLU, soft-capped logits, sliding and global layers."""
    m = shape.model
    windowed = windowed_layers(m)
    return {
        "architectures": ["Gemma2ForCausalLM"],
        "model_type": "gemma2",
        "hidden_size": m.d_model,
        "intermediate_size": m.d_ff,
        "num_hidden_layers": m.layers,
        "num_attention_heads": m.heads,
        "num_key_value_heads": spec_kv_heads(m),
        "head_dim": spec_head_dim(m),
        "hidden_activation": "gelu_pytorch_tanh",  # GeGLU's tanh GELU (runlib.model.mlp.MLP)
        "rms_norm_eps": NORM_EPS,
        "max_position_embeddings": shape.seq_len,
        **rope_config(shape.rope_theta, shape.rope_scaling),
        "attention_bias": False,
        "attention_dropout": 0.0,
        "query_pre_attn_scalar": m.attention_scale_dim or spec_head_dim(m),
        # every layer's kind written out (transformers 5.x reads layer_types; its default alternates)
        "sliding_window": m.sliding_window or shape.seq_len,
        "layer_types": ["sliding_attention" if w else "full_attention" for w in windowed],
        "attn_logit_softcapping": m.attention_softcap,
        "final_logit_softcapping": m.final_softcap,
        **common,
    }


def _nemotron_config(rope_block: dict[str, Any], m: ModelSpec) -> dict[str, Any]:
    """NemotronConfig: squared ReLU, its own eps key, the rotated share in both layouts (4.x reads
    partial_rotary_factor at the top, 5.x in rope_parameters)."""
    partial = {"partial_rotary_factor": m.rope_fraction}
    rope_parameters = {**rope_block["rope_parameters"], **partial}
    base = {key: value for key, value in rope_block.items() if key != "rms_norm_eps"}
    return (
        base
        | partial
        | {
            "hidden_act": "relu2",
            "norm_eps": NORM_EPS,
            "rope_parameters": rope_parameters,
            "attention_bias": m.bias,
            "mlp_bias": m.bias,
        }
    )


def hf_config(shape: ExportShape) -> dict[str, Any]:
    """config.json for the architecture of hf_architecture(shape.model), read alike by transformers 4.x and 5.x."""
    m = shape.model
    # the weights' dtype: `torch_dtype` for 4.x (configuration_utils.py PretrainedConfig.__init__, 4.46.3), `dtype`
    # for 5.x, which still reads `torch_dtype` when `dtype` is absent (PreTrainedConfig.__post_init__, 5.24.0)
    common: dict[str, Any] = {"vocab_size": shape.vocab_rows, "tie_word_embeddings": m.tie_embeddings}
    common |= {"torch_dtype": "float32", "dtype": "float32"}
    common |= {"eos_token_id": shape.eos_id, "bos_token_id": None, "pad_token_id": shape.pad_id}
    architecture = hf_architecture(m)
    if architecture == "Gemma2ForCausalLM":
        return _gemma2_config(shape, common)
    if architecture != "GPT2LMHeadModel":
        rope_block = {
            "architectures": [architecture],
            "model_type": ROPE_MODEL_TYPES[architecture],
            "hidden_size": m.d_model,
            "intermediate_size": m.d_ff,
            "num_hidden_layers": m.layers,
            "num_attention_heads": m.heads,
            "num_key_value_heads": spec_kv_heads(m),
            "head_dim": spec_head_dim(m),
            "hidden_act": "silu",
            "rms_norm_eps": NORM_EPS,
            "max_position_embeddings": shape.seq_len,
            **rope_config(shape.rope_theta, shape.rope_scaling),
            "attention_dropout": 0.0,
            **common,
        }
        if architecture in MOE_MODEL_TYPES:
            return moe_config(architecture, rope_block, m)
        if architecture == "LlamaForCausalLM":
            # q, k, v and o projections, in 4.46.3 and 5.24.0 alike; > 1 pretraining_tp would split them
            return rope_block | {"attention_bias": m.bias, "mlp_bias": m.bias, "pretraining_tp": 1}
        if architecture == "Olmo2ForCausalLM":
            return rope_block | {"attention_bias": False}
        if architecture == "NemotronForCausalLM":
            return _nemotron_config(rope_block, m)
        if architecture == "SmolLM3ForCausalLM":
            nope = [int(m.nope_every is None or (i + 1) % m.nope_every != 0) for i in range(m.layers)]
            nope_keys: dict[str, Any] = {"no_rope_layers": nope, "no_rope_layer_interval": m.nope_every}
            full_attention = {"use_sliding_window": False, "sliding_window": None}
            return rope_block | full_attention | {"attention_bias": m.bias, "mlp_bias": m.bias} | nope_keys
        # Qwen2 (q, k, v always biased) and Qwen3 (attention_bias false): full attention in every layer
        windows: dict[str, Any] = {"use_sliding_window": False, "sliding_window": None, "max_window_layers": m.layers}
        return rope_block | windows | ({"attention_bias": False} if architecture == "Qwen3ForCausalLM" else {})
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "n_embd": m.d_model,
        "n_inner": m.d_ff,
        "n_layer": m.layers,
        "n_head": m.heads,
        "n_positions": shape.position_rows,
        "activation_function": "gelu",  # exact erf GELU, as torch.nn.functional.gelu in runlib's MLP
        "layer_norm_epsilon": NORM_EPS,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        # attention scaled by 1/sqrt(head_dim) only, as runlib's (the defaults of GPT2Config in 4.46.3 and 5.24.0)
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        **common,
    }


def hf_state_dict(state: dict[str, torch.Tensor], shape: ExportShape) -> dict[str, torch.Tensor]:
    """runlib's parameter names (runlib.model.transformer) -> the architecture's, as contiguous tensors.
    A tied head is stored once (as the input embedding), as transformers saves tied weights."""
    import torch

    m = shape.model
    out: dict[str, torch.Tensor] = {}

    def put(name: str, tensor: torch.Tensor) -> None:
        out[name] = tensor.detach().contiguous()

    architecture = hf_architecture(m)
    if architecture == "Gemma2ForCausalLM":
        return _gemma2_state_dict(state, m, put, out)
    if architecture != "GPT2LMHeadModel":
        put("model.embed_tokens.weight", state["tok_embeddings.weight"])
        olmo2 = architecture == "Olmo2ForCausalLM"  # its norms follow the sublayers (norm_position: output)
        ungated = architecture == "NemotronForCausalLM"  # down(act(up(x))): runlib's w1 is its up projection
        names = {
            "attention_norm": "post_attention_layernorm" if olmo2 else "input_layernorm",
            "mlp_norm": "post_feedforward_layernorm" if olmo2 else "post_attention_layernorm",
            "attention.q_norm": "self_attn.q_norm",
            "attention.k_norm": "self_attn.k_norm",
            "attention.wq": "self_attn.q_proj",
            "attention.wk": "self_attn.k_proj",
            "attention.wv": "self_attn.v_proj",
            "attention.wo": "self_attn.o_proj",
            "mlp.w1": "mlp.up_proj" if ungated else "mlp.gate_proj",
            "mlp.w3": "mlp.up_proj",
            "mlp.w2": "mlp.down_proj",
        }
        for i in range(m.layers):
            for ours, theirs in names.items():
                for kind in ("weight", "bias"):
                    if f"layers.{i}.{ours}.{kind}" in state:
                        put(f"model.layers.{i}.{theirs}.{kind}", state[f"layers.{i}.{ours}.{kind}"])
        if architecture in MOE_MODEL_TYPES:  # the routers, experts and latent attention
            moe_state_dict(state, m, architecture, put, NORM_EPS)
        put("model.norm.weight", state["norm.weight"])
        if "norm.bias" in state:
            put("model.norm.bias", state["norm.bias"])
        if not m.tie_embeddings:
            put("lm_head.weight", state["lm_head.weight"])
        return out

    d = m.d_model

    def bias(name: str, size: int) -> torch.Tensor:
        return state.get(name, torch.zeros(size, dtype=state["tok_embeddings.weight"].dtype))

    put("transformer.wte.weight", state["tok_embeddings.weight"])
    put("transformer.wpe.weight", state["pos_embeddings.weight"])
    for i in range(m.layers):
        p, h = f"layers.{i}.", f"transformer.h.{i}."
        put(h + "ln_1.weight", state[p + "attention_norm.weight"])
        put(h + "ln_1.bias", bias(p + "attention_norm.bias", d))
        qkv = [state[p + f"attention.{w}.weight"] for w in ("wq", "wk", "wv")]
        put(h + "attn.c_attn.weight", torch.cat(qkv, dim=0).t())  # Conv1D: [in, out]
        put(h + "attn.c_attn.bias", torch.cat([bias(p + f"attention.{w}.bias", d) for w in ("wq", "wk", "wv")]))
        put(h + "attn.c_proj.weight", state[p + "attention.wo.weight"].t())
        put(h + "attn.c_proj.bias", bias(p + "attention.wo.bias", d))
        put(h + "ln_2.weight", state[p + "mlp_norm.weight"])
        put(h + "ln_2.bias", bias(p + "mlp_norm.bias", d))
        put(h + "mlp.c_fc.weight", state[p + "mlp.w1.weight"].t())
        put(h + "mlp.c_fc.bias", bias(p + "mlp.w1.bias", m.d_ff))
        put(h + "mlp.c_proj.weight", state[p + "mlp.w2.weight"].t())
        put(h + "mlp.c_proj.bias", bias(p + "mlp.w2.bias", d))
    put("transformer.ln_f.weight", state["norm.weight"])
    put("transformer.ln_f.bias", bias("norm.bias", d))
    if not m.tie_embeddings:
        put("lm_head.weight", state["lm_head.weight"])
    return out


def _gemma2_state_dict(
    state: dict[str, torch.Tensor], m: ModelSpec, put: Any, out: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """Gemma 2's names; its RMSNorm scales by (1 + weight) (modeling_gemma2.py Gemma2RMSNorm), so each norm's
    weight is runlib's minus one: the same function."""
    put("model.embed_tokens.weight", state["tok_embeddings.weight"])
    names = {
        "attention_norm": "input_layernorm",
        "attention_post_norm": "post_attention_layernorm",
        "mlp_norm": "pre_feedforward_layernorm",
        "mlp_post_norm": "post_feedforward_layernorm",
        "attention.wq": "self_attn.q_proj",
        "attention.wk": "self_attn.k_proj",
        "attention.wv": "self_attn.v_proj",
        "attention.wo": "self_attn.o_proj",
        "mlp.w1": "mlp.gate_proj",
        "mlp.w3": "mlp.up_proj",
        "mlp.w2": "mlp.down_proj",
    }
    for i in range(m.layers):
        for ours, theirs in names.items():
            weight = state[f"layers.{i}.{ours}.weight"]
            put(f"model.layers.{i}.{theirs}.weight", weight - 1 if "norm" in ours else weight)
    put("model.norm.weight", state["norm.weight"] - 1)
    if not m.tie_embeddings:
        put("lm_head.weight", state["lm_head.weight"])
    return out


def tokenizer_files(tokenizer_json: str, shape: ExportShape, special_ids: dict[str, int]) -> dict[str, str]:
    """tokenizer.json as trained, and the transformers files that name its special tokens."""
    by_id = {i: name for name, i in special_ids.items()}
    eos = by_id.get(shape.eos_id)
    pad = by_id.get(shape.pad_id) if shape.pad_id is not None else None
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": shape.seq_len,
        "eos_token": eos,
        "pad_token": pad,
        "bos_token": None,
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "additional_special_tokens": [
            n for n, _ in sorted(special_ids.items(), key=lambda kv: kv[1]) if n not in (eos, pad)
        ],
    }
    special_map = {k: v for k, v in (("eos_token", eos), ("pad_token", pad)) if v is not None}
    return {
        TOKENIZER_FILE: tokenizer_json,
        "tokenizer_config.json": json.dumps(config, indent=2) + "\n",
        "special_tokens_map.json": json.dumps(special_map, indent=2) + "\n",
    }


def write_export(
    state: dict[str, torch.Tensor],
    shape: ExportShape,
    tokenizer_json: str,
    special_ids: dict[str, int],
    out_dir: Path,
    provenance: dict[str, Any],
) -> Path:
    """Write the export into out_dir whole or not at all (a temporary sibling folder, then a rename).
    An existing out_dir is replaced only when it is an earlier export (it holds runlib_export.json)."""
    from safetensors.torch import save_file

    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or (any(out_dir.iterdir()) and not (out_dir / MARKER).exists())):
        raise UserError(
            f"runlib export: --out {out_dir} exists and is not an earlier export (no {MARKER}); "
            "fix: name a new or empty folder"
        )
    architecture = hf_architecture(shape.model)
    tmp = out_dir.with_name(f".{out_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        save_file(hf_state_dict(state, shape), str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(hf_config(shape), indent=2, sort_keys=True) + "\n")
        generation = {"eos_token_id": shape.eos_id, "pad_token_id": shape.pad_id, "do_sample": False}
        (tmp / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
        for name, text in tokenizer_files(tokenizer_json, shape, special_ids).items():
            (tmp / name).write_text(text)
        marker = {"architecture": architecture, "export_format": EXPORT_FORMAT, **provenance}
        (tmp / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
        # safetensors (0.8, a temporary file renamed) leaves the weights 0600 where every other file has the
        # umask's mode: another user or an inference service could read the config but not the model
        os.chmod(tmp / "model.safetensors", (tmp / MARKER).stat().st_mode & 0o777)
        replace_dir(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir
