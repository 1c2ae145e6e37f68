"""CKPT003: the retained checkpoints need a terabyte or more of storage.

Why it matters:
    A resumable checkpoint holds the weights at their highest precision and the optimizer's
    moments: about 12-16 bytes per parameter with fp32 Adam, several times the model's bf16 size
    (auditor.md, CKPT-STORAGE). `keep` of them must fit the storage next to the data; a full disk
    fails the run at a checkpoint write, often hours into it. Reported as information from 1 TiB.

Flagged:
    checkpoint: {keep: 20}      # 7B model: 20 x 94 GB = 1.7 TiB

Preferred:
    checkpoint: {keep: 3}       # and copy milestone checkpoints elsewhere

How to fix:
    Make sure the storage holds `keep` checkpoints, or lower checkpoint.keep; keep milestone
    checkpoints (phase ends) as weights only, outside the rotation.
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case
from runlib.spec.units import format_count

CODE = "CKPT003"
NAME = "large-checkpoint-storage"
SEVERITY = "info"
TIB = 2**40


def check(ctx: Context) -> Iterator[Finding]:
    size = ctx.plan.checkpoint.size_bytes
    keep = ctx.spec.checkpoint.keep
    total = size * keep
    if total < TIB:
        return
    params = ctx.plan.params.total
    per_param = size / params if params else 0.0
    yield ctx.finding(
        "checkpoint.keep",
        f"each checkpoint is about {size / 1e9:.3g} GB ({per_param:.0f} bytes x {format_count(params)} parameters: weights "
        f"at their highest precision + optimizer states); keep: {keep} needs {total / TIB:.2f} TiB",
        f"make sure the checkpoint storage holds {total / TIB:.2f} TiB, or lower checkpoint.keep",
        severity="info",
    )


PASS = [{}, {"checkpoint.keep": 900}]  # 900 x 1.21 GB = 0.99 TiB
FAIL = [case({"checkpoint.keep": 1000}, "info")]
