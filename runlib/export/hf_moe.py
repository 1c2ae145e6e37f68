"""Mixtures of experts (model.moe) and DeepSeek's latent attention (model.attention kind mla) as Hugging Face
checkpoints: runlib.export.hf hands a model with either to these functions.

    moe_architecture(model) -> "MixtralForCausalLM" | ... (UserError: what no family computes, and the fix)
    moe_config(architecture, rope_block, model) -> config.json, from hf.py's keys of the RoPE families
    moe_state_dict(state, model, architecture, put, norm_eps)   the MoE and MLA tensors, by their HF names

Families, each checked against transformers 5.24.0 src/transformers/models/<model_type>/modeling_<model_type>.py
and configuration_<model_type>.py (the block outside the MLP is Llama's: pre-norm RMSNorm, rotate-half RoPE,
SwiGLU experts down(silu(gate(x)) * up(x)), no biases):
  * MixtralForCausalLM (mixtral; Jiang et al. 2024, arXiv 2401.04088 section 2.1): every layer MoE, a
    softmax over all experts whose top-k is renormalized (MixtralTopKRouter) = moe.score softmax with
    normalize_top_k; no shared experts; grouped-query attention, optionally one sliding window in all layers;
  * OlmoeForCausalLM (olmoe; Muennighoff et al. 2024, arXiv 2409.02060): every layer MoE, norm_topk_prob =
    moe.normalize_top_k, RMSNorm over the whole q and k projections (OlmoeAttention q_norm of hidden_size,
    so head_dim x heads = d_model) = model.qk_norm true with pre-norm blocks;
  * Qwen3MoeForCausalLM (qwen3_moe): per-head q/k RMSNorm (qk_norm per_head), norm_topk_prob, layer i MoE
    iff i not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0 (Qwen3MoeDecoderLayer; the others a
    dense Qwen3MoeMLP of intermediate_size) = runlib.plan.params.moe_layers with mlp_only_layers the first
    moe.dense_layers and decoder_sparse_step moe.every;
  * Qwen2MoeForCausalLM (qwen2_moe): Qwen3-MoE's layout without q/k norms, biases on q, k and v, and one
    shared expert of shared_expert_intermediate_size scaled by sigmoid(shared_expert_gate(x))
    (Qwen2MoeSparseMoeBlock) = moe.shared_experts with shared_gate; a spec without q/k/v biases exports zero
    ones (the same function, read alike by 4.x, whose Qwen2-MoE always has them);
  * DeepseekV3ForCausalLM (deepseek_v3; arXiv 2412.19437 section 2.1): latent attention (runlib.model.mla
    already has DeepseekV3Attention's parameter names), rope_interleave false for runlib's rotate-half RoPE,
    a sigmoid router (DeepseekV3TopkRouter) whose e_score_correction_bias is runlib's Router.expert_bias,
    n_group / topk_group = moe.groups / groups_per_token (a group scores its two best experts, as runlib's),
    routed_scaling_factor = moe.route_scale, norm_topk_prob, the first first_k_dense_replace layers dense,
    n_shared_experts unscaled shared experts of moe_intermediate_size each. An MLA model without model.moe
    exports with every layer dense (first_k_dense_replace = layers).
The router's expert_bias shifts which experts a token picks; only DeepSeek-V3's router has one, so a model
trained with moe.bias_update_rate is refused by the other families (and a nonzero bias in the weights too).

The weights are written one tensor per expert, in the layout of the published checkpoints (Mixtral's
block_sparse_moe.experts.E.w1/w2/w3, the others' mlp.experts.E.gate_proj/up_proj/down_proj): transformers
5.x fuses them on load (conversion_mapping.py, the "mixtral" and "qwen2_moe" WeightConverters: experts
stacked, gate and up concatenated into gate_up_proj [E, 2f, d], down_proj [E, d, f]) and writes this
layout back in save_pretrained (core_model_loading.py revert_weight_conversion); 4.x reads it as it is.
runlib's GroupedExperts store x @ w: expert e's w1[e] [d, f] is the transpose of gate_proj's weight.
transformers 4.46.3 reads the Mixtral, OLMoE and Qwen2-MoE exports as 5.x does (tests/export/
test_hf_transformers4.py), bar a phase's RoPE scaling in Mixtral (4.46.3's MixtralRotaryEmbedding has
none; its MixtralAttention splits hidden_size evenly, so Mixtral exports need head_dim = d_model / heads);
Qwen3-MoE and DeepSeek-V3 came in 4.51.

Not in the export, and why the logits still agree:
  * moe.capacity_factor drops assignments past an expert's capacity (Switch Transformer section 2.2); the
    families compute every assignment at inference (dropless), which is runlib's function whenever no
    expert overflows: the export is the dropless model (runlib's MoE applies the capacity in eval too);
  * moe.aux_loss, z_loss and the bias updates act on training only; router_aux_loss_coef is written for a
    reader that fine-tunes (transformers adds it only with output_router_logits);
  * the MTP modules (model.mtp; DeepSeek-V3 section 2.2) are no part of transformers' DeepseekV3ForCausalLM
    (it ignores DeepSeek's model.layers.61): dropped, num_nextn_predict_layers 0;
  * DeepseekV3Attention norms its query and key/value latents at RMSNorm's default eps 1e-6, runlib at
    NORM_EPS (1e-5). RMSNorm(c y) at eps e equals RMSNorm(y) at eps e / c^2, so the projections into the
    latents (q_a_proj, the latent rows of kv_a_proj_with_mqa) are exported times c = sqrt(1e-6 / 1e-5):
    the same function in transformers. A reader that norms the latents at rms_norm_eps instead (vLLM's
    vllm/model_executor/models/deepseek_v2.py, DeepseekV2Attention) sees an eps of 1e-4 on them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from runlib.errors import UserError
from runlib.plan.params import head_dim as spec_head_dim
from runlib.plan.params import moe_layers, qkv_has_bias
from runlib.spec.models import ModelSpec

if TYPE_CHECKING:  # torch is imported by the functions that build tensors (hf.py's rule)
    import torch

MOE_MODEL_TYPES = {
    "MixtralForCausalLM": "mixtral",
    "OlmoeForCausalLM": "olmoe",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "DeepseekV3ForCausalLM": "deepseek_v3",
}
DEEPSEEK_LATENT_EPS = 1e-6  # DeepseekV3RMSNorm's default, which q_a_layernorm and kv_a_layernorm keep
MOE_FIX = (
    "Fix: export a mixture of experts with the shape of Mixtral (softmax, normalize_top_k, every layer MoE), "
    "OLMoE (qk_norm: true), Qwen3-MoE (qk_norm: per_head), Qwen2-MoE (shared experts with shared_gate) or "
    "DeepSeek-V3 (attention.kind mla, score: sigmoid)"
)
BIAS_FIX = (
    "moe.bias_update_rate (the router's balancing bias moves each token's top-k choice; only DeepSeek-V3's "
    "router has one, e_score_correction_bias): export the model as DeepSeek-V3 (attention.kind mla, score: "
    "sigmoid), or train without bias_update_rate"
)


def _shared_d_ff(model: ModelSpec) -> int:
    """The shared experts' hidden units taken together (runlib.model.moe.MoE), 0 without them."""
    moe = model.moe
    if moe is None:
        return 0
    return moe.shared_d_ff or moe.shared_experts * moe.expert_d_ff


