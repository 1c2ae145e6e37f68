"""Tiny exports for the export tests: a runlib model of a given shape with non-trivial norms and biases (and,
through `sharpen`, routers far from uniform), exported by runlib.export.hf.write_export with a
character-level tokenizer."""

import torch

from runlib.export.hf import ExportShape, write_export
from runlib.model.moe import MoE
from runlib.model.transformer import Transformer
from runlib.spec.models import ModelSpec
from runlib.tokenizer.special import special_ids

VOCAB_ROWS = 384
LLAMA = {"layers": 2, "d_model": 64, "heads": 4, "d_ff": 160, "seq_len": 64}
GPT2 = {**LLAMA, "position": "learned", "norm": "layernorm", "activation": "gelu"}
SHAPES = {
    "llama-tied-gqa": {**LLAMA, "kv_heads": 2, "tie_embeddings": True, "rope_theta": 500000.0},
    "llama-untied-bias-headdim": {**LLAMA, "head_dim": 8, "bias": True},
    "gpt2-tied-bias": {**GPT2, "tie_embeddings": True, "bias": True},
    "gpt2-untied-nobias": GPT2,
    "qwen2-qkv-bias": {**LLAMA, "kv_heads": 2, "qkv_bias": True},
    "qwen3-per-head-qk-norm": {**LLAMA, "kv_heads": 2, "head_dim": 24, "qk_norm": "per_head", "tie_embeddings": True},
    "olmo2-output-norms": {**LLAMA, "kv_heads": 2, "qk_norm": True, "norm_position": "output"},
    "smollm3-nope": {**LLAMA, "kv_heads": 2, "nope_every": 2, "tie_embeddings": True},
    # Nemotron-4's block: LayerNorm scaled by 1 + weight, with biases; squared ReLU; RoPE over half of each head
    "nemotron-partial-rope": {
        **LLAMA,
        "kv_heads": 2,
        "norm": "layernorm1p",
        "norm_bias": True,
        "activation": "relu2",
        "rope_fraction": 0.5,
    },
    # Gemma 2's block: GeGLU, sandwich norms, embeddings times sqrt(d_model), a query scale other than the head's,
    # soft-capped attention and output logits, a sliding window on alternate layers (shorter than the test's rows)
    "gemma2": {
        **LLAMA,
        "kv_heads": 2,
        "head_dim": 24,
        "activation": "geglu",
        "norm_position": "sandwich",
        "embedding_multiplier": 8.0,
        "attention_scale_dim": 16,
        "attention_softcap": 5.0,
        "final_softcap": 3.0,
        "sliding_window": 16,
        "global_every": 2,
        "tie_embeddings": True,
    },
}
# families transformers 4.46.3 does not have (Qwen3: 4.51; OLMo 2: 4.47), or reads otherwise (Gemma 2's layer_types)
NEEDS_TRANSFORMERS_5 = ("qwen3-per-head-qk-norm", "olmo2-output-norms", "gemma2", "smollm3-nope")  # gemma2: layer_types

