"""`runlib import` of the mixture-of-experts families' config.json: Mixtral, OLMoE, Qwen1.5/Qwen2-MoE,
Qwen3-MoE, DeepSeek-V2(-Lite) and DeepSeek-V3 as published (tests/fixtures/imports/hf/, PROVENANCE.md).

Each imports to a spec the schema accepts, with the published total within 0.5% and the published active
parameters within the precision the publisher gives them (2% of a two-digit figure, 0.5% of a three-digit
one). That the counts are exactly those of transformers' own models over the same files is
tests/review/test_import_counts_transformers.py's.

Active parameters, as each publisher counts them: Mistral, AllenAI and Qwen count every parameter a token
passes through, the input embedding table included; DeepSeek leaves the input embedding table out (with it
DeepSeek-V3 activates 37.55B, which no one rounds to its published 37B; without it 36.63B).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runlib.plan import derive
from runlib.review.importers import import_file
from runlib.review.importers.draft import UnmappableConfig
from tests.helpers import cli_refused, refused

HF = Path(__file__).parent.parent / "fixtures" / "imports" / "hf"

# fixture -> (published total, published active, tolerance of the active, whether the input table counts, where)
PUBLISHED = {
    "mixtral-8x7b.config.json": (
        46.7e9,
        12.9e9,
        0.005,
        True,
        "mistral.ai 'Mixtral of experts' (2023-12-11): 46.7B total, 12.9B per token; arXiv 2401.04088 section 2",
    ),
    "olmoe-1b-7b.config.json": (6.9e9, 1.3e9, 0.02, True, "allenai/OLMoE-1B-7B-0924; arXiv 2409.02060"),
    "qwen1.5-moe-a2.7b.config.json": (14.3e9, 2.7e9, 0.02, True, "Qwen/Qwen1.5-MoE-A2.7B model card"),
    "qwen2-57b-a14b.config.json": (57.4e9, 14e9, 0.02, True, "Qwen/Qwen2-57B-A14B; arXiv 2407.10671 Table 1"),
    "qwen3-30b-a3b.config.json": (30.5e9, 3.3e9, 0.02, True, "Qwen/Qwen3-30B-A3B model card"),
    "qwen3-235b-a22b.config.json": (235e9, 22e9, 0.02, True, "Qwen/Qwen3-235B-A22B model card"),
    # 2,451,435,008 without the input table (2,661,150,208 with it, 2,241,719,808 without the head either): no
    # count of the published shape rounds to 2.4B, the closest is 2.1% above it (15.7B is matched to 0.04%)
    "deepseek-v2-lite.config.json": (15.7e9, 2.4e9, 0.025, False, "arXiv 2405.04434 Appendix B"),
    "deepseek-v2.config.json": (236e9, 21e9, 0.02, False, "arXiv 2405.04434 abstract"),
    "deepseek-v3.config.json": (671e9, 37e9, 0.02, False, "arXiv 2412.19437 abstract"),
}
DEEPSEEK_V3_WITH_MTP = 685e9  # deepseek-ai/DeepSeek-V3 model card: 671B main model + 14B MTP module


def _params(name: str):
    imported = import_file(HF / name)
    return imported, derive(imported.loaded.spec).params


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_moe_configs_import_with_their_published_counts(name: str) -> None:
    total, active, tolerance, input_table, where = PUBLISHED[name]
    imported, params = _params(name)
    assert imported.loaded.spec.model.moe is not None
    assert abs(params.total / total - 1) < 0.005, f"{name}: {params.total:,} against {total:,.0f} ({where})"
    counted = params.active if input_table else params.active - params.embedding // 2  # untied: table + head
    assert abs(counted / active - 1) < tolerance, f"{name}: {counted:,} active against {active:,.0f} ({where})"
    header = imported.text.split("\nname:")[0]
    assert f"Parameters: {params.total:,}" in header and f"Active parameters: {params.active:,}" in header


def test_deepseek_v3_maps_latent_attention_node_limited_routing_and_mtp() -> None:
    imported, params = _params("deepseek-v3.config.json")
    model = imported.loaded.spec.model
    assert model.kv_heads is None and model.head_dim is None
    assert model.attention is not None and (model.attention.q_lora_rank, model.attention.kv_lora_rank) == (1536, 512)
    assert (model.attention.qk_rope_head_dim, model.attention.qk_nope_head_dim, model.attention.v_head_dim) == (
        64,
        128,
        128,
    )
    moe = model.moe
    assert moe is not None
    assert (moe.experts, moe.top_k, moe.expert_d_ff, moe.shared_experts, moe.dense_layers, moe.every) == (
        256,
        8,
        2048,
        1,
        3,
        1,
    )
    assert (moe.score, moe.normalize_top_k, moe.route_scale, moe.groups, moe.groups_per_token) == (
        "sigmoid",
        True,
        2.5,
        8,
        4,
    )
    assert (moe.bias_update_rate, moe.aux_loss, moe.aux_loss_scope) == (0.001, 0.001, "sequence")
    assert model.d_ff == 18432  # the three dense layers'
    assert model.mtp is not None and (model.mtp.depth, model.mtp.loss_weight) == (1, 0.3)
    assert model.seq_len == 4096  # rope_scaling's original_max_position_embeddings: YaRN extends it to 163840
    # 685B on the model card is the checkpoint: the main model, the MTP module, and the MTP module's own copies
    # of the embedding table and the output head (params.embedding, untied)
    assert abs((params.total + params.mtp + params.embedding) / DEEPSEEK_V3_WITH_MTP - 1) < 0.005
    header = imported.text.split("\nname:")[0]
    assert f"MTP modules: {params.mtp:,}" in header and "2412.19437 section 4.2" in imported.text


def test_deepseek_v2_lite_has_no_query_latent_and_greedy_routing() -> None:
    imported, _ = _params("deepseek-v2-lite.config.json")
    model = imported.loaded.spec.model
    assert model.attention is not None and model.attention.q_lora_rank is None
    assert model.moe is not None and model.moe.groups is None and model.moe.bias_update_rate == 0
    assert (model.moe.shared_experts, model.moe.dense_layers, model.moe.score) == (2, 1, "softmax")
    assert model.mtp is None and "MTP modules" not in imported.text
    v2 = import_file(HF / "deepseek-v2.config.json").loaded.spec.model
    assert v2.moe is not None and (v2.moe.groups, v2.moe.groups_per_token, v2.moe.route_scale) == (8, 3, 16.0)


@pytest.mark.parametrize(
    ("name", "fields", "moe_fields"),
    [
        (
            "mixtral-8x7b.config.json",
            {"sliding_window": None, "qk_norm": False},
            {"normalize_top_k": True, "aux_loss": 0.02},
        ),
        (
            "olmoe-1b-7b.config.json",
            {"qk_norm": True, "norm_position": "pre"},
            {"normalize_top_k": False, "aux_loss": 0.01},
        ),
        (
            "qwen2-57b-a14b.config.json",
            {"qkv_bias": True, "bias": False, "kv_heads": 4},
            {"shared_experts": 1, "shared_d_ff": 20480, "shared_gate": True, "expert_d_ff": 2560, "every": 1},
        ),
        (
            "qwen3-30b-a3b.config.json",
            {"qk_norm": "per_head", "head_dim": 128},
            {"shared_experts": 0, "normalize_top_k": True, "experts": 128, "top_k": 8},
        ),
    ],
)
def test_token_choice_families_map_their_fields(name: str, fields: dict, moe_fields: dict) -> None:
    model = import_file(HF / name).loaded.spec.model
    assert {k: getattr(model, k) for k in fields} == fields
    assert {k: getattr(model.moe, k) for k in moe_fields} == moe_fields


def test_olmoe_clip_qkv_is_stated_in_the_header(tmp_path: Path) -> None:
    config = json.loads((HF / "olmoe-1b-7b.config.json").read_text()) | {"clip_qkv": 8.0}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    header = import_file(path).text.split("\nname:")[0]
    assert "clip_qkv 8.0" in header and "without the clamp" in header


def test_a_regular_mlp_only_layers_maps_to_dense_layers(tmp_path: Path) -> None:
    config = json.loads((HF / "qwen3-30b-a3b.config.json").read_text()) | {"mlp_only_layers": [0, 1]}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    moe = import_file(path).loaded.spec.model.moe
    assert moe is not None and (moe.dense_layers, moe.every) == (2, 1)


def _changed(name: str, drop: str | None = None, **changes: object) -> str:
    config = json.loads((HF / name).read_text())
    config.pop(drop, None)
    return json.dumps(config | changes)


# name -> (config text, what the message must name besides the file)
HOSTILE = {
    "experts_missing": (_changed("mixtral-8x7b.config.json", drop="num_local_experts"), "num_local_experts"),
    "routed_experts_missing": (_changed("deepseek-v3.config.json", drop="n_routed_experts"), "n_routed_experts"),
    "top_k_a_string": (_changed("olmoe-1b-7b.config.json", num_experts_per_tok="two"), "num_experts_per_tok"),
    "top_k_zero": (_changed("qwen3-30b-a3b.config.json", num_experts_per_tok=0), "num_experts_per_tok"),
    "mlp_only_layers_irregular": (
        _changed("qwen3-30b-a3b.config.json", mlp_only_layers=[0, 5, 17]),
        "mlp_only_layers",
    ),
    "mlp_only_layers_not_a_list": (_changed("qwen3-30b-a3b.config.json", mlp_only_layers="0-3"), "mlp_only_layers"),
    "mlp_only_layers_every_layer": (
        _changed("qwen1.5-moe-a2.7b.config.json", mlp_only_layers=list(range(24))),
        "mlp_only_layers",
    ),
    "moe_layer_freq_of_deepseek_code": (_changed("deepseek-v2.config.json", moe_layer_freq=2), "moe_layer_freq"),
    "sparse_step_zero": (_changed("qwen1.5-moe-a2.7b.config.json", decoder_sparse_step=0), "decoder_sparse_step"),
    "scoring_func_unknown": (_changed("deepseek-v3.config.json", scoring_func="relu"), "scoring_func"),
    "topk_method_unknown": (_changed("deepseek-v3.config.json", topk_method="random"), "topk_method"),
    "topk_group_above_n_group": (_changed("deepseek-v3.config.json", topk_group=9), "topk_group"),
    "kv_lora_rank_missing": (_changed("deepseek-v2-lite.config.json", drop="kv_lora_rank"), "kv_lora_rank"),
    "norm_topk_prob_a_string": (_changed("olmoe-1b-7b.config.json", norm_topk_prob="yes"), "norm_topk_prob"),
    "layers_1e12": (_changed("deepseek-v3.config.json", num_hidden_layers=10**12), "num_hidden_layers"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_moe_config_it_cannot_map_is_refused_naming_file_and_key(case: str, tmp_path: Path) -> None:
    text, key = HOSTILE[case]
    path = tmp_path / "config.json"
    path.write_text(text)
    refused(lambda: import_file(path), str(path), key, error=UnmappableConfig, max_chars=2000)


@pytest.mark.parametrize("case", ["experts_missing", "top_k_a_string", "mlp_only_layers_irregular"])
def test_the_cli_exits_2_naming_file_and_key(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text, key = HOSTILE[case]
    path = tmp_path / "config.json"
    path.write_text(text)
    cli_refused(["import", str(path), "-o", str(tmp_path / "out.yaml")], capsys, str(path), key)
    assert not (tmp_path / "out.yaml").exists()
