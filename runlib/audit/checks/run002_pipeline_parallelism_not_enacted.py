"""RUN002: pipeline parallelism the runlib trainer cannot enact for this phase.

Why it matters:
    runlib's trainer runs pipeline parallelism with torch.distributed.pipelining: consecutive blocks
    on different devices, micro-batches streamed through them under a schedule (GPipe, Huang et al.
    2019, arXiv 1811.06965; 1F1B, Narayanan et al. 2021, arXiv 2104.04473 section 2.2.1), one stage
    per rank, or with interleaved 1F1B several model chunks per rank (section 2.2.2). Not enacted:
    a schedule and a number of virtual stages that do not go together, virtual stages that do not
    split the layers, an interleaved step whose micro-batches torch's schedule cannot cut into equal
    rounds of micro-batches // pipeline, and pipeline with context parallelism. A run that trained
    otherwise would not be the layout the audit planned (memory per device, the data-parallel
    degree), so the workflow gate refuses the spec before any job starts.

Flagged:
    parallelism: {pipeline: 2, pipeline_schedule: interleaved_1f1b}     # one chunk per rank
    parallelism: {pipeline: 2, pipeline_schedule: interleaved_1f1b, pipeline_virtual_stages: 2}
    batch: {grad_accum: 5}                                              # 2 rounds do not divide 5

Preferred:
    parallelism: {pipeline: 2, pipeline_schedule: interleaved_1f1b, pipeline_virtual_stages: 2}
    batch: {grad_accum: 4}

How to fix:
    Use pipeline_virtual_stages: 2 or more with interleaved_1f1b (1 with 1f1b and gpipe), a
    grad_accum that is a multiple of pipeline, and context or pipeline parallelism in a phase, not
    both. A warning in `runlib audit`; the workflow gate refuses it.
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
    {"phases[0].parallelism": {"pipeline": 4}, "phases[0].batch": {"grad_accum": 4}},
    {"parallelism.pipeline": 4},  # grad_accum 2 below 4 stages: runs as GPipe
    {
        "parallelism.pipeline": 2,
        "parallelism.pipeline_schedule": "interleaved_1f1b",
        "parallelism.pipeline_virtual_stages": 2,
    },
    {
        "parallelism.pipeline": 2,
        "parallelism.pipeline_schedule": "interleaved_1f1b",
        "parallelism.pipeline_virtual_stages": 3,
        "batch.grad_accum": 6,
    },
]
FAIL = [
    case(
        {
            "parallelism.pipeline": 2,
            "parallelism.pipeline_schedule": "interleaved_1f1b",
            "parallelism.pipeline_virtual_stages": 2,
            "batch.grad_accum": 5,
        },
        "warning",
    ),
    case(
        {
            "parallelism.pipeline": 2,
            "parallelism.pipeline_schedule": "interleaved_1f1b",
            "parallelism.pipeline_virtual_stages": 5,
        },
        "warning",
    ),
    case({"parallelism.pipeline": 2, "parallelism.pipeline_schedule": "interleaved_1f1b"}, "warning"),
    case({"phases[2].parallelism": {"pipeline": 2, "context": 2}}, "warning"),
]
