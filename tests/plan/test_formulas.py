"""Each formula of the plan against values computed by hand (the arithmetic is in the comments)."""

import math

import pytest

from runlib.audit.cases import case_data
from runlib.errors import SpecError
from runlib.plan import derive
from runlib.plan.flops import causal_mean_keys, flops_per_token, flops_per_token_causal
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


def test_inverse_sqrt_schedule():
    """Vaswani et al. 2017 (section 5.3): linear warmup to the peak at w, then peak * sqrt(w / t); with a hold
    (T5, PaLM) the decay starts at warmup + hold; a floor caps it from below, and the run's tokens at the floor
    count from where peak * sqrt(s / t) meets it."""
    from runlib.plan.schedule import build_schedule

    s = build_schedule("inverse_sqrt", 1e-2, 0.0, 100.0, None, 10_000.0)
    assert s.lr_at(50.0) == pytest.approx(5e-3) and s.lr_at(100.0) == 1e-2
    assert s.lr_at(400.0) == pytest.approx(5e-3) and s.lr_at(10_000.0) == pytest.approx(1e-3)
    held = build_schedule("inverse_sqrt", 1e-2, 0.2, 0.0, None, 10_000.0, hold_tokens=100.0)
    assert held.lr_at(0.0) == held.lr_at(100.0) == 1e-2 and held.lr_at(400.0) == pytest.approx(5e-3)
    assert held.lr_at(5_000.0) == pytest.approx(2e-3)  # the floor: sqrt(100 / 5000) = 0.141 < 0.2
    assert held.tokens_at_floor() == pytest.approx(10_000.0 - 100.0 * 25)


def test_a_phase_path_rewarms_then_decays_from_where_the_schedule_stood():
    """phases[].optimizer: lr_rewarm rises from 0 to the LR at the phase's start; lr_decay_to falls from it to a
    share of the peak by the phase's end (OLMo 2 stage 2: linear to 0; DeepSeek-V3: cosine to 0.1)."""
    from runlib.plan.schedule import PhasePath, build_schedule, phase_lr

    schedule = build_schedule("constant", 1e-3, 0.0, 0.0, None, 200.0)
    linear = PhasePath(100.0, 200.0, 6e-4, 0.0, "linear", 20.0)
    assert [linear.lr_at(t) for t in (100.0, 110.0, 120.0, 160.0, 200.0)] == pytest.approx([0.0, 3e-4, 6e-4, 3e-4, 0.0])
    cosine = PhasePath(100.0, 200.0, 1e-3, 1e-4, "cosine")
    assert cosine.lr_at(150.0) == pytest.approx(5.5e-4) and cosine.lr_at(200.0) == pytest.approx(1e-4)
    rewarm_only = PhasePath(100.0, 200.0, 1e-3, None, "linear", 10.0)
    assert rewarm_only.lr_at(105.0) == pytest.approx(5e-4) and rewarm_only.lr_at(150.0) is None
    assert phase_lr(schedule, 150.0, 0.5, rewarm_only) == 5e-4  # after the rewarm: the schedule, scaled


def test_sliding_window_layers_score_the_window_only():
    # Mistral 7B (arXiv 2310.06825): 32 layers, d_attn 4096, every layer windowed at 4096, seq 8192
    full = flops_per_token(0, 32, 4096, 8192)
    windowed = flops_per_token(0, 32, 4096, 8192, window=4096, windowed_layers=32)
    assert windowed == full / 2 == 12 * 32 * 4096 * 4096
    # Gemma 2: half the layers windowed; a window longer than the sequence changes nothing
    assert flops_per_token(0, 46, 4096, 8192, window=4096, windowed_layers=23) == 12 * 4096 * (23 * 8192 + 23 * 4096)
    assert flops_per_token(0, 46, 4096, 2048, window=4096, windowed_layers=23) == flops_per_token(0, 46, 4096, 2048)
    # causal: the mean over queries of min(i, w): (s + 1) / 2 without a window, about w - w^2 / 2s within
    assert causal_mean_keys(8) == 4.5 and causal_mean_keys(8, 2) == (1 + 2 * 7) / 8
    causal = flops_per_token_causal(0, 2, 64, 8, window=2, windowed_layers=1)
    assert causal == 6 * 64 * (8 + 8 * (15 / 8) / 4.5)


