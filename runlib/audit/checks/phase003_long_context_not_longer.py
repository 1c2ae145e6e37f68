"""PHASE003: a long_context phase that does not lengthen the context.

Why it matters:
    A long_context phase exists to train at a longer sequence length than the phase before it.
    If its effective seq_len (its own, or model.seq_len when it sets none) is not larger, the phase
    spends its tokens at the old length: usually a forgotten `seq_len` override, or a phase
    override that was applied to the wrong phase.

Flagged:
    model: {seq_len: 4096}
    phases: [{name: foundation, kind: foundation}, {name: long, kind: long_context}]   # still 4096

Preferred:
    phases: [{name: foundation, kind: foundation}, {name: long, kind: long_context, seq_len: 32768, rope_theta: 4000000}]

How to fix:
    Set the phase's seq_len above the previous phase's (and raise rope_theta with it, see
    PHASE004), or change its kind if it is not meant to extend the context.
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "PHASE003"
NAME = "long-context-not-longer"
SEVERITY = "error"


def check(ctx: Context) -> Iterator[Finding]:
    phases = ctx.plan.phases
    for i in range(1, len(phases)):
        phase, prev = phases[i], phases[i - 1]
        if phase.kind != "long_context":
            continue
        s, s_prev = phase.settings.seq_len, prev.settings.seq_len
        if s > s_prev:
            continue
        yield ctx.finding(
            f"phases[{i}].seq_len",
            f"long_context phase {phase.name!r} runs at seq_len {s}, not longer than the previous phase "
            f"{prev.name!r} ({s_prev})",
            f"set phases[{i}].seq_len above {s_prev} (e.g. {2 * s_prev}) and raise its rope_theta with it, "
            "or change the phase's kind",
        )


PASS = [{}, {"phases[2].seq_len": 2049}]
FAIL = [
    case({"phases[2].seq_len": "__delete__"}, "error"),  # same length as the previous phase
    case({"phases[1].seq_len": 8192, "phases[1].rope_theta": 1000000}, "error"),  # shorter than the previous phase
]
