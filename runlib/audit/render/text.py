"""The terminal view: the derived numbers, then the findings grouped by severity; fits 80 columns."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping

from runlib.audit import AuditResult
from runlib.audit.registry import SEVERITIES
from runlib.audit.render.json_view import days_text, device_hours_unit, hours_text
from runlib.plan.memory import GIB, MIB
from runlib.spec.hardware import device_memory_text
from runlib.spec.units import format_count

__all__ = ["PART_LABELS", "WIDTH", "derived_lines", "finding_lines", "ladder_lines", "memory_lines", "render"]

WIDTH = 80


def _lr(x: float) -> str:
    return "0" if x == 0 else f"{x:.2g}"


def ladder_lines(result: AuditResult) -> list[str]:
    """The held-out loss the spec's built scaling ladder predicts for this run, once its fit is built."""
    p = result.ladder_prediction
    if p is None:
        return []
    if p.get("withheld"):
        return [f"  ladder      no prediction: the fit's law is not determined by the rungs ({p['withheld']})"]
    return [f"  ladder      loss {p['loss']:.3f} [{p['low']:.3f}, {p['high']:.3f}] predicted ({p['source']})"]


PART_LABELS = {
    "weights": "weights",
    "master_weights": "master",
    "gradients": "gradients",
    "optimizer_states": "optimizer",
    "activations": "activations",
    "logits": "logits",
    "buffers": "buffers",
    "runtime_overhead": "runtime",
    "fragmentation": "fragmentation",
}


def _assumption_words(a: Mapping[str, object]) -> list[str]:
    """The memory model's assumptions (MemoryBreakdown.assumptions) in words; [] for the CPU model."""
    if not a:
        return []
    n = a["in_flight_micro_batches"]
    words = []
    if a["pipeline_schedule"] != "none":
        words.append(
            f"pipeline stage {a['stage']} ({a['stage_layers']} layers, {n} micro-batch{'es' if n != 1 else ''} "
            f"in flight, {a['pipeline_schedule']})"
        )
    words += [
        f"states sharded over {a['state_shard_ranks']} ranks",
        f"{a['attention_kernel']} attention",
        f"sequence parallel ({a['sequence_parallel_saves']} inputs)"
        if a["sequence_parallel"]
        else "no sequence parallel",
        f"recompute {a['recompute']}",
        f"gradients accumulated {str(a['grad_accumulation']).replace('_', ' ')}",
        f"fragmentation {a['fragmentation_factor']:.0%} of the transient parts",
    ]
    return words


def memory_lines(result: AuditResult) -> list[str]:
    """The largest phase's memory per device as its named parts, and the assumptions behind them."""
    plan = result.plan
    if not plan.phases:
        return []
    ph = max(plan.phases, key=lambda p: p.memory.total)
    mem = ph.memory
    unit, scale = ("GiB", GIB) if mem.total >= GIB else ("MiB", MIB)
    parts = ", ".join(f"{PART_LABELS[k]} {v / scale:.3g}" for k, v in mem.as_dict().items() if v > 0)
    text = f"{ph.name} (the largest), {unit} per device: {parts} = {mem.total / scale:.3g}"
    if mem.allocator_cache > 0:
        text += (
            f"; the device would report {mem.device_reported / scale:.3g} "
            f"(allocator cache {mem.allocator_cache / scale:.3g} beyond the peak)"
        )
    words = _assumption_words(mem.assumptions_dict())
    if words:
        text += "; assumes " + ", ".join(words)
    return textwrap.wrap(text, WIDTH, initial_indent="  memory      ", subsequent_indent=" " * 14)