def _family(model: ModelSpec) -> str:
    """The family whose attention block the model has (its MoE fields are checked against it after)."""
    if model.attention is not None:
        return "DeepseekV3ForCausalLM"
    if model.qk_norm == "per_head":
        return "Qwen3MoeForCausalLM"
    if model.qk_norm:
        return "OlmoeForCausalLM"
    gated_shared = model.moe is not None and model.moe.shared_gate
    if gated_shared or qkv_has_bias(model):
        return "Qwen2MoeForCausalLM"
    return "MixtralForCausalLM"


def _block_problems(model: ModelSpec, family: str) -> list[str]:
    """What keeps the block around the MLP from being Llama's, which every MoE family keeps."""
    problems = []
    shape = (model.position, model.norm, model.activation)
    if shape != ("rope", "rmsnorm", "swiglu"):
        problems.append(
            f"position: {model.position}, norm: {model.norm}, activation: {model.activation} (the MoE families "
            "need rope + rmsnorm + swiglu)"
        )
    if model.norm_position != "pre" or model.parallel_block or model.embedding_norm:
        problems.append("model.norm_position, parallel_block or embedding_norm (the MoE families are pre-norm)")
    if model.rope_fraction < 1 or model.nope_every is not None:
        problems.append("model.rope_fraction or nope_every (the MoE families rotate every head's whole width)")
    gemma = ("attention_softcap", "final_softcap", "attention_scale_dim", "embedding_multiplier", "global_every")
    named = [name for name in gemma if getattr(model, name) is not None]
    if model.sliding_window is not None and family != "MixtralForCausalLM":
        named.append("sliding_window")
    if named:
        problems.append(f"model.{', model.'.join(named)} (no MoE family here has it; Mixtral: one sliding window)")
    if model.bias:
        problems.append("model.bias (the MoE families' experts and output projections have no biases)")
    if qkv_has_bias(model) and family != "Qwen2MoeForCausalLM":
        problems.append("model.qkv_bias (biases on q, k and v alone: Qwen2-MoE's, with its gated shared expert)")
    return problems


