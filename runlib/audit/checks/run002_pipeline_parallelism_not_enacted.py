"""RUN002: pipeline parallelism the runlib trainer cannot enact for this phase.

Why it matters:
    runlib's trainer runs pipeline parallelism with torch.distributed.pipelining: consecutive blocks
    on different devices, micro-batches streamed through them under a schedule (GPipe, Huang et al.
    2019, arXiv 1811.06965; 1F1B, Narayanan et al. 2021, arXiv 2104.04473 section 2.2.1), one stage
    per rank. Interleaved 1F1B (several model chunks per rank, section 2.2.2) is built and tested at
    the model level but the training loop does not yet run or checkpoint several chunks per rank; a
    schedule and a number of virtual stages that do not go together, virtual stages that do not
    split the layers, and pipeline with context parallelism are not enacted either. A run that
    trained otherwise would not be the layout the audit planned (memory per device, the
    data-parallel degree), so the workflow gate refuses the spec before any job starts.

Flagged:
    parallelism: {pipeline: 4, pipeline_schedule: interleaved_1f1b, pipeline_virtual_stages: 2}

Preferred:
    parallelism: {pipeline: 4, pipeline_schedule: 1f1b}

How to fix:
    Use pipeline_schedule: 1f1b (or gpipe) with pipeline_virtual_stages: 1; use context or
    pipeline parallelism in a phase, not both. A warning in `runlib audit`; the workflow gate
    refuses it.
"""

from collections.abc import Iterator

from runlib.audit.checks._refusals import refusal_findings
from runlib.audit.registry import Context, Finding, case

CODE = "RUN002"
NAME = "pipeline-parallelism-not-enacted"
SEVERITY = "warning"


def check(ctx: Context) -> Iterator[Finding]:
    yield from refusal_findings(ctx, CODE)


PASS = [
    {},
    {"parallelism.pipeline": 1},
    {"parallelism.pipeline": 2},
    {"parallelism.pipeline": 2, "parallelism.pipeline_schedule": "gpipe"},
    {"phases[0].parallelism": {"pipeline": 4}},
]
FAIL = [
    case(
        {
            "parallelism.pipeline": 2,
            "parallelism.pipeline_schedule": "interleaved_1f1b",
            "parallelism.pipeline_virtual_stages": 2,
        },
        "warning",
    ),
    case({"parallelism.pipeline": 2, "parallelism.pipeline_schedule": "interleaved_1f1b"}, "warning"),
    case({"phases[2].parallelism": {"pipeline": 2, "context": 2}}, "warning"),
]
