"""RUN003: tensor parallelism on a model shape the runlib trainer cannot split.

Why it matters:
    runlib's tensor-parallel plan (Megatron-LM, Shoeybi et al. 2019, arXiv 1909.08053, section 3;
    sequence parallelism, Korthikanti et al. 2022, arXiv 2205.05198) splits q, k and v column-wise
    by whole heads, the MLP's gate and up column-wise by hidden units, o and down row-wise, and the
    residual stream between blocks along the sequence. So heads, kv_heads, d_ff and each phase's
    seq_len must be multiples of the tensor degree. Megatron can replicate key/value heads when
    tensor > kv_heads (which PAR002 accepts); runlib does not. runlib's QK-norm normalizes the whole
    q and k projections, across heads that tensor parallelism puts on different ranks, so it is not
    split either. The workflow gate refuses the spec before any job starts rather than train
    another model.

Flagged:
    model: {heads: 16, kv_heads: 2}
    parallelism: {tensor: 4}

Preferred:
    model: {heads: 16, kv_heads: 2}
    parallelism: {tensor: 2}

How to fix:
    Use a tensor degree dividing heads, kv_heads, d_ff and every phase's seq_len (the finding
    lists them), or raise kv_heads to a multiple of it; with qk_norm, use tensor: 1 and shard with
    fsdp. A warning in `runlib audit`; the workflow gate refuses it.
"""

from collections.abc import Iterator

from runlib.audit.checks._refusals import refusal_findings
from runlib.audit.registry import Context, Finding, case

CODE = "RUN003"
NAME = "tensor-parallel-layout-not-enacted"
SEVERITY = "warning"


def check(ctx: Context) -> Iterator[Finding]:
    yield from refusal_findings(ctx, CODE)


PASS = [{}, {"parallelism.tensor": 2}, {"parallelism.tensor": 4}, {"model.qk_norm": True}]
FAIL = [
    case({"model.heads": 16, "model.kv_heads": 2, "parallelism.tensor": 4}, "warning"),
    case({"parallelism.tensor": 8}, "warning"),
    case({"phases[1].parallelism": {"tensor": 8}}, "warning"),
    case({"parallelism.tensor": 4, "model.d_ff": 2050}, "warning"),
    case({"parallelism.tensor": 4, "phases[2].seq_len": 4098}, "warning"),
    case({"parallelism.tensor": 2, "model.qk_norm": True}, "warning"),
]
