"""What a transformers version makes of an export; the same code runs under the venv's transformers 5.x
and, as `python hf_reader.py JOB.json` with transformers 4.x first on sys.path, under 4.x
(test_hf_transformers4.py). It imports nothing of runlib, so the subprocess needs only transformers,
torch and safetensors.

JOB.json: {"tokens": a safetensors file holding "tokens" [n, L], "exports": {name: folder},
"logits": the safetensors file to write, one tensor per name}. Prints a JSON line: the transformers
version and file, and per export the class loaded and its configuration as the model reads it.
"""

import json
import sys
from pathlib import Path

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

# keys whose meaning the two versions share; read off the loaded config object, not config.json
SHARED_KEYS = {
    "llama": (
        "vocab_size hidden_size intermediate_size num_hidden_layers num_attention_heads num_key_value_heads "
        "head_dim hidden_act rms_norm_eps max_position_embeddings attention_bias mlp_bias pretraining_tp "
        "tie_word_embeddings eos_token_id bos_token_id pad_token_id"
    ).split(),
    # 4.46.3's Qwen2Config has no head_dim (its attention splits hidden_size evenly, as the export requires)
    "qwen2": (
        "vocab_size hidden_size intermediate_size num_hidden_layers num_attention_heads num_key_value_heads "
        "hidden_act rms_norm_eps max_position_embeddings use_sliding_window tie_word_embeddings "
        "eos_token_id bos_token_id pad_token_id"
    ).split(),
    "nemotron": (
        "vocab_size hidden_size intermediate_size num_hidden_layers num_attention_heads num_key_value_heads "
        "head_dim hidden_act norm_eps max_position_embeddings attention_bias mlp_bias tie_word_embeddings "
        "eos_token_id bos_token_id pad_token_id"
    ).split(),
    # the MoE families 4.46.3 has (runlib.export.hf_moe); its MixtralConfig and OlmoeConfig have no head_dim
    "mixtral": (
        "vocab_size hidden_size intermediate_size num_hidden_layers num_attention_heads num_key_value_heads "
        "hidden_act rms_norm_eps max_position_embeddings sliding_window num_local_experts num_experts_per_tok "
        "router_jitter_noise tie_word_embeddings eos_token_id bos_token_id pad_token_id"
    ).split(),
    "olmoe": (
        "vocab_size hidden_size intermediate_size num_hidden_layers num_attention_heads num_key_value_heads "
        "hidden_act rms_norm_eps max_position_embeddings attention_bias clip_qkv num_experts num_experts_per_tok "
        "norm_topk_prob tie_word_embeddings eos_token_id bos_token_id pad_token_id"
    ).split(),
    "qwen2_moe": (
        "vocab_size hidden_size intermediate_size num_hidden_layers num_attention_heads num_key_value_heads "
        "hidden_act rms_norm_eps max_position_embeddings use_sliding_window num_experts num_experts_per_tok "
        "moe_intermediate_size shared_expert_intermediate_size decoder_sparse_step mlp_only_layers norm_topk_prob "
        "tie_word_embeddings eos_token_id bos_token_id pad_token_id"
    ).split(),
    "gpt2": (
        "vocab_size n_embd n_inner n_layer n_head n_positions activation_function layer_norm_epsilon "
        "scale_attn_weights scale_attn_by_inverse_layer_idx reorder_and_upcast_attn tie_word_embeddings "
        "eos_token_id bos_token_id pad_token_id"
    ).split(),
}


def major_version() -> int:
    return int(transformers.__version__.split(".")[0])


def rope_read(config) -> dict | None:
    """The RoPE the model computes with, where this version takes it from (see runlib.export.hf.rope_config)."""
    if config.model_type not in ("llama", "nemotron", "mixtral", "olmoe", "qwen2_moe"):
        return None
    if major_version() >= 5:
        parameters = config.rope_parameters
        read = {"rope_type": parameters["rope_type"], "rope_theta": parameters["rope_theta"]}
        partial = parameters.get("partial_rotary_factor")
    else:
        scaling = config.rope_scaling or {}
        read = {"rope_type": scaling.get("rope_type", "default"), "rope_theta": config.rope_theta}
        partial = getattr(config, "partial_rotary_factor", None)
    if config.model_type == "nemotron":  # the rotated share: 5.x reads it in rope_parameters, 4.x at the top
        read["partial_rotary_factor"] = partial
    return read


def dtype_read(config) -> str:
    dtype = config.dtype if major_version() >= 5 else config.torch_dtype
    return str(dtype).removeprefix("torch.")


def reading(model) -> dict:
    """The class and the configuration this version built from an export's config.json."""
    config = model.config
    shared = {key: getattr(config, key) for key in SHARED_KEYS[config.model_type]}
    return {"class": type(model).__name__, "rope": rope_read(config), "dtype": dtype_read(config), **shared}


def load(folder):
    if major_version() >= 5:
        return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    return AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()


def tokenizer_reading(folder) -> dict:
    tokenizer = AutoTokenizer.from_pretrained(folder)
    return {
        "eos": [tokenizer.eos_token, tokenizer.eos_token_id],
        "pad_id": tokenizer.pad_token_id,
        "abc": tokenizer("abc")["input_ids"],
    }


def main(job_file: str) -> None:
    job = json.loads(Path(job_file).read_text())
    tokens = load_file(job["tokens"])["tokens"]
    report = {"version": transformers.__version__, "file": transformers.__file__, "exports": {}}
    logits = {}
    for name, folder in job["exports"].items():
        model = load(folder)
        with torch.no_grad():
            logits[name] = model(tokens).logits.float().contiguous()
        report["exports"][name] = reading(model)
        report["exports"][name]["tokenizer"] = tokenizer_reading(folder)
    save_file(logits, job["logits"])
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1])