def _router_problems(model: ModelSpec, family: str) -> list[str]:
    """The router and experts against the family's (DeepSeek-V3's sigmoid and groups; the others' softmax)."""
    moe = model.moe
    if moe is None:  # DeepSeek-V3 with every layer dense (hf.hf_architecture sends only MoE or MLA models here)
        return []
    problems = []
    deepseek = family == "DeepseekV3ForCausalLM"
    if deepseek and moe.score != "sigmoid":
        problems.append(
            "moe.score: softmax with attention.kind mla (DeepSeek-V2's router; transformers' "
            "DeepseekV3TopkRouter scores by sigmoid)"
        )
    if not deepseek:
        if moe.score != "softmax":
            problems.append("moe.score: sigmoid (DeepSeek-V3's router only; it needs attention.kind mla)")
        if moe.groups is not None:
            problems.append("moe.groups (group-limited routing: DeepSeek-V3's n_group, with attention.kind mla)")
        if moe.route_scale != 1:
            problems.append(f"moe.route_scale {moe.route_scale} (DeepSeek-V3's routed_scaling_factor only)")
        if moe.bias_update_rate > 0:
            problems.append(BIAS_FIX)
    if deepseek and moe.experts // (moe.groups or 1) < 2:
        problems.append("moe.groups with one expert each (DeepseekV3TopkRouter scores a group by its two best)")
    return problems


