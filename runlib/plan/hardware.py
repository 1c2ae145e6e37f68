"""Accelerator catalog: dense peak TFLOP/s per dtype (never the 2:4-sparsity figure) and memory.

Sources: NVIDIA V100, T4, A100, H100, H200 and B200 datasheets; AMD Instinct MI300X datasheet.
Memory is what the device reports to the framework (nvidia-smi / rocm-smi), in GiB, not the
marketing GB: an "80GB" H100 shows 81559 MiB = 79.6 GiB.
"""

from __future__ import annotations

from dataclasses import dataclass

Dtype = str  # "fp32" | "fp16" | "bf16" | "fp8"


@dataclass(frozen=True, slots=True)
class Accelerator:
    key: str
    description: str
    memory_gib: float
    peak_tflops: dict[Dtype, float]  # dense; a dtype missing here is unsupported
    runtime_overhead_gib: float = 1.0  # CUDA/ROCm context, allocator fragmentation, comm buffers

    def supports(self, dtype: Dtype) -> bool:
        return dtype in self.peak_tflops


CATALOG: dict[str, Accelerator] = {
    a.key: a
    for a in (
        # one "device" is one CPU core running one process: AVX-512, 2 FMA units x 16 fp32 lanes x 2 FLOPs
        # x ~2.5 GHz ~ 0.15 TFLOP/s; bf16 autocast runs (no faster). No fp16: Accelerate on CPU has no
        # fp16 autocast or loss scaler and would silently train in fp32. Memory: the host's RAM (override it).
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
        Accelerator(
            "h200", "NVIDIA H200 SXM 141GB", 140.4, {"fp32": 67.0, "fp16": 989.0, "bf16": 989.0, "fp8": 1979.0}
        ),
        Accelerator("b200", "NVIDIA B200 180GB", 179.0, {"fp32": 75.0, "fp16": 2250.0, "bf16": 2250.0, "fp8": 4500.0}),
        Accelerator(
            "mi300x", "AMD Instinct MI300X 192GB", 192.0, {"fp32": 163.4, "fp16": 1307.4, "bf16": 1307.4, "fp8": 2614.9}
        ),
    )
}


def resolve(key: str, memory_gib: float | None = None, peak_tflops: dict[str, float] | None = None) -> Accelerator:
    """The catalog entry with the spec's overrides; an unknown key needs both overrides."""
    base = CATALOG.get(key)
    if base is None:
        return Accelerator(key, f"{key} (not in the catalog)", memory_gib or 0.0, dict(peak_tflops or {}))
    return Accelerator(
        base.key,
        base.description,
        memory_gib if memory_gib is not None else base.memory_gib,
        {**base.peak_tflops, **(peak_tflops or {})},
        base.runtime_overhead_gib,
    )
