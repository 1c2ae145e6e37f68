"""MEM001: a phase's estimated peak memory exceeds the device memory.

Why it matters:
    A phase that does not fit crashes with an out-of-memory error at its first step (or, worse,
    after hours, when the first long-context phase starts). The estimate adds model states
    sharded over the data-parallel degree (ZeRO, arXiv 1910.02054), activations per layer
    (Korthikanti et al. 2022, arXiv 2205.05198, re-derived for SwiGLU and GQA with a fused
    attention kernel), fp32 logits (Megatron theoretical_memory_usage.py), FSDP gather buffers
    and the runtime's own overhead, in GiB as the device reports them (80 GB = 74.5 GiB).

Flagged:
    hardware: {accelerator: a100-80gb}
    phases: [..., {name: long, kind: long_context, seq_len: 65536, batch: {micro_batch: 4}}]   # ~100 GiB

Preferred:
    phases: [..., {name: long, kind: long_context, seq_len: 65536, batch: {micro_batch: 4}, parallelism: {context: 4}}]

How to fix:
    Apply the knob the finding names: the cheapest one that brings the phase under 90% of the
    device, tried in order of throughput cost: ZeRO-1/2 sharding, a smaller micro_batch with a
    larger grad_accum (same global batch), FSDP, full activation checkpointing, then context
    parallelism for long sequences (several at once when no single one is enough). Checked only
    when the device memory is known (catalog or hardware.memory_gib).
"""

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from runlib.audit.registry import Context, Finding, Severity, case
from runlib.plan.effective import PhaseSettings
from runlib.plan.layout import planned_degrees
from runlib.plan.memory import MemoryBreakdown, phase_memory

CODE = "MEM001"
NAME = "out-of-device-memory"
SEVERITY = "error"
GIB = 2**30
TARGET = 0.90  # a suggested fix must bring the phase under this share of the device (MEM002's threshold)
LONG_SEQ = 16384  # context parallelism is suggested for phases at least this long (or of kind long_context)
LABELS = {
    "weights": "weights",
    "master_weights": "fp32 master weights",
    "gradients": "gradients",
    "optimizer_states": "optimizer states",
    "activations": "activations",
    "logits": "logits",
    "buffers": "buffers (FSDP gathers, pipeline, gradient copies)",
    "runtime_overhead": "runtime overhead",
}
SHARDING_ORDER = ("none", "zero1", "zero2", "fsdp")


def largest_parts(memory: MemoryBreakdown, n: int = 3) -> str:
    parts = sorted(memory.as_dict().items(), key=lambda kv: -kv[1])
    return ", ".join(f"{LABELS.get(k, k)} {v / GIB:.1f} GiB" for k, v in parts[:n] if v > 0)


def _total(ctx: Context, s: PhaseSettings) -> float:
    plan, spec = ctx.plan, ctx.spec
    return phase_memory(
        spec.model,
        spec.precision,
        plan.params,
        plan.vocab_rows,
        s,
        plan.accelerator.runtime_overhead_gib,
        s.nodes,
        accelerator=spec.hardware.accelerator,
    ).total