def test_gemma2_27b_parameters_are_table_1s_with_sandwich_norms():
    """arXiv 2408.00118 Table 1: 1,179,648,000 embedding and 26,047,480,320 non-embedding parameters; without the
    norms after each sublayer 2 x 46 x 4608 fewer."""
    gemma = ModelSpec(
        layers=46,
        d_model=4608,
        heads=32,
        kv_heads=16,
        head_dim=128,
        d_ff=36864,
        activation="geglu",
        norm_position="sandwich",
        tie_embeddings=True,
        seq_len=8192,
    )
    counts = count_params(gemma, 256000, 8192)
    assert (counts.embedding, counts.non_embedding) == (1_179_648_000, 26_047_480_320)
    pre = count_params(gemma.model_copy(update={"norm_position": "pre"}), 256000, 8192)
    assert counts.total - pre.total == 2 * 46 * 4608


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
    # values per token = 2h + h + (768 + 2*256) + h + h + 4f = 1536+768+1280+768+768+8192 = 13312
    # (SwiGLU keeps gate, up, silu(gate) and their product)
    model = ModelSpec(layers=12, d_model=768, heads=12, kv_heads=4, d_ff=2048, seq_len=2048)
    assert activation_bytes_per_layer(model, 2048, 1, 1, 1, 2) == 2048 * 13312 * 2
    assert activation_bytes_per_layer(model, 2048, 1, 2, 1, 2) == 2048 * 13312  # tensor + sequence parallel halve it
    # context parallel splits s, but the attention kernel keeps the row's gathered k and v (2 x 256 per token)
    assert activation_bytes_per_layer(model, 2048, 1, 1, 4, 2) == (512 * (13312 - 512) + 2048 * 512) * 2
    # without sequence parallelism the norm, attention and MLP inputs (4h) stay whole on each tensor rank
    no_sp = activation_bytes_per_layer(model, 2048, 1, 2, 1, 2, sequence_parallel=False)
    assert no_sp == 2048 * (13312 - 4 * 768) + 2048 * 4 * 768 * 2


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


# ------------------------------------------------- shape variants: norm bias, parallel blocks, embedding norm


def _model(**kw):
    return ModelSpec(**({"layers": 2, "d_model": 64, "heads": 4, "d_ff": 256, "seq_len": 128} | kw))


def test_norm_bias_apart_from_linear_bias():
    # layernorm without norm_bias follows bias; norm_bias true adds d per norm: 2 per layer + final = 5 x 64
    base = count_params(_model(norm="layernorm", activation="gelu"), 100, 128).total
    biased = count_params(_model(norm="layernorm", activation="gelu", norm_bias=True), 100, 128).total
    assert biased - base == 5 * 64
    with pytest.raises(ValueError, match="RMSNorm has a scale and no bias"):
        _model(norm="rmsnorm", norm_bias=True)


def test_parallel_block_has_one_norm_per_layer_and_embedding_norm_one_more():
    plain = count_params(_model(), 100, 128)
    parallel = count_params(_model(parallel_block=True), 100, 128)
    assert plain.per_layer - parallel.per_layer == 64  # one RMSNorm of d_model
    assert count_params(_model(embedding_norm=True), 100, 128).non_embedding - plain.non_embedding == 64
    assert (
        count_params(_model(embedding_norm=True, norm="layernorm", bias=True), 100, 128).total
        - count_params(_model(norm="layernorm", bias=True), 100, 128).total
        == 128
    )  # weight and bias


def test_relu_family_has_two_mlp_matrices_and_alibi_no_positions():
    gelu = count_params(_model(activation="gelu"), 100, 128).total
    for activation in ("relu", "relu2"):
        assert count_params(_model(activation=activation), 100, 128).total == gelu
    assert count_params(_model(position="alibi"), 100, 128).total == count_params(_model(), 100, 128).total
    assert count_params(_model(position="learned"), 100, 128).total - gelu > 0


