"""Mixtures of experts export as Mixtral, OLMoE, Qwen3-MoE, Qwen2-MoE and DeepSeek-V3 (runlib.export.hf_moe):
transformers 5.x loads each tiny export and its logits equal runlib's model's (fp32, to 1e-5), with routers
sharp enough that the top-k choice differs between tokens and matters, and each refusal names its field."""

import json

import pytest
import torch

from runlib.errors import UserError
from runlib.export.hf import hf_architecture
from runlib.model.moe import MoE
from runlib.spec.models import RopeScalingSpec
from tests.export import tiny_export
from tests.export.tiny_export import DEEPSEEK, MIXTRAL, MOE, VOCAB_ROWS, sharpen
from tests.export.tiny_export import MOE_SHAPES as SHAPES


def logits(model, export_dir, tokens):
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(export_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(tokens), hf(tokens).logits.float(), hf


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors")  # DeepSeek-V3 without shared experts
@pytest.mark.parametrize("name", SHAPES)
def test_transformers_logits_equal_runlib(tmp_path, name):
    model, out = tiny_export.export(tmp_path / "hf", SHAPES[name], perturb=sharpen)
    tokens = torch.randint(0, VOCAB_ROWS, (2, 48), generator=torch.Generator().manual_seed(1))
    ours, theirs, hf = logits(model, out, tokens)
    assert type(hf).__name__ == hf_architecture(model.spec) == name.split("-")[0]
    assert theirs.shape == ours.shape
    difference = (ours - theirs).abs().max().item()
    assert difference < 1e-5, difference
    # the same parameters, bar Qwen2-MoE's zero q/k/v biases and the MTP modules (not exported)
    extra = {n: p for n, p in hf.named_parameters() if n.endswith(("q_proj.bias", "k_proj.bias", "v_proj.bias"))}
    if not model.spec.qkv_bias:
        assert all(not p.any() for p in extra.values())
    else:
        extra = {}
    ours_count = sum(p.numel() for n, p in model.named_parameters() if not n.startswith("mtp."))
    assert sum(p.numel() for n, p in hf.named_parameters() if n not in extra) == ours_count


def test_the_routing_matters(tmp_path):
    """Tokens pick different experts, and DeepSeek-V3's exported bias changes the choice: with the bias zeroed
    runlib's logits move (so the equality above covers e_score_correction_bias and the groups)."""
    model, _ = tiny_export.export(tmp_path / "hf", SHAPES["DeepseekV3ForCausalLM"], perturb=sharpen)
    tokens = torch.randint(0, VOCAB_ROWS, (2, 48), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        before = model(tokens)
        layer = [m for m in model.modules() if isinstance(m, MoE)][0]
        assert (layer.tokens_per_expert > 0).sum() >= 4  # the tokens spread over the experts
        for module in model.modules():
            if isinstance(module, MoE):
                module.router.expert_bias.zero_()
        assert (model(tokens) - before).abs().max() > 1e-3


@pytest.mark.parametrize("name", ["DeepseekV3ForCausalLM", "Qwen3MoeForCausalLM"])
def test_a_phase_yarn_scaling_is_exported(tmp_path, name):
    """A long-context phase's YaRN frequencies over the rotated dimensions (MLA's qk_rope_head_dim: DeepSeek-V3's
    config sets head_dim to it) load as transformers' rope_type yarn, past the original context."""
    scaling = RopeScalingSpec(kind="yarn", factor=4.0, original_seq_len=64)
    fields = {**SHAPES[name], "seq_len": 256}
    model, out = tiny_export.export(tmp_path / "hf", fields, 100_000.0, scaling, perturb=sharpen)
    tokens = torch.randint(0, VOCAB_ROWS, (1, 256), generator=torch.Generator().manual_seed(2))
    ours, theirs, hf = logits(model, out, tokens)
    assert hf.config.rope_parameters["rope_type"] == "yarn"
    assert (ours - theirs).abs().max().item() < 1e-5


def test_the_config_says_what_the_model_is(tmp_path):
    model, out = tiny_export.export(tmp_path / "hf", SHAPES["DeepseekV3ForCausalLM"], perturb=sharpen)
    config = json.loads((out / "config.json").read_text())
    assert config["rope_interleave"] is False and config["num_nextn_predict_layers"] == 0
    assert (config["n_group"], config["topk_group"], config["first_k_dense_replace"]) == (4, 2, 1)
    assert config["routed_scaling_factor"] == 2.5 and config["scoring_func"] == "sigmoid"
    _, out = tiny_export.export(tmp_path / "qwen3", SHAPES["Qwen3MoeForCausalLM"])
    config = json.loads((out / "config.json").read_text())
    assert (config["mlp_only_layers"], config["decoder_sparse_step"], config["head_dim"]) == ([0], 1, 24)
    assert (config["intermediate_size"], config["moe_intermediate_size"]) == (160, 32)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({**MIXTRAL, "moe": {**MOE, "score": "sigmoid"}}, "moe.score: sigmoid"),
        ({**MIXTRAL, "moe": {**MOE, "normalize_top_k": False}}, "moe.normalize_top_k"),
        ({**MIXTRAL, "moe": {**MOE, "dense_layers": 1}}, "moe.dense_layers"),
        ({**MIXTRAL, "moe": {**MOE, "route_scale": 2.0}}, "moe.route_scale"),
        ({**MIXTRAL, "moe": {**MOE, "groups": 2}}, "moe.groups"),
        ({**MIXTRAL, "qk_norm": True, "moe": {**MOE, "shared_experts": 1}}, "moe.shared_experts"),
        ({**MIXTRAL, "qk_norm": "per_head", "moe": {**MOE, "bias_update_rate": 0.001}}, "moe.bias_update_rate"),
        ({**MIXTRAL, "moe": {**MOE, "shared_experts": 1}}, "attention.kind mla"),
        ({**MIXTRAL, "qkv_bias": True}, "moe.shared_experts with shared_gate"),
        ({**MIXTRAL, "qk_norm": True, "head_dim": 8}, "model.head_dim"),
        ({**MIXTRAL, "head_dim": 24}, "model.head_dim"),
        ({**MIXTRAL, "bias": True}, "model.bias"),
        ({**MIXTRAL, "activation": "gelu"}, "activation: gelu"),
        ({**MIXTRAL, "qk_norm": "per_head", "sliding_window": 16}, "model.sliding_window"),
        ({**DEEPSEEK, "moe": MOE}, "moe.score: softmax"),
        ({**DEEPSEEK, "moe": {**MOE, "score": "sigmoid", "every": 2}}, "moe.every"),
        ({**DEEPSEEK, "moe": {**MOE, "score": "sigmoid", "shared_experts": 1, "shared_gate": True}}, "shared_gate"),
    ],
)
def test_mixtures_without_a_family_are_refused(tmp_path, fields, named):
    with pytest.raises(UserError, match="no Hugging Face equivalent") as info:
        tiny_export.export(tmp_path / "hf", fields)
    assert named in str(info.value) and "Fix:" in str(info.value)
    assert not (tmp_path / "hf").exists()


def test_a_balancing_bias_in_the_weights_is_refused_outside_deepseek(tmp_path):
    """A spec without bias_update_rate whose weights carry a nonzero expert_bias anyway (the router's choice
    would differ in Mixtral): refused when the weights are written."""

    def biased(model):
        for module in model.modules():
            if isinstance(module, MoE):
                module.router.expert_bias.fill_(0.5)

    with pytest.raises(UserError, match="nonzero expert_bias"):
        tiny_export.export(tmp_path / "hf", MIXTRAL, perturb=biased)
    assert not (tmp_path / "hf").exists()
