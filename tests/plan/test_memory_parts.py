"""The named parts of the GPU memory model added for the published rows (runlib.plan.memory): the
sequence-parallel inputs kept gathered or sharded, the pipeline's buffers, the fullest middle stage,
DeepSpeed's separate gradient buffer and the embedding norm's inputs. Each test compares a spec with
the mechanism against the same spec without it, so that it fails when the part is dropped or mis-sized."""

from __future__ import annotations

import math

from runlib.audit.cases import apply_patch
from runlib.plan import derive
from runlib.plan.memory import activation_bytes_per_layer, pipeline_buffer_bytes
from runlib.spec import validate_data
from runlib.spec.models import ModelSpec
from tests.plan.test_memory_published import BASE

MODEL = {
    "model.layers": 8,
    "model.d_model": 1024,
    "model.heads": 16,
    "model.d_ff": 4096,
    "model.vocab_size": 32000,
    "model.seq_len": 2048,
}


def _memory(patch: dict):
    spec = validate_data(apply_patch(BASE, {**MODEL, **patch})).spec
    plan = derive(spec)
    return spec, plan.phases[0].memory


def test_gathered_inputs_add_the_attention_and_mlp_inputs_unsplit():
    model = ModelSpec(layers=8, d_model=1024, heads=16, d_ff=4096, seq_len=2048)
    s, b, h, t = 2048, 2, 1024, 8
    kw = dict(attention_kernel="fused", sequence_parallel=True)
    sharded = activation_bytes_per_layer(model, s, b, t, 1, 2, **kw)
    gathered = activation_bytes_per_layer(model, s, b, t, 1, 2, gathered_inputs=True, **kw)
    # two s x b x h inputs (attention, MLP) kept whole instead of split over t
    assert math.isclose(gathered - sharded, 2 * s * b * h * 2 * (1 - 1 / t))
    # without sequence parallelism every input is already whole: no difference
    kw_no_sp = dict(attention_kernel="fused", sequence_parallel=False)
    assert activation_bytes_per_layer(model, s, b, t, 1, 2, gathered_inputs=True, **kw_no_sp) == (
        activation_bytes_per_layer(model, s, b, t, 1, 2, **kw_no_sp)
    )


def test_sequence_parallel_saves_is_read_from_the_spec_and_a_phase_override():
    tp = {"parallelism.tensor": 8, "batch.micro_batch": 2}
    _, gathered = _memory(tp)  # the default: runlib's trainer and torchtitan keep the gathered inputs
    _, sharded = _memory({**tp, "parallelism.sequence_parallel_saves": "sharded"})
    assert gathered.activations > sharded.activations
    assert gathered.assumptions_dict()["sequence_parallel_saves"] == "gathered"
    phases = [{**BASE["phases"][0], "parallelism": {"sequence_parallel_saves": "sharded"}}]
    _, overridden = _memory({**tp, "phases": phases})
    assert overridden.activations == sharded.activations


def test_pipeline_buffers_on_every_stage_but_the_last():
    assert pipeline_buffer_bytes(100.0, in_flight=4, pipeline=4, last=False) == 500.0  # 4 outputs + 1 gradient
    assert pipeline_buffer_bytes(100.0, in_flight=1, pipeline=4, last=True) == 0.0
    assert pipeline_buffer_bytes(100.0, in_flight=1, pipeline=1, last=False) == 0.0
    _, mem = _memory({"parallelism.pipeline": 4, "batch.grad_accum": 8, "batch.micro_batch": 2})
    a = mem.assumptions_dict()
    assert a["stage"] == 0 and a["in_flight_micro_batches"] == 4
    assert a["pipeline_buffer_bytes"] == 5 * 2048 * 2 * 1024 * 2  # (4 in flight + 1) x s b h x 2 bytes