def _layout_problems(model: ModelSpec, family: str) -> list[str]:
    """Which layers are MoE, the shared experts and the top-k normalization, against the family's."""
    moe = model.moe
    if moe is None:
        return []
    problems = []
    shared = _shared_d_ff(model)
    if family in ("MixtralForCausalLM", "OlmoeForCausalLM") and (moe.dense_layers or moe.every != 1):
        problems.append(
            "moe.dense_layers or every (every layer of Mixtral and OLMoE is MoE; Qwen3-MoE's mlp_only_layers and "
            "decoder_sparse_step, with qk_norm: per_head, express them)"
        )
    if family == "DeepseekV3ForCausalLM" and moe.every != 1:
        problems.append("moe.every (DeepSeek-V3 has first_k_dense_replace dense layers, then every layer MoE)")
    if family == "MixtralForCausalLM" and not moe.normalize_top_k:
        problems.append(
            "moe.normalize_top_k: false (Mixtral renormalizes the top-k; OLMoE with qk_norm: true and Qwen3-MoE "
            "with qk_norm: per_head take norm_topk_prob)"
        )
    if family in ("MixtralForCausalLM", "OlmoeForCausalLM", "Qwen3MoeForCausalLM") and shared:
        problems.append(
            "moe.shared_experts (no shared expert in Mixtral, OLMoE or Qwen3-MoE: Qwen2-MoE's is gated "
            "(shared_gate), DeepSeek-V3's is not (attention.kind mla))"
        )
    if family == "Qwen2MoeForCausalLM" and not (shared and moe.shared_gate):
        problems.append("moe.shared_experts with shared_gate (Qwen2-MoE always has one gated shared expert)")
    if family == "DeepseekV3ForCausalLM":
        if moe.shared_gate:
            problems.append("moe.shared_gate (DeepSeek-V3 adds its shared experts ungated)")
        if moe.shared_d_ff is not None and moe.shared_d_ff != moe.shared_experts * moe.expert_d_ff:
            problems.append("moe.shared_d_ff (DeepSeek-V3's shared experts are n_shared_experts x expert_d_ff)")
    return problems


def _attention_problems(model: ModelSpec, family: str) -> list[str]:
    even = spec_head_dim(model) * model.heads == model.d_model
    if family == "MixtralForCausalLM" and not even:  # 4.46.3's MixtralAttention: hidden_size // heads
        return ["model.head_dim (Mixtral splits d_model evenly in transformers 4.x: head_dim = d_model / heads)"]
    if family == "OlmoeForCausalLM" and not even:
        return ["model.head_dim (OLMoE's q_norm is hidden_size wide: head_dim = d_model / heads)"]
    if family == "Qwen2MoeForCausalLM" and not even:
        return ["model.head_dim (Qwen2-MoE splits d_model evenly in transformers 4.x: head_dim = d_model / heads)"]
    return []


def moe_architecture(model: ModelSpec) -> str:
    """The transformers class computing this mixture of experts (or MLA model); UserError otherwise."""
    family = _family(model)
    problems = _block_problems(model, family) + _attention_problems(model, family)
    problems += _router_problems(model, family) + _layout_problems(model, family)
    if problems:
        raise UserError(
            f"runlib export: the model has no Hugging Face equivalent (nearest: {family}, by its attention): "
            + "; ".join(problems)
            + ". "
            + MOE_FIX
        )
    return family


# ----------------------------------------------------------------------------------------- config.json


def moe_config(architecture: str, rope_block: dict[str, Any], model: ModelSpec) -> dict[str, Any]:
    """config.json of a MoE family: hf.py's keys of the RoPE families (sizes, norms, RoPE in the keys of 4.x
    and 5.x, vocabulary, dtype, special ids) and the family's MoE keys, every one written explicitly."""
    m, moe = model, model.moe
    if architecture == "DeepseekV3ForCausalLM":
        return _deepseek_config(rope_block, m)
    assert moe is not None
    routing: dict[str, Any] = {
        "num_experts_per_tok": moe.top_k,
        "router_aux_loss_coef": moe.aux_loss,
        "output_router_logits": False,
    }
    if architecture == "MixtralForCausalLM":  # MixtralExperts are intermediate_size wide
        window = {"sliding_window": m.sliding_window}
        return rope_block | routing | window | {"num_local_experts": moe.experts, "intermediate_size": moe.expert_d_ff}
    routing |= {"num_experts": moe.experts, "norm_topk_prob": moe.normalize_top_k}
    if architecture == "OlmoeForCausalLM":  # OlmoeExperts are intermediate_size wide
        olmoe = {"intermediate_size": moe.expert_d_ff, "attention_bias": False, "clip_qkv": None}
        return rope_block | routing | olmoe
    layout = {
        "moe_intermediate_size": moe.expert_d_ff,
        "decoder_sparse_step": moe.every,
        "mlp_only_layers": list(range(moe.dense_layers)),
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": m.layers,
    }
    if architecture == "Qwen3MoeForCausalLM":
        return rope_block | routing | layout | {"attention_bias": False}
    shared = {"shared_expert_intermediate_size": _shared_d_ff(m), "qkv_bias": True}
    full = {"layer_types": ["full_attention"] * m.layers}
    return rope_block | routing | layout | shared | full


