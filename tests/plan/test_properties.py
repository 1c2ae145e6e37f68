"""Properties of the plan and the audit over generated specs (hypothesis)."""

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runlib.audit import audit
from runlib.audit.cases import case_data
from runlib.errors import SpecError
from runlib.plan import derive
from runlib.spec import validate_data

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

durations = st.one_of(
    st.integers(1, 40).map(lambda p: f"{p}%"),
    st.integers(1, 3000).map(lambda s: f"{s} steps"),
    st.integers(1, 400).map(lambda m: f"{m}M tokens"),
)


@st.composite
def sound_patches(draw):
    """Patches that keep the spec loadable, with varied batch, phases, schedule and ramp."""
    patch = {
        "batch.micro_batch": draw(st.integers(1, 32)),
        "batch.grad_accum": draw(st.integers(1, 8)),
        "batch.global_batch": "__delete__",
        "hardware.devices_per_node": draw(st.sampled_from([1, 2, 4, 8])),
        "hardware.nodes": draw(st.integers(1, 4)),
        "model.seq_len": draw(st.sampled_from([256, 1024, 2048])),
        "schedule.kind": draw(st.sampled_from(["wsd", "cosine", "linear", "constant"])),
        "schedule.warmup": draw(durations),
        "schedule.decay": draw(durations),
        "schedule.min_lr_ratio": draw(st.floats(0, 1)),
        "optimizer.lr": draw(st.floats(1e-5, 1e-2)),
        "tokens": draw(st.integers(10**7, 10**10)),
        "phases[0].tokens": draw(durations),
        "phases[1].tokens": draw(durations),
        "phases[2].tokens": draw(durations),
        "phases[3].tokens": draw(durations),
        "phases[2].seq_len": draw(st.sampled_from([2048, 4096, 8192])),
    }
    if draw(st.booleans()):
        first = draw(st.integers(1, 256))
        patch["batch.ramp"] = [
            {"after": "0 tokens", "global_batch": f"{first * 2048} tokens"},
            {"after": f"{draw(st.integers(1, 900))}M tokens", "global_batch": f"{first * 4096} tokens"},
        ]
    return patch


def plan_of(patch):
    return derive(validate_data(case_data(patch)).spec)


@FAST
@given(sound_patches())
def test_steps_times_tokens_per_step_is_phase_tokens_up_to_drift(patch):
    plan = plan_of(patch)
    position = 0
    for phase in plan.phases:
        span = phase.span
        assert span.start_tokens == position  # phases are contiguous on one timeline
        assert sum(s.steps * s.tokens_per_step for s in span.segments) == phase.tokens
        assert phase.tokens - span.nominal_tokens == span.drift_tokens
        if len(span.segments) == 1 and phase.steps > 1:
            assert abs(span.drift_tokens) <= span.segments[0].tokens_per_step / 2  # nearest whole step
        position = span.end_tokens
    assert plan.tokens_total == position
    assert plan.steps_total == sum(p.steps for p in plan.phases)


@FAST
@given(sound_patches(), st.lists(st.floats(0, 1), min_size=1, max_size=20))
def test_lr_within_floor_and_peak_and_continuous_across_phases(patch, fractions):
    plan = plan_of(patch)
    s = plan.schedule
    for f in fractions:
        lr = s.lr_at(f * plan.tokens_total)
        assert -1e-15 <= lr <= s.peak_lr * (1 + 1e-12)
        if f * plan.tokens_total >= s.warmup_tokens:
            assert lr >= s.floor_lr * (1 - 1e-12)
    for before, after in zip(plan.phases, plan.phases[1:], strict=False):
        assert before.lr_end == after.lr_start
    eps = max(plan.tokens_total * 1e-9, 1.0)
    for p in plan.phases[1:]:  # no jump at a boundary (a zero-length decay is a deliberate step)
        t = p.span.start_tokens
        if abs(s.decay_end_tokens - s.decay_start_tokens) > 1 and t != s.warmup_tokens:
            assert math.isclose(s.lr_at(t - eps), s.lr_at(t + eps), rel_tol=1e-3, abs_tol=s.peak_lr * 1e-3)


@FAST
@given(sound_patches(), st.integers(1, 16))
def test_memory_grows_with_micro_batch(patch, extra):
    small = plan_of(patch)
    larger = plan_of({**patch, "batch.micro_batch": patch["batch.micro_batch"] + extra})
    for a, b in zip(small.phases, larger.phases, strict=False):
        if a.settings.batch_overridden:
            continue
        assert b.memory.total > a.memory.total
        assert b.memory.activations > a.memory.activations


leaf_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["0%", "150%", "0 steps", "1e30 tokens", "4Mi", "0", "-1", "fsdp", "fp16", "none", "__delete__"]),
    st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.sampled_from(["web", "code", "x"]), st.floats(-1, 2), max_size=3),
)

MUTABLE_PATHS = [
    "tokens",
    "seed",
    "hardware.accelerator",
    "hardware.nodes",
    "hardware.devices_per_node",
    "hardware.mfu",
    "hardware.node_mtbf_hours",
    "budget.gpu_hours",
    "budget.days",
    "model.layers",
    "model.d_model",
    "model.heads",
    "model.kv_heads",
    "model.d_ff",
    "model.vocab_size",
    "model.seq_len",
    "model.rope_theta",
    "model.position",
    "tokenizer.vocab_size",
    "tokenizer.reserved_tokens",
    "tokenizer.domain_tokens",
    "tokenizer.drop_tokens",
    "tokenizer.train_on",
    "data.sources.web.tokens",
    "data.sources.code.tokens",
    "data.sources.code.fim",
    "data.heldout_docs",
    "data.packing",
    "data.token_dtype",
    "data.mean_doc_tokens",
    "parallelism.tensor",
    "parallelism.pipeline",
    "parallelism.context",
    "parallelism.sharding",
    "parallelism.activation_checkpointing",
    "batch.micro_batch",
    "batch.grad_accum",
    "batch.global_batch",
    "batch.ramp",
    "optimizer.lr",
    "optimizer.weight_decay",
    "optimizer.grad_clip",
    "optimizer.kind",
    "schedule.kind",
    "schedule.warmup",
    "schedule.decay",
    "schedule.min_lr_ratio",
    "precision.compute",
    "precision.master_weights",
    "precision.grads",
    "precision.loss_scaling",
    "phases",
    "phases[0].tokens",
    "phases[0].mixture",
    "phases[1].kind",
    "phases[2].seq_len",
    "phases[2].rope_theta",
    "phases[2].parallelism",
    "phases[2].batch",
    "phases[3].tokens",
    "checkpoint.every",
    "checkpoint.state",
    "checkpoint.keep",
    "monitor.spike",
    "monitor.eval_every",
    "audit.ignore",
]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(MUTABLE_PATHS), leaf_values), min_size=1, max_size=4))
def test_any_spec_the_schema_accepts_audits_without_exception(mutations):
    try:
        data = case_data(dict(mutations))
    except (KeyError, IndexError, TypeError):
        return  # the patch addresses a key the mutation removed: nothing to audit
    try:
        spec = validate_data(data).spec
    except SpecError as exc:
        assert exc.diagnostics and all(d.code in ("SPEC001", "SPEC002") for d in exc.diagnostics)
        return
    result = audit(spec)
    assert result.exit_code() in (0, 1)
    for f in result.findings:
        assert f.code and f.message and f.severity in ("error", "warning", "info")
