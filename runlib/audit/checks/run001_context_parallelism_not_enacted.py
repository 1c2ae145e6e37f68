"""RUN001: context parallelism, which the runlib trainer does not enact.

Why it matters:
    Context parallelism splits each sequence across devices and exchanges keys and values between
    them inside attention (ring attention: Liu et al. 2023, arXiv 2310.01889; PyTorch's
    torch.distributed.tensor.experimental.context_parallel). runlib's attention masks documents
    inside a packed sequence, and that document-masked attention has no context-parallel path; on
    cpu, the gloo backend has none at all. A run that trained without the split would hold the
    whole sequence on every device: not the run the audit planned, and out of memory where the
    plan relied on the split. So the workflow gate refuses the spec before any job starts.

Flagged:
    phases: [..., {name: long, kind: long_context, seq_len: 131072, parallelism: {context: 16}}]

Preferred:
    phases: [..., {name: long, kind: long_context, seq_len: 131072, batch: {micro_batch: 1},
                   parallelism: {activation_checkpointing: full, sharding: fsdp}}]

How to fix:
    Set context: 1 and bring the phase's memory down otherwise: full activation checkpointing, a
    smaller micro_batch with a larger grad_accum, fsdp sharding, or tensor parallelism (MEM001
    says which is enough). A warning in `runlib audit`; the workflow gate refuses it.
"""

from collections.abc import Iterator

from runlib.audit.checks._refusals import refusal_findings
from runlib.audit.registry import Context, Finding, case

CODE = "RUN001"
NAME = "context-parallelism-not-enacted"
SEVERITY = "warning"


def check(ctx: Context) -> Iterator[Finding]:
    yield from refusal_findings(ctx, CODE)


PASS = [{}, {"parallelism.context": 1}, {"phases[2].parallelism": {"context": 1}}]
FAIL = [
    case({"parallelism.context": 2}, "warning"),
    case({"phases[2].parallelism": {"context": 2}}, "warning"),
    case({"hardware.accelerator": "cpu", "parallelism.context": 2}, "warning"),
]
