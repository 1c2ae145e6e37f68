"""PAR006: tensor parallelism spans more than one node.

Why it matters:
    Tensor parallelism all-reduces activations several times in every layer, forward and backward;
    that traffic needs the intra-node links (NVLink, Infinity Fabric). Across nodes it runs over
    the much slower network and dominates the step time. Narayanan et al. 2021 (arXiv 2104.04473,
    takeaway #1) use tensor parallelism up to the devices of one server and pipeline (and data)
    parallelism across servers. Not checked on a TPU: the chips of a pod share one torus interconnect
    across their hosts (Jouppi et al. 2023, "TPU v4"), and PaLM ran 12-way model parallelism over 4-chip
    hosts (arXiv 2204.02311 §4).

Flagged:
    hardware: {nodes: 4, devices_per_node: 8}
    parallelism: {tensor: 16}

Preferred:
    hardware: {nodes: 4, devices_per_node: 8}
    parallelism: {tensor: 8, pipeline: 2}

How to fix:
    Keep tensor <= devices_per_node (the finding gives it) and move the rest of the model split to
    pipeline (or use sharding: fsdp), or use nodes with more devices.
"""

from collections.abc import Iterator

from runlib.audit.checks._shared import overrides_parallelism, split_by_override, who
from runlib.audit.registry import Context, Finding, case

CODE = "PAR006"
NAME = "tensor-parallel-across-nodes"
SEVERITY = "warning"


def _problem(tensor: int, per_node: int) -> tuple[str, str] | None:
    if tensor <= per_node:
        return None
    message = (
        f"tensor {tensor} > {per_node} devices per node: each tensor-parallel group spans "
        f"{-(-tensor // per_node)} nodes and its per-layer all-reduces cross the network"
    )
    pipeline = -(-tensor // per_node)
    fix = f"use tensor <= {per_node} and split the rest over pipeline (e.g. tensor {per_node}, pipeline {pipeline}) or fsdp sharding"
    return message, fix


def check(ctx: Context) -> Iterator[Finding]:
    if ctx.spec.hardware.accelerator.lower().startswith("tpu"):
        return  # a TPU pod's chips share one interconnect across hosts: no bandwidth cliff at a host
    per_node = ctx.spec.hardware.devices_per_node
    phases = ctx.plan.phases
    tensor_or_machines = overrides_parallelism("tensor")
    own, global_names = split_by_override(
        ctx,
        lambda phase: tensor_or_machines(phase) or (phase.hardware is not None and bool(phase.hardware.overrides())),
    )
    for p in own:
        problem = _problem(p.settings.parallelism.tensor, p.settings.devices_per_node)
        if problem:
            field = "parallelism.tensor" if tensor_or_machines(p.settings.phase) else "hardware.devices_per_node"
            yield ctx.finding(
                f"phases[{p.settings.index}].{field}",
                f"phase {p.name!r}: {problem[0]}",
                problem[1],
                value=p.settings.devices_per_node,
            )
    if global_names or not phases:
        problem = _problem(ctx.spec.parallelism.tensor, per_node)
        if problem:
            yield ctx.finding(
                "parallelism.tensor", f"{who(global_names, len(phases))}: {problem[0]}", problem[1], value=per_node
            )


PASS = [
    {},
    {"hardware.nodes": 2, "hardware.devices_per_node": 4, "parallelism.tensor": 4},
    # a TPU pod: 8 hosts of 4 chips on one interconnect, tensor 8 spans two hosts
    {
        "hardware.accelerator": "tpu-v4",
        "hardware.nodes": 8,
        "hardware.devices_per_node": 4,
        "parallelism.tensor": 8,
        "batch.micro_batch": 16,
    },
    {
        "hardware.nodes": 2,
        "hardware.devices_per_node": 4,
        "parallelism.tensor": 8,
        **{f"phases[{i}].parallelism": {"tensor": 4} for i in range(4)},
    },
]
FAIL = [
    case({"hardware.nodes": 4, "hardware.devices_per_node": 2, "parallelism.tensor": 4}, "warning"),
    case({"hardware.nodes": 2, "hardware.devices_per_node": 4, "phases[2].parallelism": {"tensor": 8}}, "warning"),
    # a phase on 4-GPU nodes of its own with the run's tensor 8
    case(
        {
            "hardware.devices_per_node": 8,
            "parallelism.tensor": 8,
            "phases[2].hardware": {"nodes": 4, "devices_per_node": 4},
        },
        "warning",
    ),
]
