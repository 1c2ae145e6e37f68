"""OPT005: an optimizer field the chosen optimizer does not read.

Why it matters:
    runlib's adafactor is torch.optim.Adafactor (Shazeer & Stern 2018, arXiv 1804.04235): it keeps no
    first moment, so there is no beta1 to give it; its second-moment decay follows the step,
    beta2_k = 1 - k^-0.8 (the paper's section 7.2, torch's beta2_decay -0.8), and its epsilons are
    its own (eps1 for the second moment, 1e-3 for the relative step's floor). A spec that writes
    optimizer.betas or optimizer.eps with kind adafactor states a momentum or a decay the run would
    not have: PaLM trained Adafactor with beta1 0.9 momentum (arXiv 2204.02311, section 5), which this
    optimizer cannot give. (The stage config always holds betas and eps, at their defaults when the spec
    omits them, so this is the audit's to say: the trainer cannot tell a written value from a default.)

Flagged:
    optimizer: {kind: adafactor, lr: 1.0e-2, betas: [0.9, 0.99]}

Preferred:
    optimizer: {kind: adafactor, lr: 1.0e-2}        # no first moment; beta2 = 1 - k^-0.8

How to fix:
    Remove optimizer.betas and optimizer.eps with kind adafactor; or choose adamw, which reads them.
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "OPT005"
NAME = "optimizer-field-not-read"
SEVERITY = "warning"
NOT_READ = {"adafactor": ("betas", "eps")}  # optimizer kind -> the OptimizerSpec fields it does not read


def check(ctx: Context) -> Iterator[Finding]:
    opt = ctx.spec.optimizer
    for name in NOT_READ.get(opt.kind, ()):
        if name in opt.model_fields_set:
            yield ctx.finding(
                f"optimizer.{name}",
                f"optimizer.{name} with kind {opt.kind}: torch.optim.Adafactor reads no {name} (no first moment; "
                "beta2 = 1 - k^-0.8 and its own epsilons), so the run would not have the value written",
                f"remove optimizer.{name}, or use kind: adamw, which reads it",
            )


PASS = [
    {},
    {"optimizer.kind": "adafactor", "optimizer.lr": 1.0e-2, "optimizer.betas": "__delete__"},
]
FAIL = [
    case({"optimizer.kind": "adafactor", "optimizer.lr": 1.0e-2, "optimizer.betas": [0.9, 0.99]}, "warning"),
    case({"optimizer.kind": "adafactor", "optimizer.lr": 1.0e-2, "optimizer.eps": 1.0e-30}, "warning"),
]
