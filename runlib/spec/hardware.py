"""Accelerator catalog: dense peak TFLOP/s per dtype (never the 2:4-sparsity figure) and memory.

Sources: NVIDIA V100, T4, A100, H100, H200 and B200 datasheets; AMD Instinct MI300X datasheet.
Memory is what the device reports to the framework (nvidia-smi / rocm-smi), in GiB, not the
marketing GB: an "80GB" H100 shows 81559 MiB = 79.6 GiB.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

Dtype = str  # "fp32" | "fp16" | "bf16" | "fp8"
PeakDtype = Literal["fp32", "fp16", "bf16", "fp8"]  # the keys of hardware.peak_tflops


@dataclass(frozen=True, slots=True)
class Accelerator:
    key: str
    description: str
    memory_gib: float
    peak_tflops: dict[Dtype, float]  # dense; a dtype missing here is unsupported
    runtime_overhead_gib: float = 1.0  # CUDA/ROCm context, allocator fragmentation, comm buffers
    memory_basis: str = ""  # where memory_gib comes from, when not the catalog's figure ("" for the catalog)

    def supports(self, dtype: Dtype) -> bool:
        return dtype in self.peak_tflops


CATALOG: dict[str, Accelerator] = {
    a.key: a
    for a in (
        # one "device" is one CPU core running one process: AVX-512, 2 FMA units x 16 fp32 lanes x 2 FLOPs
        # x ~2.5 GHz ~ 0.15 TFLOP/s; bf16 autocast runs (no faster). No fp16: Accelerate on CPU has no
        # fp16 autocast or loss scaler and would silently train in fp32. Memory: the 8 GiB is a placeholder:
        # the plan uses this machine's memory shared by the node's processes (cpu_device_memory), or
        # hardware.memory_gib.
        Accelerator("cpu", "x86 CPU core (AVX-512)", 8.0, {"fp32": 0.15, "bf16": 0.15}, 0.25),
        Accelerator("v100", "NVIDIA V100 SXM2 32GB", 32.0, {"fp32": 15.7, "fp16": 125.0}),
        Accelerator("t4", "NVIDIA T4 16GB", 15.0, {"fp32": 8.1, "fp16": 65.0}),
        Accelerator("a100-40gb", "NVIDIA A100 SXM 40GB", 40.0, {"fp32": 19.5, "fp16": 312.0, "bf16": 312.0}),
        Accelerator("a100-80gb", "NVIDIA A100 SXM 80GB", 80.0, {"fp32": 19.5, "fp16": 312.0, "bf16": 312.0}),
        Accelerator(
            "h100-sxm", "NVIDIA H100 SXM5 80GB", 79.6, {"fp32": 67.0, "fp16": 989.0, "bf16": 989.0, "fp8": 1979.0}
        ),
        Accelerator(
            "h100-pcie", "NVIDIA H100 PCIe 80GB", 79.6, {"fp32": 51.0, "fp16": 756.0, "bf16": 756.0, "fp8": 1513.0}
        ),
        # H800: the H100 SXM's compute and memory with NVLink cut to 400 GB/s (DeepSeek-V3, arXiv 2412.19437 §3.1)
        Accelerator("h800", "NVIDIA H800 SXM 80GB", 79.6, {"fp32": 67.0, "fp16": 989.0, "bf16": 989.0, "fp8": 1979.0}),
        Accelerator(
            "h200", "NVIDIA H200 SXM 141GB", 140.4, {"fp32": 67.0, "fp16": 989.0, "bf16": 989.0, "fp8": 1979.0}
        ),
        Accelerator("b200", "NVIDIA B200 180GB", 179.0, {"fp32": 75.0, "fp16": 2250.0, "bf16": 2250.0, "fp8": 4500.0}),
        Accelerator(
            "mi300x", "AMD Instinct MI300X 192GB", 192.0, {"fp32": 163.4, "fp16": 1307.4, "bf16": 1307.4, "fp8": 2614.9}
        ),
        # TPUs, for planning (PaLM trained on v4): bf16 matrix units only, so no fp32 or fp16 entry. v4: 32 GiB HBM,
        # 275 TFLOP/s bf16 (Jouppi et al. 2023, "TPU v4", ISCA, Table 1); v5p: 95 GB HBM, 459 TFLOP/s bf16
        # (Google Cloud's TPU v5p system architecture page)
        Accelerator("tpu-v4", "Google TPU v4 chip 32GiB", 32.0, {"bf16": 275.0}),
        Accelerator("tpu-v5p", "Google TPU v5p chip 95GB", 88.5, {"bf16": 459.0}),
    )
}


# Bandwidth per device and direction, GB/s: (to devices of its node, to other nodes), for the plan's
# communication times (expert parallelism's all-to-all). Links: NVLink 2/3/4/5 at 300/600/900/1800 GB/s
# both directions together (NVIDIA V100, A100, H100, B200 datasheets), halved; H800: the 160 GB/s its NVLink
# offers and 50 GB/s of InfiniBand per GPU (DeepSeek-V3, arXiv 2412.19437 section 3.2.2); PCIe cards: their
# x16 slot (gen3 16, gen5 64 GB/s); MI300X: Infinity Fabric 896 GB/s aggregate, halved (AMD datasheet); TPU
# v4 and v5p: their inter-chip links, which also span the pod (Jouppi et al. 2023 Table 1; v5p system
# page: 4,800 Gbps per chip). Networks: one 400 Gb/s NIC per GPU (DGX H100/B200, MI300X platforms),
# 200 Gb/s (DGX A100), 100 Gb/s (DGX-2: V100). CPU: stated, not measured: shared memory, 10 GbE.
INTERCONNECT_GB_PER_S: dict[str, tuple[float, float]] = {
    "cpu": (10.0, 1.25),
    "v100": (150.0, 12.5),
    "t4": (16.0, 12.5),
    "a100-40gb": (300.0, 25.0),
    "a100-80gb": (300.0, 25.0),
    "h100-sxm": (450.0, 50.0),
    "h100-pcie": (64.0, 50.0),
    "h800": (160.0, 50.0),
    "h200": (450.0, 50.0),
    "b200": (900.0, 50.0),
    "mi300x": (448.0, 50.0),
    "tpu-v4": (150.0, 150.0),
    "tpu-v5p": (300.0, 300.0),
}
UNKNOWN_INTERCONNECT_GB_PER_S = (64.0, 25.0)  # an accelerator outside the catalog: a PCIe gen5 slot, 200 Gb/s


def interconnect_gb_per_s(key: str) -> tuple[float, float]:
    """(within a node, across nodes) bandwidth of one device, per direction (INTERCONNECT_GB_PER_S)."""
    return INTERCONNECT_GB_PER_S.get(key, UNKNOWN_INTERCONNECT_GB_PER_S)


def resolve(
    key: str, memory_gib: float | None = None, peak_tflops: Mapping[PeakDtype, float] | None = None
) -> Accelerator:
    """The catalog entry with the spec's overrides; an unknown key needs both overrides."""
    base = CATALOG.get(key)
    overrides: dict[Dtype, float] = dict(peak_tflops.items()) if peak_tflops else {}
    if base is None:
        return Accelerator(key, f"{key} (not in the catalog)", memory_gib or 0.0, overrides)
    return Accelerator(
        base.key,
        base.description,
        memory_gib if memory_gib is not None else base.memory_gib,
        {**base.peak_tflops, **overrides},
        base.runtime_overhead_gib,
        "hardware.memory_gib" if memory_gib is not None else "",
    )


