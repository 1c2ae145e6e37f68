"""RUN001: context parallelism the runlib trainer cannot enact for this phase.

Why it matters:
    runlib enacts context parallelism in the all-gather form of Llama 3 (Dubey et al. 2024, arXiv
    2407.21783, section 3.3.2): each rank holds one early and one late chunk of 2 x cp equal chunks
    of every sequence (the causal work balanced), all-gathers the keys and values of each layer over
    the context-parallel group and masks documents and causality over the gathered keys. Under
    tensor parallelism a rank's share of the sequence is split again over the tensor ranks
    (sequence parallelism), so seq_len must divide by 2 x context x tensor (2 x context alone is
    PAR004's error); ALiBi's per-head distance bias is not in the context-parallel mask. A run
    that trained otherwise would not be the run the audit planned, so the workflow gate refuses
    the spec before any job starts.

Flagged:
    phases: [..., {name: long, kind: long_context, seq_len: 4100, parallelism: {context: 2, tensor: 4}}]

Preferred:
    phases: [..., {name: long, kind: long_context, seq_len: 4096, parallelism: {context: 2, tensor: 4}}]

How to fix:
    Use a seq_len divisible by 2 x context x tensor, or degrees that divide it; with ALiBi use
    context: 1 and bring the memory down otherwise (full activation checkpointing, fsdp sharding,
    tensor parallelism: MEM001 says which is enough). A warning in `runlib audit`; the workflow
    gate refuses it.
"""

from collections.abc import Iterator

from runlib.audit.checks._refusals import refusal_findings
from runlib.audit.registry import Context, Finding, case

CODE = "RUN001"
NAME = "context-parallelism-not-enacted"
SEVERITY = "warning"


def check(ctx: Context) -> Iterator[Finding]:
    yield from refusal_findings(ctx, CODE)


PASS = [
    {},
    {"parallelism.context": 1},
    {"phases[2].parallelism": {"context": 2}},
    {"hardware.accelerator": "cpu", "parallelism.context": 2},
]
FAIL = [
    case(
        {"phases[2].parallelism": {"context": 2, "tensor": 4}, "phases[2].seq_len": 4100}, "warning"
    ),  # 2050 over tp 4
    case({"model.position": "alibi", "phases[2].parallelism": {"context": 2}}, "warning"),
]
