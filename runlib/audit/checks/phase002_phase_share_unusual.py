"""PHASE002: a phase kind takes an unusual share of the run.

Why it matters:
    Published multi-phase recipes put almost all compute in the foundation phase and keep the
    specialised phases short: mid-training/enrichment of a few percent (OLMo 2, arXiv 2501.00656),
    long-context extension of a few percent at most (Llama 3, arXiv 2407.21783: ~800B of 15.6T
    tokens, 5%), and an annealing phase of roughly 1-10% that carries the LR decay (Hägele et al.
    2024, arXiv 2405.18392; DeepSeek LLM, arXiv 2401.02954). These are habits, not laws: SmolLM3
    spends about a quarter of its 11T tokens in its second and third stages, and Nemotron-4 a ninth
    in continued training (arXiv 2406.11704), so a share outside them is info. A share past half the
    run for a specialised kind, or a foundation under half, is usually a typo (50 instead of 5%):
    a warning.

Flagged:
    phases:
      - {name: foundation, kind: foundation, tokens: 70%}
      - {name: enrich, kind: enrichment, tokens: 25%}
      - {name: anneal, kind: anneal, tokens: 5%}

Preferred:
    phases:
      - {name: foundation, kind: foundation, tokens: 88%}
      - {name: enrich, kind: enrichment, tokens: 7%}
      - {name: anneal, kind: anneal, tokens: 5%}

How to fix:
    Resize the phases (foundation >= 80%, enrichment <= 10%, long_context <= 5%, anneal 1-10%),
    or silence the finding with a reason in audit.ignore when the plan is deliberate (e.g. a
    continued-pretraining run).
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "PHASE002"
NAME = "phase-share-unusual"
SEVERITY = "warning"
TYPO_SHARE = 0.5  # a specialised kind above it, or a foundation below it: a warning; otherwise info
# kind -> (min share, max share) of the run's tokens, summed over the phases of that kind
RANGES = {"foundation": (0.80, 1.0), "enrichment": (0.0, 0.10), "long_context": (0.0, 0.05), "anneal": (0.01, 0.10)}
EPS = 1e-9


def check(ctx: Context) -> Iterator[Finding]:
    phases = ctx.plan.phases
    total = sum(p.span.nominal_tokens for p in phases)
    if total <= 0:
        return
    for kind, (low, high) in RANGES.items():
        members = [(i, p) for i, p in enumerate(phases) if p.kind == kind]
        if not members:
            continue
        share = sum(p.span.nominal_tokens for _, p in members) / total
        if low - EPS <= share <= high + EPS:
            continue
        i, largest = max(members, key=lambda m: m[1].span.nominal_tokens)
        names = ", ".join(repr(p.name) for _, p in members)
        what = f"{kind} phase {names} takes" if len(members) == 1 else f"{kind} phases {names} together take"
        usual = (
            f"at least {low:.0%}" if high >= 1.0 else (f"at most {high:.0%}" if low <= 0 else f"{low:.0%}-{high:.0%}")
        )
        typo = share < TYPO_SHARE if kind == "foundation" else share > TYPO_SHARE
        yield ctx.finding(
            f"phases[{i}].tokens",
            f"{what} {share:.1%} of the run's tokens; usual is {usual}",
            f"resize the {kind} phase(s) to {usual} of the run, or record why in audit.ignore",
            severity="warning" if typo else "info",
        )


PASS = [
    {},
    {"phases[0].tokens": "80%", "phases[1].tokens": "10%"},  # edges of the ranges
    {"phases[0].tokens": "87%", "phases[2].tokens": "5%", "phases[3].tokens": "1%", "phases[1].tokens": "7%"},
]
FAIL = [
    case({"phases[0].tokens": "75%", "phases[1].tokens": "15%"}, "info"),  # foundation < 80%, enrichment > 10%
    case({"phases[0].tokens": "79%", "phases[2].tokens": "8%"}, "info"),  # long_context > 5%
    case({"phases[0].tokens": "92.5%", "phases[3].tokens": "0.5%"}, "info"),  # anneal < 1%
    case({"phases[0].tokens": "81%", "phases[3].tokens": "12%"}, "info"),  # anneal > 10%
    case({"phases[0].tokens": "35%", "phases[1].tokens": "55%"}, "warning"),  # enrichment past half: 55 for 5.5?
]
