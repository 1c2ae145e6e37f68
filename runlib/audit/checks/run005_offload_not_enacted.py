"""RUN005: offload where the runlib trainer cannot enact it (on cpu, without sharding or data parallelism).

Why it matters:
    Offload keeps optimizer states and master weights in host memory and runs the optimizer step
    there (ZeRO-Offload, Ren et al. 2021, arXiv 2101.06840). runlib enacts it through FSDP2's CPU
    offload policy (torch.distributed.fsdp.CPUOffloadPolicy), which belongs to a sharded layout:
    with sharding: none the trainer runs DDP, which has no offload, and with a data-parallel
    degree of 1 (one device, or tensor parallelism over all of them) FSDP2 wraps nothing. On cpu
    there is nothing to offload to: the device memory is host memory already. Either way the run
    would keep its states where the plan says they are not, so the workflow gate refuses the spec
    before any job starts.

Flagged:
    hardware: {accelerator: cpu}
    parallelism: {offload: true}

Preferred:
    hardware: {accelerator: cpu}
    parallelism: {offload: false}
    # on a GPU: parallelism: {sharding: fsdp, offload: true}

How to fix:
    On cpu set offload: false. On an accelerator, use a sharded layout (zero2, fsdp or hsdp)
    over more than one data-parallel rank with offload, or offload: false. A warning in `runlib audit`; the workflow gate refuses it.
"""

from collections.abc import Iterator

from runlib.audit.checks._refusals import refusal_findings
from runlib.audit.registry import Context, Finding, case

CODE = "RUN005"
NAME = "offload-not-enacted"
SEVERITY = "warning"


def check(ctx: Context) -> Iterator[Finding]:
    yield from refusal_findings(ctx, CODE)


PASS = [
    {},
    {"parallelism.offload": True, "parallelism.sharding": "fsdp"},
    {"parallelism.offload": True, "parallelism.sharding": "zero2"},
    {"hardware.accelerator": "cpu"},
]
FAIL = [
    case({"hardware.accelerator": "cpu", "parallelism.offload": True, "parallelism.sharding": "fsdp"}, "warning"),
    case({"parallelism.offload": True}, "warning"),
    case({"parallelism.sharding": "fsdp", "phases[0].parallelism": {"offload": True, "sharding": "none"}}, "warning"),
    case({"hardware.devices_per_node": 1, "parallelism.offload": True, "parallelism.sharding": "fsdp"}, "warning"),
]
