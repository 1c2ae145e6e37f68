"""The metrics of runlib's MLflow records, from what the stages wrote (pure: no mlflow, no I/O but JSON reads).

    stage_metrics(manifest)        a child's summary: stage/wall_seconds, count/<name>, detail/<path>
    train_history(records)         metrics.jsonl -> (name, value, step) points: train/...
    eval_metrics(eval.json)        heldout/<source>/<metric>, task/<task>/<metric>
    parent_summary(manifests, ...) the parent's: the latest phase's held-out loss, tokens, wall time,
                                   device-hours measured and planned
    build_span_ms(manifests)       the first start and last end of some builds (the parent's span)

Names follow the one scheme of runlib.track's docstring; runlib.track.mlflow_track logs them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any, TypeGuard

from runlib.store.manifest import Manifest
from runlib.track.flatten import clean_key


def is_number(value: object) -> TypeGuard[int | float]:
    """A finite int or float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def metric_name(*parts: object) -> str:
    """The scheme's name of a metric: its parts (each made a valid MLflow name) joined by "/"."""
    return "/".join(clean_key(str(p)).replace("/", "_") for p in parts)


def numeric_leaves(d: dict[str, Any], *prefix: str) -> dict[str, float]:
    """Numbers in nested dicts under "/"-joined names (lists and strings are skipped: they are not metrics)."""
    out: dict[str, float] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(numeric_leaves(v, *prefix, k))
        elif is_number(v):
            out[metric_name(*prefix, k)] = float(v)
    return out


# manifest values that a stage's own history logs already (under the name in the comment): not logged twice
DUPLICATED_COUNTS = {
    "train_phase": {"tokens", "final_loss", "tokens_per_s", "mfu"},  # train/tokens, train/loss, ... (last point)
}
DUPLICATED_DETAILS = {"train_phase": {"loss_by_source"}}  # train/loss/<source> (last point)
COUNTS_FROM_FILE = {"eval_phase"}  # its counts copy eval.json: heldout/<source>/..., task/<task>/...


def stage_metrics(manifest: Manifest) -> dict[str, float]:
    """stage/wall_seconds, the counts as count/<name> and the numeric details as detail/<path>, less what the
    stage's history logs already (DUPLICATED_COUNTS, DUPLICATED_DETAILS, COUNTS_FROM_FILE)."""
    stage = manifest.stage
    metrics: dict[str, float] = {}
    wall = manifest.timings.wall_seconds
    if is_number(wall):
        metrics["stage/wall_seconds"] = float(wall)
    if stage not in COUNTS_FROM_FILE:
        skip = DUPLICATED_COUNTS.get(stage, set())
        metrics.update(numeric_leaves({k: v for k, v in manifest.counts.items() if k not in skip}, "count"))
    skip = DUPLICATED_DETAILS.get(stage, set())
    metrics.update(numeric_leaves({k: v for k, v in manifest.details.items() if k not in skip}, "detail"))
    return metrics


TRAIN_HISTORY_FIELDS = ("loss", "lr", "grad_norm", "tokens", "tokens_per_s", "mfu")


