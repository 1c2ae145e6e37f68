"""Every Hugging Face config.json fixture imports to exactly the parameters transformers itself builds from it.

transformers (5.24, in the test extras) instantiates each config's model on the meta device (no memory, no
weights: AutoModelForCausalLM.from_config) and counts its parameters, tied weights once; runlib's importer maps
the same file to a spec whose plan counts them by formula (runlib.plan.params). The two must agree to the
parameter for every family the importer maps (runlib.review.importers.hf.FAMILIES).

For the mixture-of-experts families the active parameters are held to transformers' model as well: its total
less, in each MoE layer, the share (experts - top_k) / experts of the fused routed experts
(mlp.experts.gate_up_proj and down_proj, experts x ... each), the experts a token skips; tiny configs (a few
layers, widths of 64) cover the layer patterns and options the published configs do not (decoder_sparse_step
with mlp_only_layers, first_k_dense_replace, no query latent, group-limited routing, qkv_bias false)."""

import json
import warnings
from pathlib import Path

import pytest
import torch

from runlib.plan import derive
from runlib.review.importers import import_file
from runlib.review.importers.hf import FAMILIES
from runlib.review.importers.hf_moe import MOE_FAMILIES

FIXTURES = sorted((Path(__file__).parent.parent / "fixtures" / "imports" / "hf").glob("*.config.json"))


def transformers_model(path: Path) -> torch.nn.Module:
    from transformers import AutoConfig, AutoModelForCausalLM

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # rope_scaling factor / max_position notes of some configs
        config = AutoConfig.for_model(**json.loads(path.read_text()))
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(config)


def transformers_count(path: Path) -> int:
    return sum(p.numel() for p in transformers_model(path).parameters())


def transformers_active(model: torch.nn.Module) -> int:
    """The parameters one token passes through: the routed experts' share top_k / experts of each MoE layer's
    fused experts (num_local_experts, n_routed_experts or num_experts), all the rest. DeepSeek-V3's
    e_score_correction_bias is an nn.Buffer in transformers (modeling_deepseek_v3.py), as runlib counts it: no
    parameter of either."""
    config = model.config
    experts = next(
        getattr(config, k) for k in ("num_local_experts", "n_routed_experts", "num_experts") if getattr(config, k, None)
    )
    top_k = config.num_experts_per_tok
    total = skipped = 0
    for name, p in model.named_parameters():
        total += p.numel()
        if ".mlp.experts." in name:
            assert p.shape[0] == experts, name  # one slice per routed expert
            skipped += p.numel() * (experts - top_k) // experts
    return total - skipped


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_the_import_counts_what_transformers_builds(path: Path) -> None:
    assert derive(import_file(path).loaded.spec).params.total == transformers_count(path)


def test_every_family_has_a_fixture() -> None:
    families = {json.loads(p.read_text())["model_type"] for p in FIXTURES}
    assert set(FAMILIES) <= families, sorted(set(FAMILIES) - families)


MOE_FIXTURES = [p for p in FIXTURES if json.loads(p.read_text())["model_type"] in MOE_FAMILIES]


@pytest.mark.parametrize("path", MOE_FIXTURES, ids=lambda p: p.name)
def test_the_import_counts_the_active_parameters_of_transformers_model(path: Path) -> None:
    """Mixtral, OLMoE, Qwen1.5/2/3-MoE and DeepSeek-V2-Lite, V2, V3 as published (the meta device holds no weights;
    transformers 5 fuses each layer's experts into two tensors, so even DeepSeek-V3 builds in a moment)."""
    params = derive(import_file(path).loaded.spec).params
    model = transformers_model(path)
    assert (params.total, params.active) == (sum(p.numel() for p in model.parameters()), transformers_active(model))


TINY = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, vocab_size=256, max_position_embeddings=512)
TINY_MOE = {
    "mixtral": dict(num_hidden_layers=2, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2),
    "olmoe": dict(
        num_hidden_layers=2, num_key_value_heads=2, num_experts=8, num_experts_per_tok=2, norm_topk_prob=True
    ),
    # MoE layers 3 and 5 of 6: decoder_sparse_step 2 with layer 1 in mlp_only_layers (dense_layers 2, every 2)
    "qwen2_moe": dict(
        num_hidden_layers=6,
        num_key_value_heads=2,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=80,
        decoder_sparse_step=2,
        mlp_only_layers=[1],
        qkv_bias=False,
    ),
    # layer 0 dense (mlp_only_layers [0]), head_dim 32 against hidden_size / heads 16
    "qwen3_moe": dict(
        num_hidden_layers=3,
        num_key_value_heads=2,
        head_dim=32,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        mlp_only_layers=[0],
    ),
    # no query latent (q_lora_rank null, as V2-Lite), two dense layers, group-limited routing, two shared experts
    "deepseek_v2": dict(
        num_hidden_layers=4,
        n_routed_experts=8,
        num_experts_per_tok=2,
        n_shared_experts=2,
        moe_intermediate_size=32,
        first_k_dense_replace=2,
        q_lora_rank=None,
        kv_lora_rank=16,
        qk_rope_head_dim=8,
        qk_nope_head_dim=16,
        v_head_dim=16,
        topk_method="group_limited_greedy",
        n_group=2,
        topk_group=1,
    ),
    # transformers builds no MTP module (num_nextn_predict_layers is DeepSeek's remote code's): the main model only
    "deepseek_v3": dict(
        num_hidden_layers=3,
        n_routed_experts=8,
        num_experts_per_tok=2,
        n_shared_experts=1,
        moe_intermediate_size=32,
        first_k_dense_replace=1,
        q_lora_rank=24,
        kv_lora_rank=16,
        qk_rope_head_dim=8,
        qk_nope_head_dim=16,
        v_head_dim=24,
        n_group=4,
        topk_group=2,
        num_nextn_predict_layers=1,
    ),
}


@pytest.mark.parametrize("family", sorted(TINY_MOE))
def test_tiny_moe_configs_count_what_transformers_builds(family: str, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": family, **TINY, **TINY_MOE[family]}))
    params = derive(import_file(path).loaded.spec).params
    model = transformers_model(path)
    assert (params.total, params.active) == (sum(p.numel() for p in model.parameters()), transformers_active(model))
