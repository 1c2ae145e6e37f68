"""PHASE004: RoPE base too small for the phase's context length.

Why it matters:
    The RoPE base bounds the context length a model can really use: Men et al. 2024 ("Base of
    RoPE Bounds Context Length", arXiv 2405.14591, Fig. 1 fit) find the smallest base that keeps
    long-range attention discriminative grows as about 0.0424 * s^1.628; below it the model
    trains at that length but retrieves poorly from the far context. Extending the context
    without raising the base (and without a scaling method such as YaRN) is the common slip.

Flagged:
    model: {seq_len: 4096, rope_theta: 10000}       # bound for 4096: ~32000
    phases: [..., {name: long, kind: long_context, seq_len: 32768}]   # still 10000

Preferred:
    model: {seq_len: 4096, rope_theta: 500000}
    phases: [..., {name: long, kind: long_context, seq_len: 32768, rope_theta: 4000000}]

How to fix:
    Set rope_theta (model.rope_theta, or the phase's rope_theta where the phase changes seq_len)
    to at least the bound the finding gives, and raise it whenever seq_len grows. Learned absolute
    positions are not checked.
"""

import math
from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "PHASE004"
NAME = "rope-theta-too-small"
SEVERITY = "warning"
COEF, EXPONENT = 0.0424, 1.628  # Men et al. 2024, arXiv 2405.14591


def theta_bound(seq_len: int) -> float:
    return float(COEF * seq_len**EXPONENT)  # float: int ** float is typed Any (a negative base is complex)


def round_up(x: float) -> int:
    """Up to two significant digits: 32193 -> 33000, 951234 -> 960000."""
    if x <= 0 or not math.isfinite(x):
        return 0
    scale = 10 ** max(0, math.floor(math.log10(x)) - 1)
    return int(math.ceil(x / scale) * scale)


def check(ctx: Context) -> Iterator[Finding]:
    spec = ctx.spec
    if spec.model.position != "rope":
        return
    reported: set[str] = set()
    prev = None
    for i, plan_phase in enumerate(ctx.plan.phases):
        s, theta = plan_phase.settings.seq_len, plan_phase.settings.rope_theta
        phase = spec.phases[i]
        if phase.rope_theta is not None or phase.seq_len is not None:
            path, where = f"phases[{i}].rope_theta", f"phase {phase.name!r}"
        else:
            path, where = "model.rope_theta", f"model.rope_theta (phase {phase.name!r})"
        bound = theta_bound(s)
        message = fix = None
        value = 0
        if theta < bound:
            value = round_up(bound)
            message = f"{where} uses rope_theta {theta:,.0f} at seq_len {s}, below the bound {bound:,.0f} (0.0424 * s^1.628, Men et al. 2024)"
            fix = f"set {path}: {value} or more"
        elif prev is not None and s > prev[0] and theta <= prev[1]:
            value = max(round_up(bound), round_up(prev[1] * (s / prev[0]) ** EXPONENT))
            message = (
                f"{where} grows seq_len from {prev[0]} to {s} but keeps rope_theta at {theta:,.0f} "
                f"(previous phase {prev[2]!r}: {prev[1]:,.0f})"
            )
            fix = f"raise {path} with the context, e.g. to {value} (the previous base scaled by (s/s_prev)^1.628)"
        if message and fix is not None and path not in reported:
            reported.add(path)
            yield ctx.finding(path, message, fix, value=value)
        prev = (s, theta, phase.name)


PASS = [
    {},
    {"model.rope_theta": 10500},  # bound for 2048: ~10440
    {"phases[2].seq_len": 8192, "phases[2].rope_theta": 500000},
    {"phases[3].branches": [{"name": "short", "seq_len": 1024}]},  # a branch at a shorter context
]
FAIL = [
    case({"model.rope_theta": 10000}, "warning"),  # below the bound at 2048
    case({"phases[2].rope_theta": 30000}, "warning"),  # a phase override below the bound at 4096 (~32200)
    case({"model.rope_theta": 1000000, "phases[2].rope_theta": "__delete__"}, "warning"),  # grows s, same theta
    # a branch at 8192 on the phase's rope_theta, model.rope_theta 50000 (bound for 8192: ~100000)
    case({"phases[3].branches": [{"name": "longer", "seq_len": 8192}]}, "warning"),
]
