"""RUN014: an accelerator the runlib trainer has no device for (a TPU).

Why it matters:
    runlib trains with PyTorch through Accelerate on CUDA or ROCm GPUs, or on CPU cores. A TPU
    (Gopher on TPUv3, PaLM on TPU v4: arXiv 2112.11446 App. C, arXiv 2204.02311 §4) needs
    torch_xla or JAX, which the trainer does not drive: on Slurm the job would ask for GPUs that
    the spec does not describe, or run on the host's CPU. The spec still plans and audits: the
    catalog has TPU v4 and v5p (`runlib explain hardware`). The workflow gate refuses it before any
    job starts.

Flagged:
    hardware: {accelerator: tpu-v4, nodes: 768, devices_per_node: 4}

Preferred:
    hardware: {accelerator: h100-sxm, nodes: 384, devices_per_node: 8}   # to train it here

How to fix:
    Keep the TPU to plan and audit the run; to train with runlib, give a GPU accelerator. A warning
    in `runlib audit`; the workflow gate refuses it.
"""

from collections.abc import Iterator

from runlib.audit.checks._refusals import REFUSED
from runlib.audit.registry import Context, Finding, case
from runlib.plan.enact import accelerator_refusals

CODE = "RUN014"
NAME = "accelerator-not-enacted"
SEVERITY = "warning"


def check(ctx: Context) -> Iterator[Finding]:
    for r in accelerator_refusals(ctx.spec.hardware.accelerator):
        yield ctx.finding(r.field, f"{r.reason}{REFUSED}", r.fix)


PASS = [{}, {"hardware.accelerator": "h800"}, {"hardware.accelerator": "mi300x"}]
FAIL = [
    case({"hardware.accelerator": "tpu-v4", "hardware.devices_per_node": 4, "batch.micro_batch": 16}, "warning"),
    case({"hardware.accelerator": "tpu-v5p", "hardware.devices_per_node": 4, "batch.micro_batch": 16}, "warning"),
]
