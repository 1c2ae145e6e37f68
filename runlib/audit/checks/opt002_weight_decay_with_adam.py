"""OPT002: weight decay applied with an L2-style optimizer (kind: adam).

Why it matters:
    With plain Adam, weight decay is an L2 term added to the gradient, so it is divided by the
    adaptive denominator sqrt(v) like everything else: weights with large gradients are barely
    decayed and the regularization is not the one the number suggests. AdamW decouples the decay
    from the gradient (Loshchilov & Hutter, arXiv 1711.05101), which is what every published LLM
    recipe with weight_decay 0.1 means (GPT-3, Llama, OLMo).

Flagged:
    optimizer: {kind: adam, lr: 3.0e-4, weight_decay: 0.1}

Preferred:
    optimizer: {kind: adamw, lr: 3.0e-4, weight_decay: 0.1}

How to fix:
    Set optimizer.kind: adamw; or, if plain Adam is intended, set weight_decay: 0.
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "OPT002"
NAME = "weight-decay-with-adam"
SEVERITY = "warning"


def check(ctx: Context) -> Iterator[Finding]:
    opt = ctx.spec.optimizer
    if opt.kind == "adam" and opt.weight_decay > 0:
        yield ctx.finding(
            "optimizer.kind",
            f"optimizer.kind: adam with weight_decay {opt.weight_decay:g}: the decay is an L2 term scaled by Adam's "
            "adaptive denominator, not the decoupled decay of AdamW",
            "set optimizer.kind: adamw (decoupled weight decay), or weight_decay: 0 to keep plain Adam",
            value="adamw",
        )


PASS = [{}, {"optimizer.kind": "adam", "optimizer.weight_decay": 0.0}, {"optimizer.weight_decay": 0.0}]
FAIL = [
    case({"optimizer.kind": "adam"}, "warning"),
    case({"optimizer.kind": "adam", "optimizer.weight_decay": 0.01}, "warning"),
]
