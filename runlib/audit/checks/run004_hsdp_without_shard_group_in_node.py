"""RUN004: hsdp with no shard group within a node.

Why it matters:
    hsdp (hybrid sharding: Zhao et al. 2023, arXiv 2304.11277, section 3.2) shards the model
    states within each node and replicates them across nodes, on a 2-D device mesh of
    (nodes) x (data-parallel ranks of one node). When tensor x pipeline x context does not divide
    devices_per_node, a node holds no whole number of model replicas' shards and that mesh does
    not exist; when a node holds one data-parallel rank, there is nothing to shard within it
    (hsdp would be DDP). The workflow gate refuses the spec before any job starts.

Flagged:
    hardware: {nodes: 2, devices_per_node: 6}
    parallelism: {tensor: 4, sharding: hsdp}

Preferred:
    hardware: {nodes: 2, devices_per_node: 6}
    parallelism: {tensor: 2, sharding: hsdp}       # or sharding: fsdp across all 12 devices

How to fix:
    Use a tensor degree dividing devices_per_node, or sharding: fsdp (one shard group over every
    data-parallel rank); with one data-parallel rank per node, sharding: none (DDP) or fsdp. A warning in `runlib audit`; the workflow gate refuses it.
"""

from collections.abc import Iterator

from runlib.audit.checks._refusals import refusal_findings
from runlib.audit.registry import Context, Finding, case

CODE = "RUN004"
NAME = "hsdp-without-shard-group-in-node"
SEVERITY = "warning"


def check(ctx: Context) -> Iterator[Finding]:
    yield from refusal_findings(ctx, CODE)


PASS = [
    {},
    {"parallelism.sharding": "hsdp"},
    {"hardware.nodes": 2, "parallelism.sharding": "hsdp", "parallelism.tensor": 2},
    {"hardware.nodes": 2, "hardware.devices_per_node": 6, "parallelism.sharding": "fsdp", "parallelism.tensor": 4},
]
FAIL = [
    case(
        {"hardware.nodes": 2, "hardware.devices_per_node": 6, "parallelism.sharding": "hsdp", "parallelism.tensor": 4},
        "warning",
    ),
    case({"hardware.nodes": 2, "hardware.devices_per_node": 1, "parallelism.sharding": "hsdp"}, "warning"),
    case({"hardware.nodes": 2, "parallelism.sharding": "hsdp", "parallelism.tensor": 8}, "warning"),
]