def test_relative_positions_params_and_flops():
    # Transformer-XL: W_{k,R} d x (a*hd) + u, v (a*hd each) per layer: 64*64 + 2*64 = 4,224
    rel = count_params(_model(position="relative"), 100, 128)
    assert rel.per_layer - count_params(_model(), 100, 128).per_layer == 4_224
    # one more score matmul: 18 instead of 12 x L x d_attn x s (PaLM), 9 instead of 6 (causal)
    assert flops_per_token(1000, 2, 64, 128, relative_positions=True) == 6 * 1000 + 18 * 2 * 64 * 128
    assert flops_per_token_causal(1000, 2, 64, 128, relative_positions=True) == 6 * 1000 + 9 * 2 * 64 * 128


def test_multistep_schedule_deepseek():
    # DeepSeek LLM: 2000-token warmup here, the peak until 80%, 31.6% until 90%, then 10%
    s = build_schedule("multistep", 3.2e-4, 0.0, 2000, None, 100_000, [(90_000, 0.1), (80_000, 0.316)])
    assert s.lr_at(1000) == pytest.approx(1.6e-4)
    assert s.lr_at(50_000) == 3.2e-4 and s.lr_at(79_999) == 3.2e-4
    assert s.lr_at(80_000) == pytest.approx(3.2e-4 * 0.316) and s.lr_at(89_999) == pytest.approx(3.2e-4 * 0.316)
    assert s.lr_at(95_000) == pytest.approx(3.2e-5) and s.floor_lr == pytest.approx(3.2e-5)
    assert s.tokens_at_floor() == 10_000
    with pytest.raises(SpecError, match="needs schedule.lr_steps"):
        spec_with({"schedule.kind": "multistep", "schedule.decay": "__delete__", "schedule.min_lr_ratio": "__delete__"})
    with pytest.raises(SpecError, match="reads neither decay nor min_lr_ratio"):
        spec_with({"schedule.kind": "multistep", "schedule.lr_steps": [{"after": "80%", "lr_ratio": 0.3}]})


def test_multistep_and_phase_lr_scale_reach_the_trainer():
    from runlib.train.config import build_train_phase_configs

    spec = spec_with(
        {
            "schedule.kind": "multistep",
            "schedule.decay": "__delete__",
            "schedule.min_lr_ratio": "__delete__",
            "schedule.lr_steps": [{"after": "80%", "lr_ratio": 0.316}, {"after": "90%", "lr_ratio": 0.1}],
            "phases[3].optimizer": {"lr_scale": 0.5, "grad_clip": 0.3},
        }
    )
    plan = derive(spec)
    configs = build_train_phase_configs(spec, plan)
    run = plan.tokens_total
    peak = spec.optimizer.lr
    # phases: 85% foundation, 5% enrich, 2% long, 8% anneal (case base): the foundation phase crosses 80%
    assert configs[0].schedule.lr_at(0.5 * run) == peak
    assert configs[0].schedule.lr_at(0.84 * run) == pytest.approx(0.316 * peak)
    assert configs[1].schedule.lr_at(0.88 * run) == pytest.approx(0.316 * peak)
    # the anneal phase: after 90% at 10%, times its lr_scale 0.5; its clip replaces the run's
    assert configs[3].schedule.lr_at(0.95 * run) == pytest.approx(0.05 * peak)
    assert configs[3].optimizer.grad_clip == 0.3 and configs[0].optimizer.grad_clip == spec.optimizer.grad_clip
    assert plan.phases[3].lr_end == pytest.approx(0.05 * peak)
    # an earlier phase's config does not hold a later level
    assert [t for t, _ in configs[0].schedule.levels] == [plan.schedule.levels[0][0]]