def derived_lines(result: AuditResult) -> list[str]:
    plan, spec = result.plan, result.spec
    p = plan.params
    lines = [
        f"{spec.name}  ({result.file})",
        *textwrap.wrap(
            f"{format_count(p.total)} total, "
            + (f"{format_count(p.active)} active per token, " if p.active != p.total else "")
            + f"{format_count(p.non_embedding)} non-embedding, {format_count(p.embedding)} embedding",
            WIDTH,
            initial_indent="  params      ",
            subsequent_indent=" " * 14,
        ),
        f"  tokens      {format_count(plan.tokens_total)} in {plan.steps_total:,} steps "
        f"({plan.references.tokens_per_param:.1f} per param; Chinchilla ~20)",
        f"  compute     {plan.flops_total:.3g} FLOPs (PaLM convention), {plan.flops_per_token:.3g} per token",
        *textwrap.wrap(
            f"{plan.devices} x {plan.accelerator.key}, {device_memory_text(plan.accelerator, 'each')}, "
            f"dp {plan.data_parallel}"
            + (f", ep {spec.parallelism.expert}" if spec.parallelism.expert > 1 else "")
            + f", MFU {spec.hardware.mfu:g}",
            WIDTH,
            initial_indent="  hardware    ",
            subsequent_indent=" " * 14,
        ),
        f"  time        {hours_text(plan.gpu_hours)} {device_hours_unit(spec.hardware.accelerator)}, "
        f"{days_text(plan.wall_days)} days",
        f"  references  batch {format_count(plan.references.optimal_batch_tokens)} tokens, "
        f"lr {plan.references.optimal_lr:.2g} (DeepSeek fit)",
        *ladder_lines(result),
        *memory_lines(result),
        "",
        f"  {'phase':<12} {'tokens':>7} {'steps':>8} {'tok/step':>8} {'seq':>6} {'lr':>13} {'GiB/dev':>8}",
    ]
    for ph in plan.phases:
        lr = f"{_lr(ph.lr_start)}>{_lr(ph.lr_end)}"
        lines.append(
            f"  {ph.name[:12]:<12} {format_count(ph.tokens):>7} {ph.steps:>8,} {format_count(ph.tokens_per_step):>8} "
            f"{ph.settings.seq_len:>6} {lr:>13} {ph.memory.total / GIB:>8.1f}"
        )
    lines += ["", f"  {'source':<12} {'available':>10} {'used':>10} {'epochs':>7}  tokens counted"]
    for s in plan.sources:
        avail = format_count(s.tokens_available) if s.tokens_available is not None else "unknown"
        epochs = (
            f"{s.epochs:.2f}" if s.epochs is not None and s.epochs != float("inf") else ("inf" if s.epochs else "-")
        )
        lines.append(f"  {s.name[:12]:<12} {avail:>10} {format_count(s.tokens_used):>10} {epochs:>7}  {s.tokens_basis}")
    return lines


def finding_lines(result: AuditResult) -> list[str]:
    lines = []
    for severity in SEVERITIES:
        group = [f for f in result.findings if f.severity == severity]
        if not group:
            continue
        lines += ["", f"{severity}s ({len(group)})" if severity != "info" else f"info ({len(group)})"]
        for f in group:
            where = f"{result.file}:{f.line}:{f.col}" if f.line else result.file
            lines.append(f"{where}: {f.code} {f.path}")
            lines += textwrap.wrap(f.message, WIDTH, initial_indent="  ", subsequent_indent="  ")
            lines += textwrap.wrap(f"fix: {f.fix}", WIDTH, initial_indent="  ", subsequent_indent="       ")
    if result.ignored:
        lines += ["", f"silenced by audit.ignore ({len(result.ignored)})"]
        for i in result.ignored:
            lines += textwrap.wrap(
                f"{i.finding.code} {i.finding.path}: {i.reason}", WIDTH, initial_indent="  ", subsequent_indent="    "
            )
    return lines


def render(result: AuditResult) -> str:
    """`runlib audit` in a terminal: the derived numbers, the findings by severity, a count line."""
    lines = derived_lines(result) + finding_lines(result)
    e, w, i = (result.count(s) for s in SEVERITIES)
    lines += ["", f"{e} error(s), {w} warning(s), {i} info; `runlib explain CODE` documents a check."]
    return "\n".join(lines) + "\n"
