"""Where the run runs and what it may spend: hardware and budget."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from runlib.spec.models.base import (
    MAX_DEVICES_PER_NODE,
    MAX_NODES,
    PLANNING_ONLY,
    PhaseOverride,
    SpecModel,
    override_of,
)
from runlib.spec.units import Count


class HardwareSpec(SpecModel):
    accelerator: str
    """Catalog key (cpu, v100, a100-40gb, a100-80gb, h100-sxm, h100-pcie, h200, b200, mi300x); `runlib explain hardware` lists them."""

    nodes: int = Field(1, ge=1, le=MAX_NODES)
    """Number of machines."""

    devices_per_node: int = Field(1, ge=1, le=MAX_DEVICES_PER_NODE)
    """Accelerators per machine."""

    mfu: float = Field(0.4, ge=0.001, le=1, json_schema_extra=PLANNING_ONLY)
    """Model FLOPs utilization assumed for time estimates (planning only: read by the audit, not by any stage)."""

    node_mtbf_hours: float | None = Field(None, ge=0.001, le=1e7, json_schema_extra=PLANNING_ONLY)
    """Mean time between failures of one node, in hours, for checkpoint-interval advice; omitted on a GPU: Llama 3's published failure rate, one unexpected interruption per ~50,700 GPU-hours (419 in 54 days on 16,384 GPUs, Dubey et al. 2024 section 3.3.4) (planning only: read by the audit, not by any stage)."""

    memory_gib: float | None = Field(None, ge=0.001, le=1e6, json_schema_extra=PLANNING_ONLY)
    """Memory per device in GiB, overriding the catalog for hardware not in it (planning only: read by the audit, not by any stage). Unset on a `cpu` spec, a device's memory is this machine's memory (or its container's limit) divided by `hardware.devices_per_node`, so the memory check of a CPU run depends on the machine that audits it; set it to plan for another machine."""

    peak_tflops: dict[Literal["fp32", "fp16", "bf16", "fp8"], Annotated[float, Field(ge=0.001, le=1e7)]] | None = None
    """Dense peak TFLOP/s per dtype; overrides the catalog (the plan's times, and the MFU a training phase reports)."""

    checkpoint_write_gb_per_s: float = Field(1.0, ge=0.001, le=1e6, json_schema_extra=PLANNING_ONLY)
    """Checkpoint write bandwidth per node in GB/s, as a blocking checkpoint sees it; the write time is the checkpoint's size over nodes x this (or storage_write_gb_per_s, if smaller). Default 1.0: Llama 3's checkpoint storage sustains 2 TB/s for 16,384 GPUs, 2,048 nodes of 8 (Dubey et al. 2024 section 3.3.1); an asynchronous save blocks training only for the copy to host memory: give the rate training sees (planning only: read by the audit, not by any stage)."""

    storage_write_gb_per_s: float | None = Field(None, ge=0.001, le=1e6, json_schema_extra=PLANNING_ONLY)
    """Write bandwidth of the storage checkpoints go to, all nodes together, in GB/s, when it is less than nodes x checkpoint_write_gb_per_s (a shared filesystem that does not grow with the job); omitted: no cap beyond the nodes' own (planning only: read by the audit, not by any stage)."""


@override_of(
    HardwareSpec,
    exclude={
        "accelerator": "one accelerator per run: a checkpoint moves between machines of one kind, and the catalog "
        "entry prices every phase",
        "mfu": "the planning assumption of the run",
        "node_mtbf_hours": "a property of the cluster's nodes, not of a phase",
        "memory_gib": "a property of the accelerator",
        "peak_tflops": "a property of the accelerator",
        "checkpoint_write_gb_per_s": "a property of the cluster's nodes",
        "storage_write_gb_per_s": "a property of the cluster's storage",
    },
)
class HardwareOverride(PhaseOverride):
    """The machines one phase trains on: nodes and devices_per_node, each omitted or null: the run's. Nemotron-4
    ramped its data-parallel GPUs 1,536 -> 3,072 -> 6,144 (arXiv 2402.16819, Table 2); SmolLM3 trained its
    long-context stages on fewer GPUs than its pre-training. The phase's job asks Slurm for these nodes, its
    layout and memory are planned on them, and its hours are its FLOPs over them; the data order does not
    depend on them (a pure function of seed and step on any world size)."""


class BudgetSpec(SpecModel):
    gpu_hours: Count | None = Field(None, ge=0, json_schema_extra=PLANNING_ONLY)
    """Device-hours available, all devices together (planning only: read by the audit, not by any stage)."""

    days: float | None = Field(None, ge=0, le=1e6, json_schema_extra=PLANNING_ONLY)
    """Wall-clock days available (planning only: read by the audit, not by any stage)."""

    flops: float | None = Field(None, ge=0, le=1e40, json_schema_extra=PLANNING_ONLY)
    """Training FLOPs available (planning only: read by the audit, not by any stage)."""
