"""The mixture-of-experts families of a Hugging Face `config.json`: model.moe, and for DeepSeek's also
model.attention (multi-head latent attention) and model.mtp. runlib.review.importers.hf maps the rest of
the block (the attention widths, norms, biases, RoPE) as for the dense families and calls map_moe.

Families, by `model_type` (field names as transformers' configuration_<family>.py defines them):
  mixtral      num_local_experts, num_experts_per_tok, intermediate_size (each expert's d_ff),
               router_aux_loss_coef; softmax over the top-k logits (normalize_top_k true)
  olmoe        num_experts, num_experts_per_tok, intermediate_size (each expert's d_ff), norm_topk_prob,
               router_aux_loss_coef
  qwen2_moe    num_experts, num_experts_per_tok, moe_intermediate_size, one shared expert of
               shared_expert_intermediate_size behind a sigmoid gate (shared_expert_gate),
               decoder_sparse_step and mlp_only_layers (which layers are MoE), norm_topk_prob,
               router_aux_loss_coef
  qwen3_moe    qwen2_moe without the shared expert
  deepseek_v2  n_routed_experts, num_experts_per_tok, moe_intermediate_size, n_shared_experts,
  deepseek_v3  first_k_dense_replace and moe_layer_freq, scoring_func, norm_topk_prob,
               routed_scaling_factor, topk_method with n_group/topk_group, aux_loss_alpha and seq_aux;
               the latent attention's q_lora_rank, kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim,
               v_head_dim; V3's num_nextn_predict_layers (multi-token prediction)
What a config does not state about training (the MTP loss weight, the balancing bias's update rate) is
taken from the paper that trained the model, and its comment says so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runlib.review.importers.common import whole
from runlib.review.importers.draft import Draft, UnmappableConfig

MOE_FAMILIES = ("mixtral", "olmoe", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3")
MLA_FAMILIES = ("deepseek_v2", "deepseek_v3")  # multi-head latent attention: no kv_heads or head_dim
MAX_LAYERS = 100_000  # the schema's bound on model.layers: past it the schema names num_hidden_layers

# DeepSeek-V3 (arXiv 2412.19437) section 4.2, its training's hyper-parameters, which config.json does not hold
DEEPSEEK_V3_BIAS_UPDATE = 0.001  # bias update speed gamma, 0.001 for the first 14.3T tokens (0 for the last 500B)
DEEPSEEK_V3_MTP_WEIGHT = 0.3  # MTP loss weight lambda, 0.3 for the first 10T tokens (0.1 for the last 4.8T)
DEEPSEEK_V3_SEQ_AUX = 0.0001  # the sequence-wise balance loss's alpha as the paper gives it

# transformers' defaults of router_aux_loss_coef (configuration_mixtral.py, configuration_olmoe.py,
# configuration_qwen2_moe.py, configuration_qwen3_moe.py), for a config that does not write it
AUX_DEFAULTS = {"mixtral": 0.001, "olmoe": 0.01, "qwen2_moe": 0.001, "qwen3_moe": 0.001}
TOPK_METHODS = ("greedy", "group_limited_greedy", "noaux_tc")  # DeepSeek's MoEGate (modeling_deepseek.py)


# ------------------------------------------------------------------------------ read the config's values


def _count(config: dict[str, Any], key: str, file: str, family: str, default: int | None = None, least: int = 1) -> int:
    """A whole number of at least `least` under `key`; `default` where the config leaves it out or null."""
    value = config.get(key)
    if value is None:
        if default is None:
            raise UnmappableConfig(
                f"{file}: {family} config without {key!r}; a mixture-of-experts config.json states it"
            )
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UnmappableConfig(f"{file}: {key} = {str(value)[:40]!r} is not a number")
    count = whole(value, file, key)
    if count < least:
        raise UnmappableConfig(f"{file}: {key} = {count}: give a whole number of at least {least}")
    return count


def _flag(config: dict[str, Any], key: str, default: bool, file: str) -> bool:
    value = config.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise UnmappableConfig(f"{file}: {key} = {str(value)[:40]!r} is not true or false")
    return value


def _rate(config: dict[str, Any], key: str, default: float, file: str) -> float:
    value = config.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UnmappableConfig(f"{file}: {key} = {str(value)[:40]!r} is not a number")
    return float(value)


def _layer_list(config: dict[str, Any], key: str, file: str) -> set[int]:
    """Layer indices under `key` (Qwen-MoE's mlp_only_layers), an empty set where it is absent."""
    value = config.get(key)
    if value is None:
        return set()
    if not isinstance(value, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in value):
        raise UnmappableConfig(f"{file}: {key} = {str(value)[:60]} is not a list of layer indices")
    return set(value)


def _layout(d: Draft, file: str, is_moe: Callable[[int], bool], dense_key: str, every_key: str, rule: str) -> None:
    """model.moe.dense_layers and every giving the same MoE layers as the config's `rule` (`is_moe`), or
    UnmappableConfig naming the keys: the spec's layer i is MoE iff i >= dense_layers and
    (i + 1) % every == 0."""
    layers = d.get("model.layers")
    if not isinstance(layers, int) or not 1 <= layers <= MAX_LAYERS:
        return  # the schema refuses num_hidden_layers itself, naming it
    sparse = [i for i in range(layers) if is_moe(i)]
    if not sparse:
        raise UnmappableConfig(
            f"{file}: {dense_key} and {every_key} leave none of the {layers} layers a mixture-of-experts layer "
            f"({rule}): a dense model; import it as one, or give the layers that are MoE"
        )
    every = sparse[1] - sparse[0] if len(sparse) > 1 else sparse[0] + 1
    dense = max(0, sparse[0] - every + 1)
    if sparse != [i for i in range(layers) if i >= dense and (i + 1) % every == 0]:
        shown = ", ".join(str(i) for i in sparse[:12]) + (", ..." if len(sparse) > 12 else "")
        raise UnmappableConfig(
            f"{file}: {dense_key} with {every_key}: the MoE layers ({rule}) are {shown} of {layers}, not a "
            "run of dense layers followed by every n-th layer (model.moe.dense_layers, every), the only "
            f"pattern a spec expresses; give {dense_key} and {every_key} such a pattern"
        )
    if dense:
        d.set("model.moe.dense_layers", dense, f"{dense_key}: the first {dense} layers dense")
    if every != 1:
        d.set("model.moe.every", every, f"{every_key}: every {every}th layer MoE")


# ----------------------------------------------------------------------------------------- map them


def map_moe(d: Draft, config: dict[str, Any], family: str, file: str) -> list[str]:
    """model.moe (and model.attention, model.mtp for DeepSeek's) from the config; the header's notes."""
    if family in MLA_FAMILIES:
        notes = _deepseek_moe(d, config, family, file)
        _deepseek_attention(d, config, family, file)
        return notes
    return _token_choice(d, config, family, file)


def _token_choice(d: Draft, config: dict[str, Any], family: str, file: str) -> list[str]:
    """Mixtral (Jiang et al. 2024, arXiv 2401.04088 section 2.1), OLMoE (Muennighoff et al. 2024, arXiv
    2409.02060), Qwen1.5/Qwen2-MoE and Qwen3-MoE: softmax routing over every layer's experts, or Qwen's
    decoder_sparse_step and mlp_only_layers."""
    notes: list[str] = []
    experts_key = "num_local_experts" if family == "mixtral" else "num_experts"
    ff_key = "moe_intermediate_size" if family.startswith("qwen") else "intermediate_size"
    d.set("model.moe.experts", _count(config, experts_key, file, family), experts_key)
    d.set("model.moe.top_k", _count(config, "num_experts_per_tok", file, family), "num_experts_per_tok")
    d.set("model.moe.expert_d_ff", _count(config, ff_key, file, family), f"{ff_key}: each expert's MLP")
    if family == "qwen2_moe":
        shared = _count(config, "shared_expert_intermediate_size", file, family)
        d.set("model.moe.shared_experts", 1, "Qwen2-MoE: one shared expert (shared_expert)")
        d.set("model.moe.shared_d_ff", shared, "shared_expert_intermediate_size")
        d.set("model.moe.shared_gate", True, "shared_expert_gate: sigmoid(w . x) scales the shared expert")
    if family.startswith("qwen"):
        step = _count(config, "decoder_sparse_step", file, family, default=1)
        only = _layer_list(config, "mlp_only_layers", file)
        rule = f"layer i not in mlp_only_layers with (i + 1) % {step} == 0, configuration_{family}.py"
        _layout(
            d, file, lambda i: i not in only and (i + 1) % step == 0, "mlp_only_layers", "decoder_sparse_step", rule
        )
    d.set("model.moe.score", "softmax", "softmax router over the experts")
    if family == "mixtral":
        d.set("model.moe.normalize_top_k", True, "Mixtral: softmax over the top-k logits (renormalized top-k)")
    else:
        d.set("model.moe.normalize_top_k", _flag(config, "norm_topk_prob", False, file), "norm_topk_prob")
    aux = _rate(config, "router_aux_loss_coef", AUX_DEFAULTS[family], file)
    d.set(
        "model.moe.aux_loss", aux, "router_aux_loss_coef" + ("" if "router_aux_loss_coef" in config else " (default)")
    )
    if _rate(config, "router_jitter_noise", 0.0, file):
        notes.append(
            f"router_jitter_noise {config['router_jitter_noise']} (noise on the router's input) is not a runlib field."
        )
    if family == "olmoe":
        notes += _olmoe_notes(config)
    return notes


def _olmoe_notes(config: dict[str, Any]) -> list[str]:
    notes = [
        "OLMoE's paper (arXiv 2409.02060) trains with a router z-loss of 0.001 as well, which config.json does "
        "not state: set model.moe.z_loss: 0.001 to train as it did."
    ]
    if config.get("clip_qkv") is not None:
        notes.append(
            f"clip_qkv {config['clip_qkv']}: queries, keys and values clamped to +-{config['clip_qkv']} "
            "(transformers' modeling_olmoe.py) is not a runlib field: this spec trains without the clamp."
        )
    return notes


def _deepseek_moe(d: Draft, config: dict[str, Any], family: str, file: str) -> list[str]:
    """DeepSeekMoE (arXiv 2401.06066) as DeepSeek-V2 (arXiv 2405.04434 section 2.2) and V3 (arXiv
    2412.19437 section 2.1.2) route it: fine-grained routed experts beside shared ones, the first
    first_k_dense_replace layers dense (intermediate_size), device- or node-limited routing."""
    v3 = family == "deepseek_v3"
    d.set("model.moe.experts", _count(config, "n_routed_experts", file, family), "n_routed_experts")
    d.set("model.moe.top_k", _count(config, "num_experts_per_tok", file, family), "num_experts_per_tok")
    d.set("model.moe.expert_d_ff", _count(config, "moe_intermediate_size", file, family), "moe_intermediate_size")
    shared = _count(config, "n_shared_experts", file, family, default=0, least=0)
    if shared:
        d.set("model.moe.shared_experts", shared, "n_shared_experts, each of moe_intermediate_size")
    first = _count(config, "first_k_dense_replace", file, family, default=0, least=0)
    freq = _count(config, "moe_layer_freq", file, family, default=1)
    rule = f"layer i >= {first} with i % {freq} == 0, DeepSeek's modeling_deepseek.py"
    _layout(d, file, lambda i: i >= first and i % freq == 0, "first_k_dense_replace", "moe_layer_freq", rule)
    score = config.get("scoring_func") or ("sigmoid" if v3 else "softmax")
    if score not in ("softmax", "sigmoid"):
        raise UnmappableConfig(f"{file}: scoring_func = {str(score)[:40]!r}: softmax or sigmoid map")
    d.set("model.moe.score", score, "scoring_func" if "scoring_func" in config else f"{family}'s scoring")
    d.set("model.moe.normalize_top_k", _flag(config, "norm_topk_prob", v3, file), "norm_topk_prob")
    scale = _rate(config, "routed_scaling_factor", 2.5 if v3 else 1.0, file)
    if scale != 1.0:
        d.set("model.moe.route_scale", scale, "routed_scaling_factor")
    return _deepseek_balance(d, config, family, file)


def _deepseek_balance(d: Draft, config: dict[str, Any], family: str, file: str) -> list[str]:
    """Group-limited routing (topk_method, n_group, topk_group), the balance loss and V3's balancing bias."""
    v3 = family == "deepseek_v3"
    method = config.get("topk_method") or ("noaux_tc" if v3 else "greedy")
    if method not in TOPK_METHODS:
        raise UnmappableConfig(f"{file}: topk_method = {str(method)[:40]!r}: one of {', '.join(TOPK_METHODS)} maps")
    if method != "greedy":
        groups = _count(config, "n_group", file, family)
        d.set("model.moe.groups", groups, f"n_group (topk_method {method})")
        d.set("model.moe.groups_per_token", _count(config, "topk_group", file, family), "topk_group")
    notes = []
    if method == "noaux_tc":
        d.set(
            "model.moe.bias_update_rate",
            DEEPSEEK_V3_BIAS_UPDATE,
            "topk_method noaux_tc: auxiliary-loss-free balancing; its rate from arXiv 2412.19437 section 4.2, not the config",
        )
    alpha = _rate(config, "aux_loss_alpha", 0.001, file)
    d.set("model.moe.aux_loss", alpha, "aux_loss_alpha" + ("" if "aux_loss_alpha" in config else " (default)"))
    if _flag(config, "seq_aux", True, file):
        d.set("model.moe.aux_loss_scope", "sequence", "seq_aux: the balance loss per sequence")
    if v3 and alpha != DEEPSEEK_V3_SEQ_AUX:
        notes.append(
            f"aux_loss_alpha {alpha} is the config's; DeepSeek-V3's paper trained the sequence-wise balance loss with "
            f"alpha {DEEPSEEK_V3_SEQ_AUX} (arXiv 2412.19437 section 4.2)."
        )
    if not v3:
        notes.append(
            "DeepSeek-V2 also trained device- and communication-level balance losses and dropped tokens past a "
            "device's capacity (arXiv 2405.04434 sections 2.2.3 and 2.2.4): not runlib fields, not imported."
        )
    return notes


def _deepseek_attention(d: Draft, config: dict[str, Any], family: str, file: str) -> None:
    """Multi-head latent attention (arXiv 2405.04434 section 2.1) and V3's multi-token prediction
    (arXiv 2412.19437 section 2.2)."""
    d.set("model.attention.kind", "mla", "multi-head latent attention (kv_lora_rank)")
    if config.get("q_lora_rank") is not None:  # null (DeepSeek-V2-Lite): queries from hidden_size directly
        d.set("model.attention.q_lora_rank", _count(config, "q_lora_rank", file, family), "q_lora_rank")
    for key in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
        least = 0 if key == "qk_nope_head_dim" else 1
        d.set(f"model.attention.{key}", _count(config, key, file, family, least=least), key)
    depth = _count(config, "num_nextn_predict_layers", file, family, default=0, least=0)
    if depth:
        d.set("model.mtp.depth", depth, "num_nextn_predict_layers")
        d.set(
            "model.mtp.loss_weight",
            DEEPSEEK_V3_MTP_WEIGHT,
            "from arXiv 2412.19437 section 4.2 (0.3, then 0.1 for the last 4.8T tokens), not the config",
        )