def test_the_fullest_middle_stage_is_evaluated():
    # 1 layer on the first and last stage, 3 on each middle one: stage 1 needs most
    _, mem = _memory(
        {
            "parallelism.pipeline": 4,
            "model.layers": 8,
            "parallelism.pipeline_first_stage_layers": 1,
            "parallelism.pipeline_last_stage_layers": 1,
            "batch.grad_accum": 8,
        }
    )
    assert mem.assumptions_dict()["stage"] == 1
    assert mem.assumptions_dict()["stage_layers"] == 3


def test_separate_gradient_buffer_keeps_a_compute_dtype_copy_unsharded():
    zero1 = {"parallelism.sharding": "zero1", "hardware.nodes": 2}
    spec, in_place = _memory(zero1)
    _, separate = _memory({**zero1, "parallelism.grad_accumulation": "separate_buffer"})
    params = derive(spec).params.total
    assert math.isclose(separate.buffers - in_place.buffers, params * 2)  # bf16 gradients, all parameters
    assert separate.gradients == in_place.gradients  # the fp32 accumulator is the gradients part
    assert separate.assumptions_dict()["param_grad_copy_bytes"] == params * 2


def test_embedding_norm_inputs_kept_per_micro_batch_in_flight():
    pp = {
        "parallelism.pipeline": 4,
        "batch.grad_accum": 8,
        "parallelism.activation_checkpointing": "full",
        "tokenizer.vocab_size": 1000,  # small logits: the first stage needs most
        "model.vocab_size": 1024,
    }
    _, plain = _memory(pp)
    _, normed = _memory({**pp, "model.embedding_norm": True})
    assert plain.assumptions_dict()["stage"] == normed.assumptions_dict()["stage"] == 0
    assert math.isclose(normed.activations - plain.activations, 4 * 2048 * 1 * 1024 * 2)  # 4 in flight


def test_deepspeed_allreduce_bucket_is_reported_by_the_device_not_in_the_peak():
    zero1 = {"parallelism.sharding": "zero1", "hardware.nodes": 2}
    spec, in_place = _memory(zero1)
    _, separate = _memory({**zero1, "parallelism.grad_accumulation": "separate_buffer"})
    params = derive(spec).params.total  # ~0.13B: under 5e8 elements, so the bucket is every gradient
    assert in_place.allocator_cache == 0.0 and in_place.device_reported == in_place.total
    assert math.isclose(separate.allocator_cache, params * (4 + 2))  # the fp32 flat copy and its 16-bit cast
    assert math.isclose(separate.device_reported - separate.total, separate.allocator_cache)
    assert separate.assumptions_dict()["allreduce_bucket_bytes"] == separate.allocator_cache
    # one data-parallel rank all-reduces nothing
    _, alone = _memory({"hardware.devices_per_node": 1, "parallelism.grad_accumulation": "separate_buffer"})
    assert alone.allocator_cache == 0.0


def test_deepspeed_allreduce_bucket_is_capped_at_5e8_elements():
    big = {"model.layers": 48, "model.d_model": 4096, "model.d_ff": 16384, "model.heads": 32}
    _, mem = _memory({**big, "parallelism.sharding": "zero1", "parallelism.grad_accumulation": "separate_buffer"})
    assert mem.allocator_cache == 5e8 * 6


def test_a_ramp_stage_with_a_larger_micro_batch_sizes_the_phase_it_covers():
    ramp = [{"after": "0 tokens", "global_batch": 16}, {"after": "50%", "global_batch": 32}]
    _, steady = _memory({"batch.ramp": ramp, "batch.micro_batch": 2})
    _, larger = _memory({"batch.ramp": [ramp[0], {**ramp[1], "micro_batch": 4}], "batch.micro_batch": 2})
    _, smaller = _memory({"batch.ramp": [{**ramp[0], "micro_batch": 1}, ramp[1]], "batch.micro_batch": 2})
    assert larger.activations > steady.activations  # the stage's 4 sequences per micro-step, not 2
    assert smaller.activations == steady.activations  # the phase also runs at 2: the larger one counts
