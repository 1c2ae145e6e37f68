"""PHASE004: RoPE base too small for the phase's context length.

Why it matters:
    The RoPE base bounds the context length a model can really use: Men et al. 2024 ("Base of
    RoPE Bounds Context Length", arXiv 2405.14591, Fig. 1 fit) find the smallest base that keeps
    long-range attention discriminative grows as about 0.0424 * s^1.628; below it the model
    trains at that length but retrieves poorly from the far context. Extending the context
    without raising the base (and without a scaling method such as YaRN) is the common slip.

    The bound is one of long-range retrieval, so it applies where a phase takes the context
    beyond what the run trained at before (a long_context phase, or any phase whose seq_len grows):
    pre-training at 2K-8K on the standard base 10,000 is what PaLM (2K), Llama 2 (4K) and Gemma 2
    (8K) did, and their short contexts work.

Flagged:
    model: {seq_len: 4096, rope_theta: 10000}       # fine for pre-training at 4096
    phases: [..., {name: long, kind: long_context, seq_len: 32768}]   # still 10000: bound ~950,000

Preferred:
    model: {seq_len: 4096, rope_theta: 500000}
    phases: [..., {name: long, kind: long_context, seq_len: 32768, rope_theta: 4000000}]

How to fix:
    Set rope_theta (model.rope_theta, or the phase's rope_theta where the phase changes seq_len)
    to at least the bound the finding gives wherever the context grows, or scale RoPE in that phase
    (phases[].rope_scaling: YaRN, as DeepSeek-V3 extends 4K to 128K on a base of 10,000, arXiv
    2412.19437 section 4.3). Learned absolute positions are not checked.
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
    longest = 0  # the longest context trained at before this phase
    for i, plan_phase in enumerate(ctx.plan.phases):
        s, theta = plan_phase.settings.seq_len, plan_phase.settings.rope_theta
        phase = spec.phases[i]
        extends = phase.kind == "long_context" or (longest and s > longest)
        longest = max(longest, s)
        if not extends or phase.rope_scaling is not None:
            continue  # a scaled RoPE (YaRN, Llama 3.1's) is the other way to extend the context
        if phase.rope_theta is not None or phase.seq_len is not None:
            path, where = f"phases[{i}].rope_theta", f"phase {phase.name!r}"
        else:
            path, where = "model.rope_theta", f"model.rope_theta (phase {phase.name!r})"
        bound = theta_bound(s)
        if theta < bound and path not in reported:
            reported.add(path)
            value = round_up(bound)
            yield ctx.finding(
                path,
                f"{where} takes the context to seq_len {s} with rope_theta {theta:,.0f}, below the bound {bound:,.0f} "
                "for retrieving across it (0.0424 * s^1.628, Men et al. 2024)",
                f"set {path}: {value} or more (or scale RoPE for the longer context, e.g. YaRN)",
                value=value,
            )


PASS = [
    {},
    {"model.rope_theta": 10000},  # pre-training at 2048 on the standard base (PaLM, Llama 2)
    {"model.rope_theta": 10000, "model.seq_len": 8192, "phases[2].seq_len": 16384, "phases[2].rope_theta": 1000000},
    {"phases[2].seq_len": 8192, "phases[2].rope_theta": 500000},
    {"model.rope_theta": 1000000, "phases[2].rope_theta": "__delete__"},  # a base already above the 4096 bound
    {"phases[3].branches": [{"name": "short", "seq_len": 1024}]},  # a branch at a shorter context
    # the long phase scales RoPE instead (YaRN over 4x the trained context)
    {"phases[2].rope_theta": 30000, "phases[2].rope_scaling": {"kind": "yarn", "factor": 4, "original_seq_len": 2048}},
]
FAIL = [
    case({"phases[2].rope_theta": 30000}, "warning"),  # a long-context phase below the bound at 4096 (~32200)
    # the long phase at 16384 on the model's 50000 (bound ~308,000)
    case({"phases[2].rope_theta": "__delete__", "phases[2].seq_len": 16384}, "warning"),
    # a branch at 8192 on the phase's rope_theta, model.rope_theta 50000 (bound for 8192: ~100000)
    case({"phases[3].branches": [{"name": "longer", "seq_len": 8192}]}, "warning"),
]
