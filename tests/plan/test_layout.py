"""runlib.plan.layout: the degrees, the world, the mesh, who shards what, and the refusals, as data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from runlib.plan.layout import Layout, build_layout, data_parallel_wrapper, planned_degrees
from runlib.spec.models import ModelSpec, ParallelismSpec
from runlib.train.config import ParallelConfig

MODEL = ModelSpec(layers=2, d_model=64, heads=8, kv_heads=4, d_ff=192, seq_len=128)


def layout(nodes: int = 1, devices_per_node: int = 8, **parallelism: Any) -> Layout:
    return build_layout(ParallelismSpec(**parallelism), nodes=nodes, devices_per_node=devices_per_node)


@dataclass(frozen=True)
class Degrees:
    name: str
    nodes: int
    devices_per_node: int
    parallelism: dict[str, Any]
    dp_replicate: int
    dp_shard: int
    mesh: dict[str, int]  # name -> size, outermost first
    states: dict[str, int]  # state -> ranks one copy is split over
    wrapper: str


DEGREES = [
    Degrees("one process", 1, 1, {}, 1, 1, {}, dict.fromkeys(("weights", "master_weights"), 1), "none"),
    Degrees("ddp", 1, 8, {}, 8, 1, {"dp_replicate": 8}, {"gradients": 1, "optimizer_states": 1}, "ddp"),
    Degrees(
        "zero1 shards the optimizer and the master copy only",
        1,
        8,
        {"sharding": "zero1"},
        1,
        8,
        {"dp_shard": 8},
        {"weights": 1, "gradients": 1, "master_weights": 8, "optimizer_states": 8},
        "fully_shard",
    ),
    Degrees(
        "zero2 also the gradients",
        1,
        8,
        {"sharding": "zero2"},
        1,
        8,
        {"dp_shard": 8},
        {"weights": 1, "gradients": 8, "optimizer_states": 8},
        "fully_shard",
    ),
    Degrees(
        "fsdp x tp: tp innermost, states over the dp ranks",
        2,
        8,
        {"sharding": "fsdp", "tensor": 4},
        1,
        4,
        {"dp_shard": 4, "tp": 4},
        dict.fromkeys(("weights", "gradients", "optimizer_states"), 4),
        "fully_shard",
    ),
    Degrees(
        "hsdp: replicated across nodes, sharded within one",
        4,
        8,
        {"sharding": "hsdp", "tensor": 2},
        4,
        4,
        {"dp_replicate": 4, "dp_shard": 4, "tp": 2},
        {"weights": 4, "optimizer_states": 4},
        "fully_shard",
    ),
    Degrees(
        "hsdp, one process per node: replication only",
        2,
        1,
        {"sharding": "hsdp"},
        2,
        1,
        {"dp_replicate": 2},
        {"weights": 1, "optimizer_states": 1},
        "replicate",
    ),
    Degrees(
        "context parallelism shards the states with the data-parallel ranks (dp_shard_cp)",
        1,
        8,
        {"sharding": "fsdp", "context": 2, "pipeline": 2},
        1,
        2,
        {"pp": 2, "dp_shard": 2, "cp": 2},
        {"weights": 4, "optimizer_states": 4},
        "fully_shard",
    ),
    Degrees(
        "ddp under tensor parallelism is FSDP2's replicate",
        1,
        8,
        {"tensor": 2},
        4,
        1,
        {"dp_replicate": 4, "tp": 2},
        {"weights": 1},
        "replicate",
    ),
]


@pytest.mark.parametrize("case", DEGREES, ids=lambda c: c.name)
def test_degrees_mesh_and_sharded_states(case: Degrees) -> None:
    lay = layout(case.nodes, case.devices_per_node, **case.parallelism)
    assert (lay.dp_replicate, lay.dp_shard) == (case.dp_replicate, case.dp_shard)
    assert lay.world_size == case.nodes * case.devices_per_node == lay.used_devices
    assert dict(zip(lay.mesh_dim_names, lay.mesh_shape, strict=True)) == case.mesh
    assert list(lay.mesh_dim_names) == list(case.mesh)  # the order: pp, dp_replicate, dp_shard, cp, tp
    assert {state: lay.shards(state) for state in case.states} == case.states
    assert lay.wrapper == case.wrapper
    assert lay.world_errors(lay.world_size) == []


def test_a_remainder_idles_and_fewer_devices_still_plan_one_replica() -> None:
    lay = layout(1, 8, tensor=3)
    assert (lay.model_parallel, lay.data_parallel, lay.used_devices) == (3, 2, 6)
    assert lay.world_errors(8) == ["dp_replicate x dp_shard x tp x cp x pp = 6 is not the world size 8"]
    assert planned_degrees(ParallelismSpec(tensor=16), 8) == (1, 16)


def test_the_layout_on_fewer_processes_keeps_its_model_parallel_degrees() -> None:
    lay = layout(2, 8, sharding="hsdp", tensor=2)
    relaunched = lay.on_processes(4)
    assert (relaunched.nodes, relaunched.devices_per_node, relaunched.tp) == (1, 4, 2)
    assert (relaunched.dp_replicate, relaunched.dp_shard) == (1, 2)  # one node: hsdp is fsdp
    assert layout(1, 8).on_processes(2).degrees() == {"dp_replicate": 2, "dp_shard": 1, "tp": 1, "cp": 1, "pp": 1}
    assert lay.on_processes(16) is lay
    with pytest.raises(ValueError, match="cannot hold tensor x context x pipeline = 2"):
        lay.on_processes(3)


def test_hand_made_layouts_that_are_no_mesh() -> None:
    assert Layout(1, 2, dp_replicate=1, dp_shard=2).world_errors(2) == [
        "sharding none (DDP) replicates: dp_shard must be 1, not 2"
    ]
    with pytest.raises(ValueError, match="needs dp_shard > 1"):
        data_parallel_wrapper("fsdp", ("dp_replicate",), 1)
    with pytest.raises(ValueError, match="expert parallelism 3 must divide data parallel x cp = 4"):
        Layout(1, 4, dp_replicate=1, dp_shard=4, ep=3)
    assert Layout(1, 4, dp_replicate=1, dp_shard=4, ep=2, sharding="fsdp").degrees()["ep"] == 2


# the refusals as data: (case, hardware, parallelism, model overrides, seq_len) -> [(code, field)]
REFUSALS = [
    ("nothing refused", "h100-sxm", (1, 8), {"sharding": "fsdp", "tensor": 2}, {}, 128, []),
    ("context", "h100-sxm", (1, 8), {"context": 2}, {}, 128, []),
    ("context on cpu", "cpu", (1, 4), {"context": 2}, {}, 128, []),
    ("context not dividing seq_len: PAR004's", "h100-sxm", (1, 8), {"context": 4}, {}, 132, []),
    ("context x tensor not dividing seq_len", "h100-sxm", (1, 8), {"context": 2, "tensor": 4}, {}, 132, [("RUN001", "parallelism.context")]),
    ("context with alibi", "h100-sxm", (1, 8), {"context": 2}, {"position": "alibi"}, 128, [("RUN001", "parallelism.context")]),
    ("pipeline", "h100-sxm", (1, 8), {"pipeline": 2}, {}, 128, []),
    ("pipeline, tied", "h100-sxm", (1, 8), {"pipeline": 2, "pipeline_schedule": "gpipe"}, {"tie_embeddings": True}, 128, []),
    ("interleaved", "h100-sxm", (1, 8), {"pipeline": 2, "pipeline_schedule": "interleaved_1f1b", "pipeline_virtual_stages": 2}, {"layers": 4}, 128, []),
    ("interleaved, one chunk", "h100-sxm", (1, 8), {"pipeline": 2, "pipeline_schedule": "interleaved_1f1b"}, {}, 128, [("RUN002", "parallelism.pipeline_virtual_stages")]),
    ("virtual stages not splitting", "h100-sxm", (1, 8), {"pipeline": 2, "pipeline_schedule": "interleaved_1f1b", "pipeline_virtual_stages": 3}, {"layers": 4}, 128, [("RUN002", "parallelism.pipeline_virtual_stages")]),
    ("tensor not dividing heads", "h100-sxm", (1, 8), {"tensor": 8}, {"kv_heads": 2}, 128, [("RUN003", "parallelism.tensor")]),
    ("tensor not dividing seq_len", "h100-sxm", (1, 8), {"tensor": 4}, {}, 130, [("RUN003", "parallelism.tensor")]),
    ("tensor with qk_norm", "h100-sxm", (1, 8), {"tensor": 2}, {"qk_norm": True}, 128, [("RUN003", "parallelism.tensor")]),
    ("qk_norm without tensor", "h100-sxm", (1, 8), {}, {"qk_norm": True}, 128, []),
    ("hsdp, no shard group in a node", "h100-sxm", (2, 6), {"sharding": "hsdp", "tensor": 4}, {}, 128, [("RUN004", "parallelism.sharding")]),
    ("hsdp, one rank per node", "h100-sxm", (2, 1), {"sharding": "hsdp"}, {}, 128, [("RUN004", "parallelism.sharding")]),
    ("hsdp on one node", "h100-sxm", (1, 8), {"sharding": "hsdp", "tensor": 4}, {}, 128, []),
    ("hsdp over 2-node groups", "h100-sxm", (4, 8), {"sharding": "hsdp", "hsdp_shard_nodes": 2}, {}, 128, []),
    ("hsdp groups not dividing the nodes", "h100-sxm", (4, 8), {"sharding": "hsdp", "hsdp_shard_nodes": 3}, {}, 128, [("RUN004", "parallelism.hsdp_shard_nodes")]),
    ("hsdp, one rank per 2-node group", "h100-sxm", (4, 1), {"sharding": "hsdp", "hsdp_shard_nodes": 2}, {}, 128, []),
    ("offload on cpu", "cpu", (1, 2), {"sharding": "fsdp", "offload": True}, {}, 128, [("RUN005", "parallelism.offload")]),
    ("offload, one data-parallel rank", "h100-sxm", (1, 2), {"sharding": "fsdp", "tensor": 2, "offload": True}, {}, 128, [("RUN005", "parallelism.offload")]),
    ("offload under ddp", "h100-sxm", (1, 8), {"offload": True}, {}, 128, [("RUN005", "parallelism.offload")]),
    ("offload under zero2", "h100-sxm", (1, 8), {"sharding": "zero2", "offload": True}, {}, 128, []),
    (
        "several at once, in code order",
        "cpu",
        (1, 8),
        {"context": 2, "pipeline": 2, "tensor": 2, "offload": True},
        {"qk_norm": True, "position": "alibi"},
        128,
        [("RUN001", "parallelism.context"), ("RUN002", "parallelism.pipeline"), ("RUN003", "parallelism.tensor")]
        + [("RUN005", "parallelism.offload")],  # RUN002: context with pipeline
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("accelerator", "hardware", "parallelism", "model", "seq_len", "expected"),
    [r[1:] for r in REFUSALS],
    ids=[r[0] for r in REFUSALS],
)
def test_refusals(
    accelerator: str,
    hardware: tuple[int, int],
    parallelism: dict[str, Any],
    model: dict[str, Any],
    seq_len: int,
    expected: list[tuple[str, str]],
) -> None:
    lay = layout(*hardware, **parallelism)
    refusals = lay.refusals(accelerator, MODEL.model_copy(update=model), seq_len)
    assert [(r.code, r.field) for r in refusals] == expected
    assert all(r.reason and r.fix and r.describe().startswith(f"{r.code} {r.field}: ") for r in refusals)


@pytest.mark.parametrize(
    ("pipeline", "micro_batches", "refused"),
    # torch's ScheduleInterleaved1F1B: max(1, n // pipeline) rounds must divide n
    [
        (2, 1, False),
        (2, 3, False),
        (2, 4, False),
        (2, 5, True),
        (2, 6, False),
        (4, 6, False),
        (4, 9, True),
        (4, 8, False),
    ],
)
def test_interleaved_micro_batches_in_rounds(pipeline: int, micro_batches: int, refused: bool) -> None:
    lay = layout(1, 8, pipeline=pipeline, pipeline_schedule="interleaved_1f1b", pipeline_virtual_stages=2)
    refusals = lay.refusals("h100-sxm", MODEL.model_copy(update={"layers": 8}), 128, micro_batches=[micro_batches])
    assert [(r.code, r.field) for r in refusals] == ([("RUN002", "parallelism.pipeline_schedule")] if refused else [])
    # 1F1B and GPipe take any number (1F1B with fewer than its stages runs as GPipe)
    plain = layout(1, 8, pipeline=pipeline).refusals("h100-sxm", MODEL, 128, micro_batches=[micro_batches])
    assert plain == []
    gpipe = layout(1, 8, pipeline=pipeline, pipeline_schedule="gpipe")
    assert gpipe.refusals("h100-sxm", MODEL, 128, micro_batches=[micro_batches]) == []


def test_hsdp_shard_groups_span_nodes() -> None:
    """parallelism.hsdp_shard_nodes: OLMo 2 32B's 4 replicas over 128 nodes of 8 shard over 32 nodes each; the
    mesh's dp_shard ranks are consecutive, so a group is whole nodes."""
    lay = layout(128, 8, sharding="hsdp", hsdp_shard_nodes=32)
    assert (lay.dp_replicate, lay.dp_shard, lay.hsdp_shard_nodes) == (4, 256, 32)
    assert layout(128, 8, sharding="hsdp").dp_replicate == 128  # within a node by default
    assert ParallelConfig.of(lay, "none").layout == lay  # the trainer's config rebuilds it


def test_tensor_refusal_names_the_degrees_that_work() -> None:
    # heads 8, kv_heads 4, d_ff 192, seq_len 100: gcd 4
    (refusal,) = layout(1, 8, tensor=8).refusals("h100-sxm", MODEL, 100)
    assert "kv_heads 4, seq_len 100 are not divisible by 8" in refusal.reason
    assert refusal.fix.endswith("(2, 4)")
    assert "(replicating key/value heads is not enacted)" in refusal.reason
    # without a sequence length (runlib.model.parallelize: the forward checks it), only the model's sizes
    assert layout(1, 8, tensor=4).refusals("h100-sxm", MODEL, None) == []
    assert layout(1, 8, tensor=4).refusals("h100-sxm") == []  # no model: the layout's own rules only
