"""MEM002: a phase's estimated peak memory is above 90% of the device memory.

Why it matters:
    The estimate leaves out allocator fragmentation peaks, communication buckets of some
    frameworks and the longest document-masked batches; at more than ~90% of the device, a run
    that fits on paper often fails with an out-of-memory error after a while, or the allocator
    thrashes (cudaMalloc retries) and throughput drops. The estimate is the same as MEM001's.

Flagged:
    hardware: {accelerator: a100-80gb}
    batch: {micro_batch: 96}     # ~76 GiB of 80 GiB

Preferred:
    batch: {micro_batch: 48, grad_accum: 4}

How to fix:
    Apply the knob the finding names (the cheapest that brings the phase under 90%: ZeRO
    sharding, a smaller micro_batch with a larger grad_accum, FSDP, full activation
    checkpointing, context parallelism for long sequences). Above 100% MEM001 reports instead.
"""

from collections.abc import Iterator

from runlib.audit.checks.mem001_out_of_device_memory import memory_findings
from runlib.audit.registry import Context, Finding, case

CODE = "MEM002"
NAME = "device-memory-nearly-full"
SEVERITY = "warning"


def check(ctx: Context) -> Iterator[Finding]:
    yield from memory_findings(ctx, 0.90, 1.0, "warning")


PASS = [
    {},
    {"hardware.memory_gib": 14.4},  # every phase needs ~12.9 GiB: 89.6%
    {"hardware.memory_gib": 12.0},  # over 100%: MEM001's
]
FAIL = [
    case({"hardware.memory_gib": 13.8}, "warning"),  # 93%
    case({"batch.micro_batch": 58}, "warning"),  # ~77 GiB of 80: 96%
]
