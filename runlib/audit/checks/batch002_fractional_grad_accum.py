"""BATCH002: a ramp stage or a phase's global batch needs a fractional grad_accum.

Why it matters:
    With a batch ramp (or a phase that declares its own global batch) the global batch is the
    input and grad_accum follows: global / (micro_batch * dp * seq_len). When that is not whole,
    the run cannot take that batch: Megatron-LM asserts global_batch_size % (micro_batch * dp)
    == 0 (megatron/core/num_microbatches_calculator.py), and launchers that floor the division
    (LitGPT's gbs // devices, DeepSpeed's fill-in of the batch triple) silently train on a smaller
    batch than planned. The ramp applies to phases without a batch override, each at its own
    seq_len and data-parallel degree.

Flagged:
    batch:
      micro_batch: 8                      # 8 devices, seq_len 2048: one micro-step = 128Ki tokens
      ramp:
        - {after: 0 tokens, global_batch: 100K tokens}     # grad_accum 0.76
        - {after: 10%, global_batch: 256Ki tokens}

Preferred:
    batch:
      micro_batch: 8
      ramp:
        - {after: 0 tokens, global_batch: 128Ki tokens}    # grad_accum 1
        - {after: 10%, global_batch: 256Ki tokens}         # grad_accum 2

How to fix:
    Use a global batch that is a multiple of micro_batch * dp * seq_len in every phase it applies
    to (the finding gives the nearest ones), or change micro_batch or the parallel layout. A ramp
    stage's own micro_batch (batch.ramp[].micro_batch) is the one its grad_accum divides by.
"""

import math
from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case
from runlib.plan.timeline import ramp_stretches
from runlib.spec.units import format_count

CODE = "BATCH002"
NAME = "fractional-grad-accum"
SEVERITY = "error"


def _size(amount: float, unit: str) -> str:
    short = format_count(amount)
    return f"{int(amount)} {unit}" + ("" if short == str(int(amount)) else f" ({short})")