# mixtures of experts (runlib.export.hf_moe), each named by the class transformers loads (and a variant)
MOE = {"experts": 8, "top_k": 2, "expert_d_ff": 32}
MLA = {
    "kind": "mla",
    "q_lora_rank": 32,
    "kv_lora_rank": 24,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 16,
    "v_head_dim": 16,
}
MIXTRAL = {**LLAMA, "kv_heads": 2, "moe": MOE}
DEEPSEEK = {**LLAMA, "layers": 3, "attention": MLA}
MOE_SHAPES = {
    "MixtralForCausalLM": {**MIXTRAL, "tie_embeddings": True},
    # one window over every layer (Mistral's), shorter than the test's rows; dropless inference (capacity_factor)
    "MixtralForCausalLM-window": {**MIXTRAL, "sliding_window": 16, "moe": {**MOE, "capacity_factor": 8.0}},
    "OlmoeForCausalLM": {**MIXTRAL, "qk_norm": True, "moe": {**MOE, "normalize_top_k": False}},
    "Qwen3MoeForCausalLM": {
        **MIXTRAL,
        "layers": 3,
        "head_dim": 24,
        "qk_norm": "per_head",
        "moe": {**MOE, "dense_layers": 1},
    },
    "Qwen3MoeForCausalLM-every": {**MIXTRAL, "qk_norm": "per_head", "moe": {**MOE, "every": 2}},
    "Qwen2MoeForCausalLM": {
        **MIXTRAL,
        "layers": 3,
        "qkv_bias": True,
        "moe": {**MOE, "normalize_top_k": False, "shared_experts": 1, "shared_d_ff": 48, "shared_gate": True},
    },
    "Qwen2MoeForCausalLM-nobias": {**MIXTRAL, "moe": {**MOE, "shared_experts": 2, "shared_gate": True}},
    # V3's router: sigmoid, 4 groups of 2 with the 2 best groups kept, a balancing bias, scaled weights
    "DeepseekV3ForCausalLM": {
        **DEEPSEEK,
        "moe": {
            **MOE,
            "score": "sigmoid",
            "groups": 4,
            "groups_per_token": 2,
            "route_scale": 2.5,
            "bias_update_rate": 0.001,
            "shared_experts": 1,
            "dense_layers": 1,
        },
        "mtp": {"depth": 1, "loss_weight": 0.3},
    },
    "DeepseekV3ForCausalLM-plain": {
        **DEEPSEEK,
        "attention": {**MLA, "q_lora_rank": None},
        "moe": {**MOE, "score": "sigmoid", "normalize_top_k": False},
        "tie_embeddings": True,
    },
    "DeepseekV3ForCausalLM-dense": DEEPSEEK,
}
# MoE families transformers 4.46.3 does not have (Qwen3-MoE: 4.51; DeepSeek-V3: 4.51)
MOE_NEEDS_TRANSFORMERS_5 = tuple(name for name in MOE_SHAPES if name.startswith(("Qwen3Moe", "DeepseekV3")))


def sharpen(model) -> None:
    """Routers far from uniform (a random gate ~25 times init's scale) and a balancing bias that moves choices."""
    for module in model.modules():
        if isinstance(module, MoE):
            module.router.gate.weight.normal_(0.0, 0.5)
            module.router.expert_bias.normal_(0.0, 0.1)
            if module.spec.bias_update_rate == 0:
                module.router.expert_bias.zero_()  # only DeepSeek-V3 has the bias (refused elsewhere)


def tiny_tokenizer_json() -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers

    specials = special_ids(5)
    vocab = {**specials, **{chr(c): 5 + i for i, c in enumerate(range(97, 123))}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok.add_special_tokens(list(specials))
    return tok.to_str()


def export(out_dir, fields: dict, theta: float | None = None, scaling=None, perturb=None):
    """(runlib's model in eval mode, the export folder); theta: a phase's RoPE base other than the model's;
    scaling: a phase's RopeScalingSpec; perturb: called with the model before it is exported (under no_grad)."""
    model_spec = ModelSpec(**fields)
    torch.manual_seed(0)
    model = Transformer(model_spec, VOCAB_ROWS, model_spec.seq_len)
    with torch.no_grad():  # non-trivial norm weights and biases, so a mis-mapped one shows
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
        if perturb is not None:
            perturb(model)
    theta = theta or model_spec.rope_theta
    if model_spec.position == "rope":
        model.set_rope(theta, model_spec.seq_len, scaling)
    shape = ExportShape(
        model_spec, VOCAB_ROWS, model_spec.seq_len, model_spec.seq_len, theta, eos_id=0, pad_id=1, rope_scaling=scaling
    )
    out = write_export(model.state_dict(), shape, tiny_tokenizer_json(), special_ids(5), out_dir, {"test": 1})
    return model.eval(), out