def smaller_divisors(m: int) -> list[int]:
    """The divisors of m below m, largest first, by trial division up to sqrt(m): a micro_batch of
    2^20 (the schema's bound) costs 1,024 trials, not a million."""
    low, d = [], 1
    while d * d <= m:
        if m % d == 0:
            low.append(d)
        d += 1
    high = [m // d for d in reversed(low) if d * d != m]
    return [x for x in reversed(low + high) if x < m]


def _with_parallelism(s: PhaseSettings, **update: Any) -> PhaseSettings:
    par = s.parallelism.model_copy(update=update)
    data_parallel, model_parallel = planned_degrees(par, s.devices)
    return replace(s, parallelism=par, model_parallel=model_parallel, data_parallel=data_parallel)


Option = tuple[tuple[tuple[str, Any], ...], str, PhaseSettings]  # ((knob path, value), ...), note, new settings


def _knobs(s: PhaseSettings, position: str) -> list[list[Option]]:
    """Groups of options in order of throughput cost; each group's options from the mildest to the strongest."""
    par = s.parallelism
    groups: list[list[Option]] = []
    # hsdp shards every state (within a node): no zero1/zero2 to suggest, only fsdp across nodes
    level = SHARDING_ORDER.index("fsdp" if par.sharding == "hsdp" else par.sharding)
    if s.data_parallel > 1:
        groups.append(
            [
                ((("parallelism.sharding", mode),), "", _with_parallelism(s, sharding=mode))
                for mode in ("zero1", "zero2")
                if SHARDING_ORDER.index(mode) > level
            ]
        )
    m = s.micro_batch
    groups.append(
        [
            (
                (("batch.micro_batch", d), ("batch.grad_accum", s.grad_accum * (m // d))),
                " (same global batch)",
                replace(s, micro_batch=d, grad_accum=s.grad_accum * (m // d)),
            )
            for d in smaller_divisors(m)
        ]
    )
    if s.data_parallel > 1 and par.sharding != "fsdp":
        groups.append([((("parallelism.sharding", "fsdp"),), "", _with_parallelism(s, sharding="fsdp"))])
    if par.activation_checkpointing != "full":
        groups.append(
            [
                (
                    (("parallelism.activation_checkpointing", "full"),),
                    " (~1/3 more compute)",
                    _with_parallelism(s, activation_checkpointing="full"),
                )
            ]
        )
    # context parallelism where the trainer enacts it (runlib.plan.layout: no ALiBi, a rank's share of the
    # sequence split again by tensor)
    if (s.seq_len >= LONG_SEQ or s.phase.kind == "long_context") and position != "alibi":
        options: list[Option] = []
        c = par.context * 2
        while par.tensor * par.pipeline * c <= s.devices:
            fits = s.seq_len % (2 * c) == 0 and (s.seq_len // c) % par.tensor == 0
            if s.devices % (par.tensor * par.pipeline * c) == 0 and fits:
                options.append(
                    (
                        (("parallelism.context", c),),
                        " (the data-parallel degree drops: raise grad_accum to keep the batch)",
                        _with_parallelism(s, context=c),
                    )
                )
            c *= 2
        groups.append(options)
    return [g for g in groups if g]


def _apply(s: PhaseSettings, knobs: tuple[tuple[str, Any], ...]) -> PhaseSettings:
    values = dict(knobs)
    if "batch.micro_batch" in values:
        d = values["batch.micro_batch"]
        s = replace(s, micro_batch=d, grad_accum=s.grad_accum * max(1, s.micro_batch // d))
    par = {k.split(".", 1)[1]: v for k, v in values.items() if k.startswith("parallelism.")}
    return _with_parallelism(s, **par) if par else s


def _text(prefix: str, option: tuple[tuple[tuple[str, Any], ...], str]) -> str:
    knobs, note = option
    return " and ".join(f"{prefix}{path}: {value}" for path, value in knobs) + note


Knobs = tuple[tuple[str, Any], ...]


def _pick(ctx: Context, options: list[tuple[Knobs, str, PhaseSettings]], limit: float) -> tuple[int, float]:
    """(index, total) of the mildest option under `limit`, else of the one that saves most. Memory
    falls monotonically along the micro-batch options, so those are bisected (a micro_batch of 720
    has 29 smaller divisors); the other groups have at most a handful of options."""
    if options and options[0][0][0][0] == "batch.micro_batch":
        last = _total(ctx, options[-1][2])
        if last > limit:
            return len(options) - 1, last
        lo, hi, best = 0, len(options) - 1, (len(options) - 1, last)
        while lo < hi:
            mid = (lo + hi) // 2
            total = _total(ctx, options[mid][2])
            if total <= limit:
                hi, best = mid, (mid, total)
            else:
                lo = mid + 1
        return best
    totals = [_total(ctx, o[2]) for o in options]
    fitting = [k for k, t in enumerate(totals) if t <= limit]
    k = fitting[0] if fitting else min(range(len(options)), key=lambda j: totals[j])
    return k, totals[k]


def _suggest(ctx: Context, s: PhaseSettings, limit: float, prefix: str) -> tuple[str, Knobs, float]:
    """(fix text, knobs, new total) of the cheapest knob(s) that bring the phase under `limit` bytes;
    no knobs when nothing is enough."""
    groups = _knobs(s, ctx.spec.model.position)
    for group in groups:
        k, total = _pick(ctx, group, limit)
        if total <= limit:
            knobs, note, _ = group[k]
            return _text(prefix, (knobs, note)), knobs, total
    # no single knob is enough: combine one option of each group, cheapest group first: the mildest
    # that fits on top of the others, else the one that saves most (not always the strongest: more
    # context parallelism leaves less data parallelism to shard over); a later group may supersede an
    # earlier one on the same knob (fsdp over zero2)
    chosen: list[tuple[Knobs, str]] = []
    current = s
    for group in groups:
        trials = [(knobs, note, _apply(current, knobs)) for knobs, note, _ in group]
        k, total = _pick(ctx, trials, limit)
        knobs, note, current = trials[k]
        chosen = [c for c in chosen if not {p for p, _ in c[0]} & {p for p, _ in knobs}]
        chosen.append((knobs, note))
        if total <= limit:
            return " and ".join(_text(prefix, c) for c in chosen), tuple(k for c in chosen for k in c[0]), total
    return "", (), 0.0


def _inherited(s: PhaseSettings, knobs: Knobs) -> Knobs:
    """The global knobs that also reach a phase: those of the sections it does not override."""
    phase = s.phase
    return tuple(
        (path, value)
        for path, value in knobs
        if (path.startswith("batch.") and phase.batch is None)
        or (path.startswith("parallelism.") and phase.parallelism is None)
    )


def _phase_names(ctx: Context, members: list[int]) -> str:
    return ", ".join(repr(ctx.plan.phases[i].name) for i in members)


def memory_findings(ctx: Context, low: float, high: float | None, severity: Severity) -> Iterator[Finding]:
    """Findings for the phases whose peak memory is above `low` (and at most `high`) of the device.

    Phases with the same memory-relevant settings are reported together. Phases that take all of
    them from the global sections form the global group: its fix goes to the global paths, and a
    phase with overrides that the global fix also brings under the target is named there instead of
    being reported again.
    """
    device_gib = ctx.plan.accelerator.memory_gib
    if not device_gib or device_gib <= 0:
        return
    capacity = device_gib * GIB
    limit = TARGET * capacity
    groups: dict[tuple[object, ...], list[int]] = {}
    for i, p in enumerate(ctx.plan.phases):
        s = p.settings
        key = (s.seq_len, s.parallelism, s.micro_batch, s.grad_accum, s.data_parallel)
        groups.setdefault(key, []).append(i)

    def flagged(total: float) -> bool:
        share = total / capacity
        return share > low and (high is None or share <= high)

    def is_global(members: list[int]) -> bool:
        return any(not (ph.seq_len or ph.parallelism or ph.batch) for ph in (ctx.spec.phases[i] for i in members))

    ordered = sorted(groups.values(), key=lambda m: not is_global(m))  # the global group first
    global_knobs: Knobs = ()
    for members in ordered:
        plan_phase = ctx.plan.phases[members[0]]
        total = plan_phase.memory.total
        if not flagged(total):
            continue
        glob = is_global(members)
        if not glob and global_knobs:
            inherited = _inherited(plan_phase.settings, global_knobs)
            if inherited and _total(ctx, _apply(plan_phase.settings, inherited)) <= limit:
                continue  # the global fix covers it (named in the global finding)
        prefix = "" if glob else f"phases[{members[0]}]."
        text, knobs, new_total = _suggest(ctx, plan_phase.settings, limit, prefix)
        covered: list[int] = []
        if glob:
            global_knobs = knobs
            for other in ordered:
                if other is members or is_global(other):
                    continue
                s = ctx.plan.phases[other[0]].settings
                inherited = _inherited(s, knobs)
                if (
                    flagged(ctx.plan.phases[other[0]].memory.total)
                    and inherited
                    and _total(ctx, _apply(s, inherited)) <= limit
                ):
                    covered.extend(other)
        names = _phase_names(ctx, members)
        what = f"phase {names} needs" if len(members) == 1 else f"phases {names} need"
        also = ""
        if covered:
            also = f" (phase{'s' if len(covered) > 1 else ''} {_phase_names(ctx, covered)} too; the same setting fixes {'them' if len(covered) > 1 else 'it'})"
        if knobs:
            fix = f"set {text}: about {new_total / GIB:.1f} GiB per device ({new_total / capacity:.0%})"
            path = prefix + knobs[0][0]
            value = knobs[0][1] if len(knobs) == 1 or knobs[0][0] == "batch.micro_batch" and len(knobs) == 2 else None
        else:
            fix = (
                "no sharding, micro-batch, recompute or context-parallel setting is enough: add tensor parallelism, "
                "offload the optimizer, or use a device with more memory"
            )
            path = "parallelism" if glob else f"phases[{members[0]}]"
            value = None
        yield ctx.finding(
            path,
            f"{what} an estimated {total / GIB:.1f} GiB per device, {total / capacity:.0%} of the "
            f"{ctx.plan.accelerator.key} {device_gib:g} GiB (largest: {largest_parts(plan_phase.memory)}){also}",
            fix,
            value=value,
            severity=severity,
        )


def check(ctx: Context) -> Iterator[Finding]:
    yield from memory_findings(ctx, 1.0, None, "error")


PASS = [
    {},
    {"hardware.memory_gib": 13.5},  # every phase needs ~12.9 GiB: 96%
    {"phases[2].seq_len": 65536, "phases[2].rope_theta": 10000000, "phases[2].parallelism": {"context": 8}},
]
FAIL = [
    case({"hardware.memory_gib": 12.0}, "error"),
    case({"hardware.nodes": 2, "parallelism.sharding": "hsdp", "hardware.memory_gib": 5.0}, "error"),
    case({"batch.micro_batch": 128, "batch.grad_accum": 1}, "error"),
    case({"phases[2].seq_len": 65536, "phases[2].rope_theta": 10000000}, "error"),
    case({"hardware.memory_gib": 2.0}, "error"),  # nothing fits
]
