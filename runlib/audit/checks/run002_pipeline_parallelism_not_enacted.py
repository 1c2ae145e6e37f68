"""RUN002: pipeline parallelism, which the runlib trainer does not enact.

Why it matters:
    Pipeline parallelism places consecutive layers on different devices and streams micro-batches
    through them under a schedule (GPipe, Huang et al. 2019, arXiv 1811.06965; 1F1B, Narayanan et
    al. 2021, arXiv 2104.04473). runlib's trainer has no pipeline schedule yet: it would train every
    layer on every device, which is not the layout the audit planned (memory per device, the
    data-parallel degree, the global batch). So the workflow gate refuses the spec before any job
    starts.

Flagged:
    parallelism: {pipeline: 4, sharding: zero1}

Preferred:
    parallelism: {pipeline: 1, sharding: fsdp}     # hsdp across nodes; tensor > 1 if a layer is too large

How to fix:
    Set pipeline: 1 and shard the model states with fsdp (or hsdp on several nodes), adding tensor
    parallelism when one layer's weights or activations do not fit. A warning in `runlib audit`;
    the workflow gate refuses it.
"""

from collections.abc import Iterator

from runlib.audit.checks._refusals import refusal_findings
from runlib.audit.registry import Context, Finding, case

CODE = "RUN002"
NAME = "pipeline-parallelism-not-enacted"
SEVERITY = "warning"


def check(ctx: Context) -> Iterator[Finding]:
    yield from refusal_findings(ctx, CODE)


PASS = [{}, {"parallelism.pipeline": 1}, {"parallelism.sharding": "fsdp"}]
FAIL = [
    case({"parallelism.pipeline": 2}, "warning"),
    case({"phases[0].parallelism": {"pipeline": 4}}, "warning"),
]
