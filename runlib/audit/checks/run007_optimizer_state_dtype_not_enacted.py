"""RUN007: optimizer states in a dtype other than that of the parameters they update.

Why it matters:
    torch optimizers create their states with torch.zeros_like(param) (torch/optim/adamw.py,
    _init_group), so the states take the dtype of the parameters they update: the fp32 master copy
    when master_weights is fp32 (FSDP2 keeps the sharded parameters in fp32 and casts to bf16 for
    compute, MixedPrecisionPolicy), the compute dtype when master_weights is none, fp32 with fp32
    compute. bf16 states beside fp32 master weights, or fp32 states beside bf16 parameters, would
    need a custom optimizer runlib does not have: the run's memory and numerics would not be those
    the audit planned, so the workflow gate refuses the spec before any job starts.

Flagged:
    precision: {compute: bf16, master_weights: fp32, optimizer_states: bf16}

Preferred:
    precision: {compute: bf16, master_weights: fp32, optimizer_states: fp32}
    # or, to save the memory: {compute: bf16, master_weights: none, optimizer_states: bf16}

How to fix:
    Set optimizer_states to the parameters' dtype (the finding gives it): fp32 with fp32 master
    weights or fp32 compute, bf16 with master_weights: none and bf16 compute. A warning in
    `runlib audit`; the workflow gate refuses it.
"""

from collections.abc import Iterator

from runlib.audit.checks._refusals import refusal_findings
from runlib.audit.registry import Context, Finding, case

CODE = "RUN007"
NAME = "optimizer-state-dtype-not-enacted"
SEVERITY = "warning"


def check(ctx: Context) -> Iterator[Finding]:
    yield from refusal_findings(ctx, CODE)


PASS = [
    {},
    {"precision.master_weights": "none", "precision.optimizer_states": "bf16"},
    {"precision.compute": "fp32"},
    {"precision.compute": "fp32", "precision.master_weights": "none"},
]
FAIL = [
    case({"precision.optimizer_states": "bf16"}, "warning"),
    case({"precision.master_weights": "none"}, "warning"),
    case({"precision.compute": "fp32", "precision.optimizer_states": "bf16"}, "warning"),
]