def device_memory_text(accelerator: Accelerator, each: str = "") -> str:
    """The device memory in words, one form for every view (audit text, HTML, plot): '79.6 GiB',
    "11.8 GiB (this machine's 23.5 GiB / 2 processes)", '64 GiB (hardware.memory_gib)'; `each`: a word after
    the size ('11.8 GiB each (...)')."""
    text = f"{accelerator.memory_gib:.3g} GiB" + (f" {each}" if each else "")
    return f"{text} ({accelerator.memory_basis})" if accelerator.memory_basis else text


CGROUP_LIMITS = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))


@functools.cache
def host_memory_bytes() -> int | None:
    """This machine's memory as a process can use it: the physical memory (sysconf), or the cgroup's limit
    (v2 memory.max, v1 memory.limit_in_bytes) where a container sets a lower one; None where unknown."""
    try:
        physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    limits = [physical]
    for path in CGROUP_LIMITS:
        try:
            text = path.read_text(encoding="ascii", errors="replace").strip()[:32]
        except OSError:
            continue
        if text.isdigit() and int(text) > 0:
            limits.append(int(text))
    return min(limits) if physical > 0 else None


def cpu_device_memory(accelerator: Accelerator, processes_per_node: int, host_bytes: int | None) -> Accelerator:
    """The cpu entry with the memory of one device (one core running one training process): this machine's
    memory (host_bytes) shared by the node's processes, as each process's peak RSS is what the plan's CPU
    memory model estimates (runlib.plan.memory.cpu_phase_memory). Unchanged without host_bytes."""
    if host_bytes is None or host_bytes <= 0:
        return accelerator
    host_gib = host_bytes / 2**30
    per_device = host_gib / max(1, processes_per_node)
    basis = f"this machine's {host_gib:.3g} GiB" + (
        f" / {processes_per_node} processes" if processes_per_node > 1 else ""
    )
    return replace(accelerator, memory_gib=per_device, memory_basis=basis)


def catalog_lines() -> list[str]:
    """`runlib explain hardware`: each catalog key (hardware.accelerator) with its memory and dense peaks."""
    lines = [f"{'key':<10} {'memory':>10}  {'description':<26}  dense peak TFLOP/s"]
    for a in CATALOG.values():
        peaks = ", ".join(f"{dtype} {tflops:g}" for dtype, tflops in a.peak_tflops.items())
        lines.append(f"{a.key:<10} {a.memory_gib:>6g} GiB  {a.description:<26}  {peaks}")
    lines.append(
        "another accelerator: hardware.accelerator any name with hardware.memory_gib and hardware.peak_tflops; "
        "a catalog entry's figures can be overridden the same way"
    )
    return lines