def _nearest(amount: int, step: int, unit: str) -> tuple[str, str | None]:
    """The nearest whole multiples below and above, and the value when there is only one."""
    low, high = (amount // step) * step, math.ceil(amount / step) * step
    values = [v for v in (low, high) if v > 0]
    text = " or ".join(f"{_size(v, unit)} (grad_accum {v // step})" for v in values)
    return text, (f"{values[0]} {unit}" if len(values) == 1 else None)


def check(ctx: Context) -> Iterator[Finding]:
    spec = ctx.spec
    phases = ctx.plan.phases
    # phases that declare their own global batch: grad_accum must come out whole
    for p in phases:
        s = p.settings
        own = s.phase.batch.global_batch if s.phase.batch is not None else None
        if own is None:
            continue
        step = s.micro_batch * s.data_parallel * (s.seq_len if own.unit == "tokens" else 1)
        if step <= 0 or own.amount % step == 0:
            continue
        product = f"micro_batch {s.micro_batch} x dp {s.data_parallel}" + (
            f" x seq_len {s.seq_len}" if own.unit == "tokens" else ""
        )
        nearest, value = _nearest(own.amount, step, own.unit)
        yield ctx.finding(
            f"phases[{s.index}].batch.global_batch",
            f"phase {p.name!r}: global_batch {_size(own.amount, own.unit)} needs grad_accum {own.amount / step:.4g}: "
            f"it is not a multiple of {product} = {_size(step, own.unit)}",
            f"use {nearest}, or a micro_batch or parallel layout that divides it",
            value=value,
        )

    # ramp stages, for every phase without a batch override whose tokens the stage covers
    for r in ramp_stretches(spec):
        batch = r.batch
        groups: dict[tuple[int, int, int], list[str]] = {}
        for p in phases:
            s = p.settings
            if (
                s.batch_overridden
                or p.tokens <= 0
                or not (p.span.start_tokens < r.end_tokens and p.span.end_tokens > r.start_tokens)
            ):
                continue
            seq = s.seq_len if batch.unit == "tokens" else 1
            micro = r.micro_batch or s.micro_batch  # the stage's own micro-batch (batch.ramp[].micro_batch)
            step = micro * s.data_parallel * seq
            if step > 0 and batch.amount % step:
                groups.setdefault((step, micro, s.data_parallel), []).append(p.name)
        for (step, micro, dp), names in groups.items():
            s = next(p.settings for p in phases if p.name == names[0])
            who = ("phase " if len(names) == 1 else "phases ") + ", ".join(repr(n) for n in names)
            product = f"micro_batch {micro} x dp {dp}" + (f" x seq_len {s.seq_len}" if batch.unit == "tokens" else "")
            nearest, value = _nearest(batch.amount, step, batch.unit)
            if spec.batch.linear_ramp is not None:  # one finding for the whole ramp: its start or increment
                yield ctx.finding(
                    "batch.linear_ramp",
                    f"the linear batch ramp reaches {_size(batch.amount, batch.unit)} at {format_count(r.start_tokens)} tokens, "
                    f"which needs grad_accum {batch.amount / step:.4g} in {who}: not a multiple of {product} = "
                    f"{_size(step, batch.unit)}",
                    f"use a start and an increment that are multiples of {_size(step, batch.unit)}",
                )
                return
            assert spec.batch.ramp is not None  # without a linear ramp, the stretches are batch.ramp's stages
            stage = spec.batch.ramp[r.index]
            yield ctx.finding(
                f"batch.ramp[{r.index}].global_batch",
                f"ramp stage {r.index} (from {stage.after}) needs grad_accum {batch.amount / step:.4g} in {who}: "
                f"{_size(batch.amount, batch.unit)} is not a multiple of {product} = {_size(step, batch.unit)}",
                f"use {nearest}",
                value=value,
            )


_RAMP_OK = [{"after": "0 tokens", "global_batch": "128Ki tokens"}, {"after": "10%", "global_batch": "256Ki tokens"}]
PASS = [
    {},
    {"batch.ramp": _RAMP_OK},
    {"batch.ramp": [{"after": "0 tokens", "global_batch": 64}, {"after": "10%", "global_batch": 128}]},
    {"phases[2].batch": {"global_batch": "512Ki tokens"}},
    {"batch.linear_ramp": {"start": "64 sequences", "increment": "64 sequences", "over": "10%"}},
    # 32 sequences over dp 8 at the stage's own micro_batch 4: grad_accum 1
    {
        "batch.ramp": [
            {"after": "0 tokens", "global_batch": 32, "micro_batch": 4},
            {"after": "10%", "global_batch": 128},
        ]
    },
]
FAIL = [
    case(
        {
            "batch.ramp": [
                {"after": "0 tokens", "global_batch": "100K tokens"},
                {"after": "10%", "global_batch": "256Ki tokens"},
            ]
        },
        "error",
    ),
    case({"batch.ramp": [{"after": "0 tokens", "global_batch": 100}, {"after": "10%", "global_batch": 128}]}, "error"),
    # the ramp applies to the long phase too once it has no batch override: 256Ki tokens at 6144 per sequence
    case({"batch.ramp": _RAMP_OK, "phases[2].batch": "__delete__", "phases[2].seq_len": 6144}, "error"),
    case({"phases[2].batch": {"global_batch": "300K tokens"}}, "error"),
    # a linear ramp (batch.linear_ramp) from 32 sequences: half of micro_batch 8 x dp 8
    case({"batch.linear_ramp": {"start": "32 sequences", "increment": "32 sequences", "over": "10%"}}, "error"),
    # the same 32 sequences at the batch's micro_batch 8 (no micro_batch on the stage): grad_accum 0.5
    case({"batch.ramp": [{"after": "0 tokens", "global_batch": 32}, {"after": "10%", "global_batch": 128}]}, "error"),
]
