"""The CPU memory model (runlib.plan.memory.cpu_phase_memory) against hand counts and measured peaks."""

from dataclasses import replace

import pytest

from runlib.plan import derive
from runlib.plan.memory import (
    CPU_RUNTIME_BYTES,
    GIB,
    MIB,
    cpu_activation_bytes_per_layer,
    phase_memory,
)
from runlib.spec import load_spec
from tests.conftest import ROOT

DEMO = ROOT / "specs" / "demo.yaml"
TINY = ROOT / "tests" / "fixtures" / "tiny.yaml"
TINY_PIPELINE = ROOT / "specs" / "variants" / "tiny-pipeline.yaml"

# peak RSS per process (MiB, the larger rank) of 2-process DDP phases, 12 steps with a checkpoint and an
# evaluation, synthetic shards (python -m runlib.bench.memory_check's set-up; torch 2.13.0+cpu, x86-64)
MEASURED_MIB = {
    (DEMO, "foundation"): 587.0,
    (DEMO, "long"): 630.0,  # context parallel 2 (each process half of every 512-token row), 2026-12-04
    (TINY, "foundation"): 364.4,
    (TINY, "long"): 374.4,
    (TINY_PIPELINE, "long"): 378.0,  # pipeline 2: each process one of the two blocks, 1F1B, 2026-12-04
}


def memory(path, phase: str, accelerator: str | None = "cpu", **settings_update):
    spec = load_spec(path).spec
    plan = derive(spec)
    p = next(p for p in plan.phases if p.name == phase)
    settings = replace(p.settings, **settings_update) if settings_update else p.settings
    return phase_memory(
        spec.model,
        spec.precision,
        plan.params,
        plan.vocab_rows,
        settings,
        plan.accelerator.runtime_overhead_gib,
        spec.hardware.nodes,
        accelerator=accelerator,
    )


@pytest.mark.parametrize(("path", "phase"), list(MEASURED_MIB))
def test_cpu_estimate_is_within_20_percent_of_the_measured_peak(path, phase):
    estimate = memory(path, phase).total / MIB
    assert 0.8 <= estimate / MEASURED_MIB[(path, phase)] <= 1.2, estimate


def test_the_old_model_missed_the_cpu_peak_so_the_check_can_fail():
    """The GPU formulas with the catalog's 0.25 GiB CPU overhead: 0.64x the demo's measured peak."""
    old = memory(DEMO, "foundation", accelerator=None).total / MIB
    assert old / MEASURED_MIB[(DEMO, "foundation")] < 0.8


def test_gpu_breakdown_is_unchanged_by_the_accelerator_argument():
    spec = load_spec(ROOT / "specs" / "demo.yaml").spec
    plan = derive(spec)
    s = plan.phases[0].settings
    args = (spec.model, spec.precision, plan.params, plan.vocab_rows, s, 1.0, 1)
    assert phase_memory(*args) == phase_memory(*args, accelerator="h100-sxm")
    assert phase_memory(*args) != phase_memory(*args, accelerator="cpu")


def test_cpu_activations_per_layer_by_hand():
    """Demo shape, s=256, b=8, fp32: sb(4h + 3*a*hd + 2*kv*hd + 4f) + b*s^2 mask values, 4 bytes each."""
    spec = load_spec(DEMO).spec
    m = spec.model  # h 128, f 384, 4 heads of 32, 2 kv heads
    s, b = 256, 8
    values = s * b * (4 * 128 + 3 * 4 * 32 + 2 * 2 * 32 + 4 * 384) + b * s * s
    assert cpu_activation_bytes_per_layer(m, s, b, 1, 1, 4) == values * 4
    # the mask grows with s^2: the same tokens in half the rows at twice the length hold more
    assert cpu_activation_bytes_per_layer(m, 2 * s, b // 2, 1, 1, 4) - values * 4 == b * s * s * 4
    # selective recompute rebuilds the kernel's output and the additive mask in the backward
    selective = values - b * s * s - s * b * 4 * 32
    assert cpu_activation_bytes_per_layer(m, s, b, 1, 1, 4, selective=True) == selective * 4


def test_cpu_parts():
    demo = memory(DEMO, "foundation")
    assert demo.runtime_overhead == CPU_RUNTIME_BYTES
    assert demo.buffers == demo.gradients  # DDP's gradient buckets beside the gradients
    # the step's fp32 logits and gradient, and the evaluation's 8 windows of logits and log-softmax
    assert demo.logits == (2 * 4 * 256 * 8 + 2 * 4 * 8 * 256) * 4096
    one_process = memory(DEMO, "foundation", data_parallel=1, devices=1, grad_accum=2)
    assert one_process.buffers == 0  # no DDP wrapper, no buckets
    full = memory(
        DEMO,
        "foundation",
        parallelism=load_spec(DEMO).spec.parallelism.model_copy(update={"activation_checkpointing": "full"}),
    )
    assert full.activations < demo.activations / 2
    assert demo.total < 1 * GIB