def _deepseek_config(rope_block: dict[str, Any], m: ModelSpec) -> dict[str, Any]:
    """DeepseekV3Config (configuration_deepseek_v3.py); DeepSeek's own keys (scoring_func, topk_method,
    moe_layer_freq) too, for readers of its modeling_deepseek.py. DeepseekV3Config sets head_dim to
    qk_rope_head_dim (the RoPE tables' width) itself: hf.py's head_dim is left out."""
    mla, moe = m.attention, m.moe
    assert mla is not None
    base = {key: value for key, value in rope_block.items() if key != "head_dim"}
    attention = {
        "num_key_value_heads": m.heads,
        "q_lora_rank": mla.q_lora_rank,
        "kv_lora_rank": mla.kv_lora_rank,
        "qk_rope_head_dim": mla.qk_rope_head_dim,
        "qk_nope_head_dim": mla.qk_nope_head_dim,
        "v_head_dim": mla.v_head_dim,
        "rope_interleave": False,  # runlib rotates halves (runlib.model.mla), not interleaved pairs
        "attention_bias": False,
        "num_nextn_predict_layers": 0,  # the MTP modules are not exported
    }
    if moe is None:  # every layer dense: the router's keys are never read
        dense = {"first_k_dense_replace": m.layers, "n_routed_experts": 1, "num_experts_per_tok": 1}
        unused = {"moe_intermediate_size": m.d_ff, "n_shared_experts": 0, "n_group": 1, "topk_group": 1}
        return base | attention | dense | unused | {"routed_scaling_factor": 1.0, "norm_topk_prob": True}
    routing = {
        "n_routed_experts": moe.experts,
        "num_experts_per_tok": moe.top_k,
        "moe_intermediate_size": moe.expert_d_ff,
        "n_shared_experts": moe.shared_experts,
        "first_k_dense_replace": moe.dense_layers,
        "moe_layer_freq": 1,
        "n_group": moe.groups or 1,
        "topk_group": moe.groups_per_token or moe.groups or 1,
        "routed_scaling_factor": moe.route_scale,
        "norm_topk_prob": moe.normalize_top_k,
        "scoring_func": "sigmoid",
        "topk_method": "noaux_tc",  # the choice adds e_score_correction_bias (zeros without bias_update_rate)
    }
    return base | attention | routing


# ----------------------------------------------------------------------------------------- weights


def moe_state_dict(
    state: dict[str, torch.Tensor],
    model: ModelSpec,
    architecture: str,
    put: Callable[[str, torch.Tensor], None],
    norm_eps: float,
) -> None:
    """The tensors hf.hf_state_dict's Llama names leave out: latent attention, routers, experts, shared
    experts (and Qwen2-MoE's zero q/k/v biases); runlib's dense MLPs and norms it has already named."""
    import torch

    deepseek = architecture == "DeepseekV3ForCausalLM"
    for i, sparse in enumerate(moe_layers(model)):
        ours, theirs = f"layers.{i}.", f"model.layers.{i}."
        if model.attention is not None:
            _mla_state(state, ours, theirs, put, norm_eps)
        if architecture == "Qwen2MoeForCausalLM" and not qkv_has_bias(model):
            for w, name in (("wq", "q_proj"), ("wk", "k_proj"), ("wv", "v_proj")):
                weight = state[f"{ours}attention.{w}.weight"]
                put(f"{theirs}self_attn.{name}.bias", torch.zeros(weight.shape[0], dtype=weight.dtype))
        if not sparse:
            continue
        bias = state[f"{ours}mlp.router.expert_bias"]
        if not deepseek and bias.any():
            raise UserError(f"runlib export: layers.{i}'s router has a nonzero expert_bias; {BIAS_FIX}")
        mixtral = architecture == "MixtralForCausalLM"
        block = f"{theirs}block_sparse_moe." if mixtral else f"{theirs}mlp."
        put(f"{block}gate.weight", state[f"{ours}mlp.router.gate.weight"])
        if deepseek:
            put(f"{block}gate.e_score_correction_bias", bias)
        names = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")
        for w, name in zip(("w1", "w3", "w2"), names, strict=True):
            weights = state[f"{ours}mlp.experts.{w}"]  # [E, in, out]: nn.Linear's weight transposed
            for e in range(weights.shape[0]):
                put(f"{block}experts.{e}.{name}.weight", weights[e].t())
        _shared_state(state, model, architecture, ours, block, put)


