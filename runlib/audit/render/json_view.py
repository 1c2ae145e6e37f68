"""The JSON view: a stable contract other tools and tests read (`runlib audit --format json`).

Keys are only ever added. Byte counts are bytes, token counts tokens, times hours or days as named.
"""

from __future__ import annotations

import math
from typing import Any

from runlib import __version__
from runlib.audit import AuditResult
from runlib.errors import Diagnostic
from runlib.plan import Plan
from runlib.plan.flops import CONVENTION
from runlib.plan.hardware import CATALOG, device_memory_text
from runlib.spec.units import format_count

SCHEMA_VERSION = 1


def _num(x: float | None) -> float | int | None:
    """JSON has no inf/nan: map them to None."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return None
    return x


def device_hours_unit(accelerator: str) -> str:
    """The unit of `gpu_hours` in words: 'core-hours' on a CPU (the catalog's cpu device is one core),
    'GPU-hours' on a catalogued GPU, 'device-hours' on an accelerator given by its numbers."""
    if accelerator == "cpu":
        return "core-hours"
    return "GPU-hours" if accelerator in CATALOG else "device-hours"


def hours_text(hours: float | None) -> str:
    """Device-hours as every view prints them (text, markdown, html, run report): three significant
    digits with K/M/B suffixes, so a shrunk run's 0.00871 core-hours is not rounded to '0.0'."""
    return format_count(hours) if hours is not None and math.isfinite(hours) else "n/a"


def days_text(days: float | None) -> str:
    """Wall-clock days as every view prints them: three significant digits."""
    return f"{days:.3g}" if days is not None and math.isfinite(days) else "n/a"


def derived(plan: Plan) -> dict[str, Any]:
    spec = plan.spec
    phases = []
    for p in plan.phases:
        s = p.settings
        phases.append(
            {
                "name": p.name,
                "kind": p.kind,
                "tokens": p.tokens,
                "nominal_tokens": _num(p.span.nominal_tokens),
                "drift_tokens": _num(p.span.drift_tokens),
                "steps": p.steps,
                "start_tokens": p.span.start_tokens,
                "end_tokens": p.span.end_tokens,
                "start_step": p.span.start_step,
                "end_step": p.span.end_step,
                "tokens_per_step": p.tokens_per_step,
                "segments": [
                    {
                        "start_tokens": g.start_tokens,
                        "start_step": g.start_step,
                        "tokens_per_step": g.tokens_per_step,
                        "steps": g.steps,
                    }
                    for g in p.span.segments
                ],
                "seq_len": s.seq_len,
                "rope_theta": s.rope_theta,
                "micro_batch": s.micro_batch,
                "grad_accum": s.grad_accum,
                "data_parallel": s.data_parallel,
                "parallelism": s.parallelism.model_dump(),
                "lr_start": p.lr_start,
                "lr_end": p.lr_end,
                "lr_scale": p.lr_scale,  # phases[].optimizer.lr_scale, already in lr_start and lr_end
                "mixture": dict(s.phase.mixture),
                "source_tokens": {k: _num(v) for k, v in p.source_tokens.items()},
                "flops": _num(p.flops),
                "flops_per_token": _num(p.flops_per_token),
                "hours": _num(p.hours),
                "memory_bytes_per_device": _num(p.memory.total),
                "memory_device_reported_bytes": _num(p.memory.device_reported),
                "memory_breakdown_bytes": {k: _num(v) for k, v in p.memory.as_dict().items()},
                "memory_assumptions": {
                    k: _num(v) if isinstance(v, float) else v for k, v in p.memory.assumptions_dict().items()
                },
            }
        )
    ck = plan.checkpoint
    refs = plan.references
    return {
        "params": {
            "total": plan.params.total,
            "embedding": plan.params.embedding,
            "non_embedding": plan.params.non_embedding,
            "per_layer": plan.params.per_layer,
        },
        "vocab_rows": plan.vocab_rows,
        "tokenizer_ids": plan.tokenizer_ids,
        "tokens_total": plan.tokens_total,
        "steps_total": plan.steps_total,
        "flops": {
            "total": _num(plan.flops_total),
            "per_token": _num(plan.flops_per_token),
            "convention": CONVENTION,
            "kaplan_6nd": _num(plan.flops_kaplan),
            "megatron_causal": _num(plan.flops_causal),
        },
        "gpu_hours": _num(plan.gpu_hours),
        "device_hours_unit": device_hours_unit(spec.hardware.accelerator),  # gpu_hours' unit in words
        "wall_days": _num(plan.wall_days),
        "devices": plan.devices,
        "data_parallel": plan.data_parallel,
        "accelerator": {
            "key": plan.accelerator.key,
            "memory_gib": plan.accelerator.memory_gib,
            "memory_basis": plan.accelerator.memory_basis,  # "": the catalog's figure
            "memory_text": device_memory_text(plan.accelerator, "each"),
            "peak_tflops": plan.accelerator.peak_tflops,
            "mfu": spec.hardware.mfu,
        },
        "schedule": {
            "kind": plan.schedule.kind,
            "peak_lr": plan.schedule.peak_lr,
            "floor_lr": plan.schedule.floor_lr,
            "warmup_tokens": _num(plan.schedule.warmup_tokens),
            "decay_start_tokens": _num(plan.schedule.decay_start_tokens),
            "decay_end_tokens": _num(plan.schedule.decay_end_tokens),
        },
        "phases": phases,
        "sources": [
            {
                "name": s.name,
                "tokens_available": s.tokens_available,
                "tokens_used": _num(s.tokens_used),
                "epochs": _num(s.epochs),
            }
            for s in plan.sources
        ],
        "checkpoint": {
            "size_bytes": _num(ck.size_bytes),
            "write_seconds": _num(ck.write_seconds),
            "interval_tokens": _num(ck.interval_tokens),
            "interval_steps": _num(ck.interval_steps),
            "interval_hours": _num(ck.interval_hours),
            "job_mtbf_hours": _num(ck.job_mtbf_hours),
            "young_optimum_hours": _num(ck.young_optimum_hours),
            "count": ck.count,
        },
        "references": {
            "tokens_per_param": _num(refs.tokens_per_param),
            "chinchilla_tokens_per_param": refs.chinchilla_tokens_per_param,
            "optimal_params": _num(refs.optimal_params),
            "optimal_tokens": _num(refs.optimal_tokens),
            "optimal_batch_tokens": _num(refs.optimal_batch_tokens),
            "optimal_lr": _num(refs.optimal_lr),
            "predicted_loss": _num(refs.predicted_loss),
            "predicted_loss_note": refs.predicted_loss_note,  # None above: why (outside the fitted range)
        },
    }


def ladder_prediction(result: AuditResult) -> dict[str, Any] | None:
    """The held-out loss the spec's built fit_ladder artifact predicts for this run ({loss, low, high,
    resamples, source: "fit_ladder <key>", withheld: why not to use it, or None}), or None: no ladder, or
    its fit not built here."""
    p = result.ladder_prediction
    return None if p is None else {k: _num(v) if isinstance(v, float) else v for k, v in p.items()}


def to_dict(result: AuditResult) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "runlib_version": __version__,
        "file": result.file,
        "name": result.spec.name,
        "exit_code": result.exit_code(),
        "summary": {s: result.count(s) for s in ("error", "warning", "info")},
        "derived": {**derived(result.plan), "ladder_prediction": ladder_prediction(result)},
        "findings": [f.as_dict() for f in result.findings],
        "ignored": [{**i.finding.as_dict(), "reason": i.reason} for i in result.ignored],
    }


def render(result: AuditResult) -> str:
    import json

    return json.dumps(to_dict(result), indent=2, sort_keys=False, allow_nan=False)


def load_failure_dict(file: str, diagnostics: list[Diagnostic]) -> dict[str, Any]:
    """The contract for a spec that does not load: the same keys, `derived` null, `exit_code` 2, and
    each SPEC diagnostic as an error finding (code, path, line, col, message, fix)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "runlib_version": __version__,
        "file": file,
        "name": None,
        "exit_code": 2,
        "summary": {"error": len(diagnostics), "warning": 0, "info": 0},
        "derived": None,
        "findings": [d.as_finding() for d in diagnostics],
        "ignored": [],
    }


def render_load_failure(file: str, diagnostics: list[Diagnostic]) -> str:
    import json

    return json.dumps(load_failure_dict(file, diagnostics), indent=2, allow_nan=False)
