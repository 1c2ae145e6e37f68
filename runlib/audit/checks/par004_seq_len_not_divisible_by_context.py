"""PAR004: sequence length not divisible by 2 * context.

Why it matters:
    Context parallelism for causal attention splits each sequence into 2 * context chunks and
    gives every rank one early and one late chunk, so that the causal mask leaves each rank the
    same work (Megatron-LM arguments.py: seq_length % (2 * context_parallel_size) == 0;
    torchtitan's seq_len_divisor). A length that does not split this way is rejected, or padded,
    and a phase that changes seq_len has to be checked with its own length.

Flagged:
    parallelism: {context: 4}
    phases: [{name: long, kind: long_context, seq_len: 32772}]     # 32772 % 8 = 4

Preferred:
    parallelism: {context: 4}
    phases: [{name: long, kind: long_context, seq_len: 32768}]

How to fix:
    Round seq_len to a multiple of 2 * context (the finding gives it), or pick a context degree
    with 2 * context dividing seq_len.
"""

from collections.abc import Iterator

from runlib.audit.checks._shared import who
from runlib.audit.registry import Context, Finding, case

CODE = "PAR004"
NAME = "seq-len-not-divisible-by-context"
SEVERITY = "error"


def _problem(seq_len: int, context: int) -> tuple[str, str, int] | None:
    if context <= 1 or seq_len % (2 * context) == 0:
        return None
    chunk = 2 * context
    padded = -(-seq_len // chunk) * chunk
    working = [c for c in range(2, min(seq_len // 2, 4096) + 1) if seq_len % (2 * c) == 0][:6]
    message = f"seq_len {seq_len} is not divisible by 2 x context {context} = {chunk} (remainder {seq_len % chunk})"
    fix = f"use seq_len {padded} (or {padded - chunk})" if padded - chunk > 0 else f"use seq_len {padded}"
    fix += f", or a context degree with 2 * context dividing {seq_len}" + (
        f" ({', '.join(map(str, working))})" if working else ""
    )
    return message, fix, padded


def check(ctx: Context) -> Iterator[Finding]:
    spec = ctx.spec
    phases = ctx.plan.phases
    global_names = []
    for p in phases:
        phase = p.settings.phase
        own_context = phase.parallelism is not None and phase.parallelism.context is not None
        own_seq = phase.seq_len is not None
        if not own_context and not own_seq:
            global_names.append(p.name)
            continue
        problem = _problem(p.settings.seq_len, p.settings.parallelism.context)
        if problem:
            i = p.settings.index
            path = f"phases[{i}].parallelism.context" if own_context and not own_seq else f"phases[{i}].seq_len"
            value = problem[2] if path.endswith("seq_len") else None
            yield ctx.finding(path, f"phase {p.name!r}: {problem[0]}", problem[1], value=value)
    if global_names or not phases:
        problem = _problem(spec.model.seq_len, spec.parallelism.context)
        if problem:
            yield ctx.finding("parallelism.context", f"{who(global_names, len(phases))}: {problem[0]}", problem[1])


PASS = [
    {},
    {"parallelism.context": 2},
    {"parallelism.context": 4, "phases[2].seq_len": 4104},
]
FAIL = [
    case({"parallelism.context": 2, "model.seq_len": 2050}, "error"),
    case({"parallelism.context": 2, "phases[2].seq_len": 4098}, "error"),
    case({"phases[2].parallelism": {"context": 8}, "phases[2].seq_len": 4104}, "error"),
]
