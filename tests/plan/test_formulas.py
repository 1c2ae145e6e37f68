"""Each formula of the plan against values computed by hand (the arithmetic is in the comments)."""

import math

import pytest

from runlib.audit.cases import case_data
from runlib.plan import derive
from runlib.plan.flops import flops_per_token, flops_per_token_causal
from runlib.plan.memory import activation_bytes_per_layer, state_bytes_per_param
from runlib.plan.params import count_params
from runlib.plan.scaling import deepseek_optimal_batch_tokens, deepseek_optimal_lr, refit_optimum
from runlib.plan.schedule import build_schedule
from runlib.spec import validate_data
from runlib.spec.models import ModelSpec, PrecisionSpec


def spec_with(patch):
    return validate_data(case_data(patch)).spec


def test_params_gpt2_small():
    # per layer: attn 4*768^2 + (3*768 + 768) biases = 2,362,368; mlp 2*768*3072 + 3072 + 768 = 4,722,432;
    # two layernorms 4*768 = 3,072 -> 7,087,872 * 12 = 85,054,464; + final LN 1,536 = 85,056,000 non-embedding;
    # + wte 50257*768 = 38,597,376 + wpe 1024*768 = 786,432 -> 124,439,808 (the published GPT-2 124M).
    model = ModelSpec(
        layers=12,
        d_model=768,
        heads=12,
        d_ff=3072,
        activation="gelu",
        norm="layernorm",
        bias=True,
        position="learned",
        tie_embeddings=True,
        seq_len=1024,
    )
    p = count_params(model, vocab_rows=50257, max_seq_len=1024)
    assert p.per_layer == 7_087_872
    assert p.non_embedding == 85_056_000
    assert p.total == 124_439_808
    assert p.embedding == 38_597_376 + 786_432


def test_params_llama2_7b_untied_and_gqa():
    # Llama 2 7B: per layer 4*4096^2 + 3*4096*11008 + 2*4096 = 67,108,864 + 135,266,304 + 8,192 = 202,383,360;
    # * 32 = 6,476,267,520 + 4,096 final norm; + 2 * 32000*4096 = 262,144,000 -> 6,738,415,616.
    model = ModelSpec(layers=32, d_model=4096, heads=32, d_ff=11008, seq_len=4096)
    assert count_params(model, 32000, 4096).total == 6_738_415_616
    # GQA with 8 kv heads: k and v shrink from 4096 to 1024 columns: -2 * 4096 * 3072 per layer
    gqa = ModelSpec(layers=32, d_model=4096, heads=32, kv_heads=8, d_ff=11008, seq_len=4096)
    assert count_params(gqa, 32000, 4096).total == 6_738_415_616 - 32 * 2 * 4096 * 3072


def test_qk_norm_adds_q_and_k_widths():
    base = dict(layers=2, d_model=64, heads=4, kv_heads=2, d_ff=128, seq_len=16)
    plain = count_params(ModelSpec(**base), 100, 16).total
    normed = count_params(ModelSpec(**base, qk_norm=True), 100, 16).total
    assert normed - plain == 2 * (64 + 32)


def test_flops_palm_and_causal():
    # 6 * 1e9 + 12 * 24 * 2048 * 2048 = 6e9 + 1,207,959,552
    assert flops_per_token(10**9, 24, 2048, 2048) == 6e9 + 12 * 24 * 2048 * 2048
    assert (
        flops_per_token(10**9, 24, 2048, 2048) - flops_per_token_causal(10**9, 24, 2048, 2048) == 6 * 24 * 2048 * 2048
    )


def test_plan_flops_total_is_per_phase_sum():
    plan = derive(spec_with({}))
    assert plan.flops_total == pytest.approx(sum(p.flops_per_token * p.tokens for p in plan.phases))
    long = next(p for p in plan.phases if p.kind == "long_context")
    short = plan.phases[0]
    attn = 12 * 12 * 768 * (4096 - 2048)  # 12 * L * d_attn * (s_long - s_short)
    assert long.flops_per_token - short.flops_per_token == pytest.approx(attn)


def test_wsd_schedule_values():
    s = build_schedule("wsd", 1e-3, 0.1, warmup_tokens=100, decay_tokens=200, run_tokens=1000)
    assert s.lr_at(0) == 0 and s.lr_at(50) == pytest.approx(5e-4)
    assert s.lr_at(100) == 1e-3 and s.lr_at(800) == 1e-3
    assert s.lr_at(900) == pytest.approx(1e-3 - 0.5 * 9e-4)  # halfway down the final 200 tokens
    assert s.lr_at(1000) == pytest.approx(1e-4)


def test_cosine_schedule_values_and_horizon():
    s = build_schedule("cosine", 1.0, 0.0, warmup_tokens=0, decay_tokens=None, run_tokens=100)
    assert s.lr_at(50) == pytest.approx(0.5)
    assert s.lr_at(100) == pytest.approx(0.0)
    longer = build_schedule("cosine", 1.0, 0.0, warmup_tokens=0, decay_tokens=200, run_tokens=100)
    assert longer.lr_at(100) == pytest.approx(0.5)  # horizon twice the run: the run ends mid-decay
    assert longer.tokens_at_floor() == 0
    shorter = build_schedule("linear", 1.0, 0.0, warmup_tokens=0, decay_tokens=50, run_tokens=100)
    assert shorter.lr_at(25) == pytest.approx(0.5) and shorter.tokens_at_floor() == 50


