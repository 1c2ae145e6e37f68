"""RUN008: an optimizer kind the runlib trainer does not enact (lion).

Why it matters:
    The trainer builds adamw, adam, adafactor (torch.optim.AdamW, Adam, Adafactor) and muon
    (torch.optim.Muon on the 2-D hidden matrices, AdamW on embeddings, head and norms, as Jordan
    et al. 2024 and Liu et al. 2025, arXiv 2502.16982, do). Lion (Chen et al. 2023, arXiv
    2302.06675) is not in torch, and runlib depends on no package that provides it; training with
    another optimizer than the one named would be a different run (Lion wants a 3-10x smaller lr
    and a larger weight decay), so the workflow gate refuses the spec before any job starts.

Flagged:
    optimizer: {kind: lion, lr: 3.0e-4}

Preferred:
    optimizer: {kind: adamw, lr: 1.5e-3}

How to fix:
    Use kind adamw, adam, adafactor or muon, and retune lr and weight_decay for it. A warning in
    `runlib audit`; the workflow gate refuses it.
"""

from collections.abc import Iterator

from runlib.audit.checks._refusals import refusal_findings
from runlib.audit.registry import Context, Finding, case

CODE = "RUN008"
NAME = "optimizer-not-enacted"
SEVERITY = "warning"


def check(ctx: Context) -> Iterator[Finding]:
    yield from refusal_findings(ctx, CODE)


PASS = [{}, {"optimizer.kind": "muon"}, {"optimizer.kind": "adafactor"}, {"optimizer.kind": "adam"}]
FAIL = [case({"optimizer.kind": "lion"}, "warning")]