def _shared_state(
    state: dict[str, torch.Tensor],
    model: ModelSpec,
    architecture: str,
    ours: str,
    block: str,
    put: Callable[[str, torch.Tensor], None],
) -> None:
    """Qwen2-MoE's shared_expert and shared_expert_gate, DeepSeek-V3's shared_experts (zero-width tensors
    where the model has none: DeepseekV3MoE always builds an MLP of n_shared_experts x moe_intermediate_size)."""
    import torch

    name = "shared_expert" if architecture == "Qwen2MoeForCausalLM" else "shared_experts"
    if architecture == "DeepseekV3ForCausalLM" and not _shared_d_ff(model):
        dtype = state[f"{ours}mlp.router.gate.weight"].dtype
        for proj, shape in (("gate_proj", (0, model.d_model)), ("up_proj", (0, model.d_model))):
            put(f"{block}{name}.{proj}.weight", torch.zeros(shape, dtype=dtype))
        put(f"{block}{name}.down_proj.weight", torch.zeros(model.d_model, 0, dtype=dtype))
        return
    if not _shared_d_ff(model):
        return
    for w, proj in (("w1", "gate_proj"), ("w3", "up_proj"), ("w2", "down_proj")):
        put(f"{block}{name}.{proj}.weight", state[f"{ours}mlp.shared_experts.{w}.weight"])
    if architecture == "Qwen2MoeForCausalLM":
        put(f"{block}shared_expert_gate.weight", state[f"{ours}mlp.shared_gate.weight"])


MLA_NAMES = ("q_proj", "q_a_layernorm", "q_b_proj", "kv_a_layernorm", "kv_b_proj", "o_proj")


def _mla_state(
    state: dict[str, torch.Tensor], ours: str, theirs: str, put: Callable[[str, torch.Tensor], None], norm_eps: float
) -> None:
    """runlib.model.mla's parameters under DeepseekV3Attention's names, the projections into the latents
    times sqrt(1e-6 / norm_eps) for the latent norms' eps (module docstring)."""
    import torch

    scale = (DEEPSEEK_LATENT_EPS / norm_eps) ** 0.5
    for name in MLA_NAMES:
        if f"{ours}attention.{name}.weight" in state:
            put(f"{theirs}self_attn.{name}.weight", state[f"{ours}attention.{name}.weight"])
    if f"{ours}attention.q_a_proj.weight" in state:
        put(f"{theirs}self_attn.q_a_proj.weight", state[f"{ours}attention.q_a_proj.weight"] * scale)
    kv_a = state[f"{ours}attention.kv_a_proj_with_mqa.weight"]  # [kv_lora_rank + rope, d]: latent rows first
    rank = state[f"{ours}attention.kv_a_layernorm.weight"].shape[0]
    put(f"{theirs}self_attn.kv_a_proj_with_mqa.weight", torch.cat([kv_a[:rank] * scale, kv_a[rank:]]))