def test_timeline_whole_steps_and_ramp():
    # base: 2,411,724,800 tokens; 256Ki tokens/step (8 dp * 8 micro * 2 accum * 2048; long: 4 micro * 4096)
    plan = derive(spec_with({}))
    assert [p.span.drift_tokens for p in plan.phases] == [0, 0, 0, 0]
    assert plan.phases[0].steps == int(0.85 * 2411724800 / 262144)
    assert plan.phases[2].tokens_per_step == 262144  # micro_batch 4 at twice the length
    ramp = {
        "batch.ramp": [
            {"after": "0 tokens", "global_batch": "128Ki tokens"},
            {"after": "1B tokens", "global_batch": "256Ki tokens"},
        ]
    }
    plan = derive(spec_with(ramp))
    seg = plan.phases[0].span.segments
    assert seg[0].tokens_per_step == 131072 and seg[1].tokens_per_step == 262144
    assert seg[0].steps == math.ceil(1e9 / 131072)  # the step that crosses 1B tokens keeps the small batch
    assert seg[1].start_tokens == seg[0].start_tokens + seg[0].steps * 131072


def test_timeline_phase_in_steps():
    plan = derive(spec_with({"phases[1].tokens": "100 steps"}))
    assert plan.phases[1].steps == 100 and plan.phases[1].tokens == 100 * 262144


def test_memory_model_states():
    # bf16 + fp32 master + fp32 grads + fp32 Adam: 2 + 4 + 4 + 8 = 18 bytes/param (Megatron table)
    assert sum(state_bytes_per_param(PrecisionSpec())) == 18
    assert sum(state_bytes_per_param(PrecisionSpec(compute="fp32"))) == 16
    # fsdp over dp=8 divides all of it by 8
    none = derive(spec_with({})).phases[0].memory
    fsdp = derive(spec_with({"parallelism.sharding": "fsdp"})).phases[0].memory
    assert fsdp.optimizer_states == pytest.approx(none.optimizer_states / 8)
    assert fsdp.weights == pytest.approx(none.weights / 8)
    zero1 = derive(spec_with({"parallelism.sharding": "zero1"})).phases[0].memory
    assert zero1.weights == none.weights and zero1.gradients == none.gradients
    assert zero1.master_weights == pytest.approx(none.master_weights / 8)


def test_activation_bytes_per_layer_by_hand():
    # s=2048, b=1, h=768, a*hd=768, kv*hd=256, f=2048, swiglu, 2 bytes:
    # values per token = 2h + h + (768 + 2*256) + h + h + 3f = 1536+768+1280+768+768+6144 = 11264
    model = ModelSpec(layers=12, d_model=768, heads=12, kv_heads=4, d_ff=2048, seq_len=2048)
    assert activation_bytes_per_layer(model, 2048, 1, 1, 1, 2) == 2048 * 11264 * 2
    assert activation_bytes_per_layer(model, 2048, 1, 2, 1, 2) == 2048 * 11264  # tensor parallel halves it
    assert activation_bytes_per_layer(model, 2048, 1, 1, 4, 2) == 512 * 11264 * 2  # context parallel splits s


def test_full_recompute_saves_memory():
    none = derive(spec_with({})).phases[0].memory.activations
    full = derive(spec_with({"parallelism.activation_checkpointing": "full"})).phases[0].memory.activations
    assert full < none / 3


def test_scaling_references():
    # DeepSeek LLM at C = 1e23: lr ~ 4.2e-4 and batch ~ 9.7M tokens (auditor.md 2.5)
    assert deepseek_optimal_lr(1e23) == pytest.approx(4.2e-4, rel=0.02)
    assert deepseek_optimal_batch_tokens(1e23) == pytest.approx(9.7e6, rel=0.03)
    n, d = refit_optimum(6 * 1e9 * 20e9)
    assert 10 < d / n < 30  # the refit's optimum is ~20 tokens per parameter
    assert 6 * n * d == pytest.approx(6 * 1e9 * 20e9, rel=1e-9)


def test_gpu_hours_from_flops():
    plan = derive(spec_with({}))
    # GPU-hours = FLOPs / (312 TFLOP/s * 0.4) / 3600 on A100 bf16
    assert plan.gpu_hours == pytest.approx(plan.flops_total / (312e12 * 0.4) / 3600)
    assert plan.wall_days == pytest.approx(plan.gpu_hours / 8 / 24)


def test_epochs_per_source():
    plan = derive(spec_with({}))
    web = next(s for s in plan.sources if s.name == "web")
    expected = sum(p.tokens * p.settings.phase.mixture["web"] for p in plan.phases)
    assert web.tokens_used == pytest.approx(expected)
    assert web.epochs == pytest.approx(expected / 2.5e9)
