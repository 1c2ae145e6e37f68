"""OPT004: weight decay far above every published pre-training recipe.

Why it matters:
    Decoupled weight decay shrinks every decayed weight by lr x weight_decay per step, so the
    weights average their updates over about 1 / (lr x weight_decay) steps (Wang & Aitchison 2024,
    arXiv 2405.13698: AdamW as an exponential moving average). Published AdamW pre-training uses
    0.1 (GPT-3, arXiv 2005.14165 App. B; Llama 2, arXiv 2307.09288 §2.2; OLMo 2, arXiv 2501.00656;
    DeepSeek LLM, arXiv 2401.02954 §2.3) or less (Pythia 0.01, arXiv 2304.01373); Lion takes a decay
    3-10x larger at a 3-10x smaller LR, keeping their product (Chen et al. 2023, arXiv 2302.06675
    §5). A value several times that range, 1.0 for 0.1 most often, pulls the weights toward zero
    ten times as hard as the recipe it copies: the model forgets what it learned more than a few
    thousand steps ago.

Flagged:
    optimizer: {kind: adamw, lr: 3.0e-4, weight_decay: 1.0}

Preferred:
    optimizer: {kind: adamw, lr: 3.0e-4, weight_decay: 0.1}

How to fix:
    Set optimizer.weight_decay to 0.1 (Lion: 0.3 to 1.0 at its smaller LR), or state the reason for
    the value in audit.ignore.
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "OPT004"
NAME = "weight-decay-out-of-range"
SEVERITY = "warning"
PUBLISHED = 0.1  # AdamW's weight_decay in GPT-3, Llama 2, OLMo 2, DeepSeek LLM
LION_FACTOR = 10.0  # Lion: up to 10x AdamW's decay (Chen et al. 2023, section 5)
FACTOR = 3.0  # flagged above this many times the published value


def check(ctx: Context) -> Iterator[Finding]:
    opt = ctx.spec.optimizer
    typical = PUBLISHED * (LION_FACTOR if opt.kind == "lion" else 1.0)
    if opt.weight_decay <= FACTOR * typical or not opt.lr > 0:
        return
    timescale = 1.0 / (opt.lr * opt.weight_decay)
    steps = ctx.plan.steps_total
    share = f", {timescale / steps:.1%} of the run's {steps:,} steps" if steps else ""
    yield ctx.finding(
        "optimizer.weight_decay",
        f"optimizer.weight_decay {opt.weight_decay:g} is {opt.weight_decay / typical:.3g}x the published {typical:g} for "
        f"{opt.kind}: at the peak LR {opt.lr:.3g} the weights average their updates over about {timescale:,.0f} steps"
        f"{share}, against {timescale * opt.weight_decay / typical:,.0f} with {typical:g}",
        f"set optimizer.weight_decay: {typical:g}",
        value=typical,
    )


PASS = [
    {},
    {"optimizer.weight_decay": 0.0},
    {"optimizer.weight_decay": 0.3},
    {"optimizer.kind": "lion", "optimizer.lr": 1.5e-4, "optimizer.weight_decay": 1.0},
]
FAIL = [
    case({"optimizer.weight_decay": 1.0}, "warning"),
    case({"optimizer.kind": "lion", "optimizer.lr": 1.5e-4, "optimizer.weight_decay": 10.0}, "warning"),
]
