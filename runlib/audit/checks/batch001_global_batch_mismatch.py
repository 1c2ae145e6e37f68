"""BATCH001: a declared global batch does not equal micro_batch * grad_accum * dp (* seq_len).

Why it matters:
    The global batch is what the optimizer sees per step; the launcher only knows micro_batch,
    grad_accum and the data-parallel degree. When the declaration and the product disagree, the
    run trains with a batch nobody planned, and frameworks disagree on what to do: DeepSpeed
    asserts train_batch == micro * accum * world (deepspeed/runtime/config.py _batch_assertion;
    world must be the data-parallel size, DeepSpeed issues #5410 and #3982), LitGPT floors
    silently (litgpt/args.py). dp here is devices / (tensor * pipeline * context).

Flagged:
    hardware: {nodes: 1, devices_per_node: 8}
    model: {seq_len: 2048}
    batch: {micro_batch: 8, grad_accum: 2, global_batch: 512Ki tokens}   # 8*2*8*2048 = 256Ki

Preferred:
    batch: {micro_batch: 8, grad_accum: 4, global_batch: 512Ki tokens}

How to fix:
    Change grad_accum, micro_batch or the device count to one of the values the finding gives, or
    declare the batch the settings produce. A phase that changes seq_len or the parallel layout
    without a batch override may keep either the declared tokens or the declared sequences per
    step; a phase with its own global_batch is checked against its own settings.
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case
from runlib.plan.layout import planned_degrees
from runlib.spec.units import BatchSize, format_count

CODE = "BATCH001"
NAME = "global-batch-mismatch"
SEVERITY = "error"


def _size(amount: float, unit: str) -> str:
    short = format_count(amount)
    return f"{int(amount)} {unit}" + ("" if short == str(int(amount)) else f" ({short})")


def _whole(x: float) -> int | None:
    return int(round(x)) if x >= 1 and abs(x - round(x)) < 1e-9 else None


def _options(target: int, micro: int, accum: int, dp: int, seq: int, model_parallel: int) -> list[str]:
    """The three single changes that make micro * accum * dp * seq == target (seq = 1 for sequences)."""
    out = []
    ga = _whole(target / (micro * dp * seq))
    if ga is not None:
        out.append(f"grad_accum {ga}")
    mb = _whole(target / (accum * dp * seq))
    if mb is not None:
        out.append(f"micro_batch {mb}")
    new_dp = _whole(target / (micro * accum * seq))
    if new_dp is not None:
        out.append(f"{new_dp * model_parallel} devices (dp {new_dp})")
    return out


def _compare(
    declared: BatchSize, micro: int, accum: int, dp: int, seq: int, model_parallel: int
) -> tuple[str, str] | None:
    seq_factor = seq if declared.unit == "tokens" else 1
    actual = micro * accum * dp * seq_factor
    if actual == declared.amount:
        return None
    product = f"micro_batch {micro} x grad_accum {accum} x dp {dp}" + (
        f" x seq_len {seq}" if declared.unit == "tokens" else ""
    )
    message = (
        f"declared global_batch {_size(declared.amount, declared.unit)} but {product} = {_size(actual, declared.unit)}"
    )
    options = _options(declared.amount, micro, accum, dp, seq_factor, model_parallel)
    fix = "use " + ", or ".join(options) if options else "no whole grad_accum, micro_batch or device count matches"
    fix += f"; or declare global_batch: {actual} {declared.unit}"
    return message, fix


def check(ctx: Context) -> Iterator[Finding]:
    spec = ctx.spec
    declared = spec.batch.global_batch
    g_dp, model_parallel = planned_degrees(spec.parallelism, spec.hardware.nodes * spec.hardware.devices_per_node)
    g_mb, g_ga, g_seq = spec.batch.micro_batch, spec.batch.grad_accum, spec.model.seq_len
    global_key = (g_mb, g_ga, g_dp, g_seq)

    global_result = _compare(declared, g_mb, g_ga, g_dp, g_seq, model_parallel) if declared is not None else None
    global_names: list[str] = []
    seen: set[tuple[str, str]] = set()
    for p in ctx.plan.phases:
        s = p.settings
        own = s.phase.batch.global_batch if s.phase.batch is not None else None
        i = s.index
        if own is not None:
            unit_size = s.micro_batch * s.data_parallel * (s.seq_len if own.unit == "tokens" else 1)
            if own.amount % unit_size:
                continue  # no whole grad_accum reaches it: BATCH002 reports this declaration
            result = _compare(own, s.micro_batch, s.grad_accum, s.data_parallel, s.seq_len, s.model_parallel)
            if result:
                yield ctx.finding(f"phases[{i}].batch.global_batch", f"phase {p.name!r}: {result[0]}", result[1])
            continue
        if declared is None:
            continue
        if (s.micro_batch, s.grad_accum, s.data_parallel, s.seq_len) == global_key:
            global_names.append(p.name)
            continue
        if global_result is not None:
            continue  # the declaration itself is off: reported once, at batch.global_batch
        # inherited declaration, changed settings: keeping either the declared tokens or the declared sequences is fine
        declared_tokens = declared.tokens(g_seq)
        declared_sequences = declared_tokens / g_seq if g_seq else 0
        sequences = s.micro_batch * s.grad_accum * s.data_parallel
        tokens = sequences * s.seq_len
        if tokens == declared_tokens or sequences == declared_sequences:
            continue
        if s.data_parallel != g_dp and s.phase.parallelism is not None:
            path = f"phases[{i}].parallelism"
        elif s.data_parallel != g_dp and s.phase.hardware is not None:  # the phase's own machines
            path = f"phases[{i}].hardware"
        elif s.batch_overridden:
            path = f"phases[{i}].batch"
        else:
            path = f"phases[{i}].seq_len"
        message = (
            f"phase {p.name!r} runs micro_batch {s.micro_batch} x grad_accum {s.grad_accum} x dp {s.data_parallel} "
            f"= {sequences} sequences of {s.seq_len} = {_size(tokens, 'tokens')} per step, neither the declared "
            f"batch.global_batch {_size(declared_tokens, 'tokens')} nor its "
            f"{declared_sequences:g} sequences"
        )
        options = _options(declared_tokens, s.micro_batch, s.grad_accum, s.data_parallel, s.seq_len, s.model_parallel)
        fix = (
            ("to keep the declared tokens per step use " + ", or ".join(options))
            if options
            else "adjust the phase's batch"
        )
        fix += f"; or declare the phase's own batch: {{global_batch: {tokens} tokens}}"
        if (path, message) not in seen:
            seen.add((path, message))
            yield ctx.finding(path, message, fix)

    if global_result is not None:
        phases = ctx.plan.phases
        if phases and len(global_names) == len(phases):
            who = "all phases"
        elif global_names:
            who = ("phase " if len(global_names) == 1 else "phases ") + ", ".join(repr(n) for n in global_names)
        else:
            who = "the global batch settings"
        yield ctx.finding("batch.global_batch", f"{who}: {global_result[0]}", global_result[1])


PASS = [
    {},
    {"batch.global_batch": 128},
    {"batch.global_batch": "__delete__"},
    {"phases[2].batch": {"grad_accum": 1}},
    {"phases[2].batch": {"global_batch": "512Ki tokens"}},
    {"phases[2].batch": "__delete__"},  # the long phase keeps the declared 128 sequences (512Ki tokens)
    {"phases[2].batch": "__delete__", "phases[2].parallelism": {"context": 2}},  # keeps the declared 256Ki tokens
    {"phases[2].batch": {"global_batch": "300K tokens"}},  # no whole grad_accum: BATCH002 reports it
]
FAIL = [
    case({"batch.global_batch": "512Ki tokens"}, "error"),
    case({"batch.global_batch": 100}, "error"),
    case({"phases[2].batch": {"global_batch": "256Ki tokens"}}, "error"),
    case({"phases[0].batch": {"micro_batch": 4}}, "error"),
    case({"phases[2].parallelism": {"tensor": 2}}, "error"),
    # a phase on half the devices (phases[].hardware) keeps micro_batch x grad_accum: half the declared batch
    case({"phases[0].hardware": {"devices_per_node": 4}}, "error"),
]