def test_linear_ramp_is_megatrons_rampup():
    # BLOOM's --rampup-batch-size 192 16 9_765_625 on the case base's layout (dp 8, micro 8, accum 2 -> 128
    # sequences): from 64 by 16 over 10% of the run: (128 - 64) / 16 = 4 increments of 2.5% each
    from runlib.plan.timeline import ramp_points

    spec = spec_with({"batch.linear_ramp": {"start": "64 sequences", "increment": "16 sequences", "over": "10%"}})
    points = ramp_points(spec)
    tokens = spec.tokens
    assert [(round(t / tokens, 4), b.amount, b.unit) for t, b in points] == [
        (0.0, 64, "sequences"),
        (0.025, 80, "sequences"),
        (0.05, 96, "sequences"),
        (0.075, 112, "sequences"),
        (0.1, 128, "sequences"),
    ]
    plan = derive(spec)
    first = plan.phases[0].span.segments
    assert first[0].tokens_per_step == 64 * 2048 and first[-1].tokens_per_step == 128 * 2048
    with pytest.raises(SpecError, match="both given"):
        spec_with(
            {
                "batch.ramp": [{"after": "0 tokens", "global_batch": 64}],
                "batch.linear_ramp": {"start": "64 sequences", "increment": "16 sequences", "over": "10%"},
            }
        )


def test_pipeline_in_flight_by_schedule():
    from runlib.plan.memory import pipeline_in_flight

    assert pipeline_in_flight("1f1b", 4, 1, 0, 8) == 4 and pipeline_in_flight("1f1b", 4, 1, 3, 8) == 1
    assert pipeline_in_flight("1f1b", 4, 1, 0, 2) == 2  # never more than the step's micro-batches
    assert pipeline_in_flight("gpipe", 4, 1, 3, 8) == 8  # every forward before the first backward
    # interleaved, 4 ranks x 2 chunks: rank 0 warms up with 2 x 3 + 1 x 4 chunk forwards, +1 in flight
    assert pipeline_in_flight("interleaved_1f1b", 4, 2, 0, 8) == 11 / 2
    assert pipeline_in_flight("interleaved_1f1b", 4, 2, 0, 2) == 4 / 2
    assert pipeline_in_flight("1f1b", 1, 1, 0, 8) == 1


def test_deepseek_v3_schedule_constant_cosine_then_two_constant_steps():
    """DeepSeek-V3 (arXiv 2412.19437, section 4.2): constant 2.2e-4 after warmup, a cosine to 2.2e-5, then
    2.2e-5 and 7.3e-6: a constant schedule, a phase with its own cosine (lr_decay_to 0.1) and two phases at
    lr_scale 0.1 and 7.3 / 220. The plan and the trainer's schedule agree at every phase's start, middle and end."""
    from runlib.audit.cases import case_data
    from runlib.plan import derive
    from runlib.spec import validate_data
    from runlib.train.config import build_train_phase_configs

    patch = {
        "optimizer.lr": 2.2e-4,
        "schedule": {"kind": "constant", "warmup": "1%"},
        "phases[1].optimizer": {"lr_decay_to": 0.1, "lr_decay_shape": "cosine"},
        "phases[2].optimizer": {"lr_scale": 0.1},
        "phases[3].optimizer": {"lr_scale": 7.3e-6 / 2.2e-4},
    }
    spec = validate_data(case_data(patch)).spec
    plan = derive(spec)
    expected = [(0.0, 2.2e-4), (2.2e-4, 2.2e-5), (2.2e-5, 2.2e-5), (7.3e-6, 7.3e-6)]  # the first from its warmup
    for phase, (start, end) in zip(plan.phases, expected, strict=True):
        assert (phase.lr_start, phase.lr_end) == pytest.approx((start, end), rel=1e-6), phase.name
    configs = build_train_phase_configs(spec, plan)
    middle = [2.2e-4, 2.2e-5 + (2.2e-4 - 2.2e-5) / 2, 2.2e-5, 7.3e-6]
    for config, phase, (_, end), mid_lr in zip(configs, plan.phases, expected, middle, strict=True):
        span = phase.span
        assert config.schedule.lr_at(span.end_tokens) == pytest.approx(end, rel=1e-3), phase.name
        assert config.schedule.lr_at((span.start_tokens + span.end_tokens) / 2) == pytest.approx(mid_lr, rel=1e-3)