def is_value(value: object) -> TypeGuard[int | float]:
    """A metric value: any int or float but a bool (a NaN or infinite loss is worth recording)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def train_history(records: Iterable[dict[str, Any]]) -> list[tuple[str, float, int]]:
    """metrics.jsonl records -> (name, value, step): train/<loss|lr|grad_norm|tokens|tokens_per_s|mfu>,
    train/loss/<source> and train/heldout_loss/<source> (monitor.eval_every), an MoE's
    train/expert_load/<layer>/<expert>; a record without an integer step is skipped."""
    points: list[tuple[str, float, int]] = []
    for record in records:
        value = record.get("step")
        if not is_value(value) or not math.isfinite(value):
            continue
        step = int(value)
        points += [
            (metric_name("train", k), float(record[k]), step) for k in TRAIN_HISTORY_FIELDS if is_value(record.get(k))
        ]
        for field, group in (("loss_by_source", "loss"), ("heldout_loss_by_source", "heldout_loss")):
            by_source = record.get(field)
            if isinstance(by_source, dict):
                points += [
                    (metric_name("train", group, s), float(v), step) for s, v in by_source.items() if is_value(v)
                ]
        points += expert_load_points(record.get("expert_load"), step)
    return points


def expert_load_points(load: object, step: int) -> list[tuple[str, float, int]]:
    """An MoE run's expert_load record ({layer: [share of the interval's assignments per expert]}) ->
    train/expert_load/<layer>/<expert> and train/expert_load/<layer>/max_over_mean (1 when balanced)."""
    points: list[tuple[str, float, int]] = []
    for layer, shares in (load if isinstance(load, dict) else {}).items():
        values = [float(v) for v in shares if is_value(v)] if isinstance(shares, list) else []
        points += [(metric_name("train", "expert_load", layer, i), v, step) for i, v in enumerate(values)]
        if values and sum(values) > 0:
            points.append(
                (
                    metric_name("train", "expert_load", layer, "max_over_mean"),
                    max(values) * len(values) / sum(values),
                    step,
                )
            )
    return points


def eval_metrics(data: dict[str, Any]) -> dict[str, float]:
    """eval.json -> heldout/<source>/<loss|perplexity|bits_per_byte|tokens> and task/<name>/<metric>."""
    out: dict[str, float] = {}
    for prefix, group in (("heldout", data.get("heldout")), ("task", data.get("tasks"))):
        for name, values in (group if isinstance(group, dict) else {}).items():
            if isinstance(values, dict):
                for k, v in values.items():
                    if is_value(v):
                        out[metric_name(prefix, name, k)] = float(v)
    return out


def own_manifests(manifests: dict[str, Manifest], reused_keys: Collection[str]) -> dict[str, Manifest]:
    """The manifests of the artifacts this run built itself: those whose key is not among `reused_keys`."""
    return {name: m for name, m in manifests.items() if m.key not in reused_keys}


def build_span_ms(manifests: Iterable[Manifest]) -> tuple[int, int] | None:
    """(start, end) in Unix ms of the builds of these artifacts: the first start, the last end."""
    spans = [
        (m.timings.started_at, m.timings.started_at + m.timings.wall_seconds)
        for m in manifests
        if is_number(m.timings.started_at) and is_number(m.timings.wall_seconds)
    ]
    if not spans:
        return None
    return int(min(a for a, _ in spans) * 1000), int(max(b for _, b in spans) * 1000)


def parent_summary(
    manifests: dict[str, Manifest],
    evals: dict[int, dict[str, Any]],
    planned_device_hours: float | None,
    run_instances: Collection[str] | None = None,
    reused_keys: Collection[str] = (),
) -> list[tuple[str, float, int]]:
    """The parent's summary metrics as (name, value, step), from the built artifacts of the run (pure):
    manifests by node instance; evals: eval.json by phase index; reused_keys: the artifacts another run
    built, which this one reuses (mlflow_track.REUSED_TAG).
    - heldout/<source>/<loss|bits_per_byte>: the latest evaluated phase's (step = its phase index; the
      same names as the eval_phase children, so MLflow compares them across runs);
    - train/tokens: tokens trained (the furthest phase built) by the spec's own run: `run_instances`, the
      train_phase instances that are not a ladder rung's or a branch's (None: every train_phase);
    - run/wall_seconds: from the first start to the last end of the builds this run made itself (the parent's
      span; a variant's run counts from its own first build, not from the builds it reuses);
    - train/device_hours: measured, each train_phase's wall seconds x its processes / 3600 (core-hours on
      a CPU run: tag runlib.accelerator says which), rungs and branches included; plan/device_hours: the
      plan's estimate of the same stages beside it."""
    points: list[tuple[str, float, int]] = []
    if evals:
        phase = max(evals)
        for source, values in (evals[phase].get("heldout") or {}).items():
            for k in ("loss", "bits_per_byte"):
                if isinstance(values, dict) and is_number(values.get(k)):
                    points.append((metric_name("heldout", source, k), float(values[k]), phase))
    trains = [m for m in manifests.values() if m.stage == "train_phase"]
    own = [
        m for i, m in manifests.items() if m.stage == "train_phase" and (run_instances is None or i in run_instances)
    ]
    tokens = [t for m in own if is_number(t := m.counts.get("tokens"))]
    if tokens:
        points.append(("train/tokens", float(max(tokens)), 0))
    span = build_span_ms(own_manifests(manifests, reused_keys).values())
    if span is not None:
        points.append(("run/wall_seconds", (span[1] - span[0]) / 1000.0, 0))
    device_seconds = [
        m.timings.wall_seconds * m.counts.get("processes", 1)
        for m in trains
        if is_number(m.timings.wall_seconds) and is_number(m.counts.get("processes", 1))
    ]
    if device_seconds:
        points.append(("train/device_hours", sum(device_seconds) / 3600.0, 0))
    if planned_device_hours is not None and is_number(planned_device_hours):
        points.append(("plan/device_hours", float(planned_device_hours), 0))
    return points


def read_json_object(path: Path) -> dict[str, Any] | None:
    """The JSON object in the file at path; None when it is unreadable, not JSON or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
