"""MLflow tracking of a spec run: one parent run per spec, one child run per stage artifact.

The tracking URI is machine-local (runlib.store.settings.tracking_uri(): MLFLOW_TRACKING_URI, or
a SQLite file in the work directory). Stage jobs do not call this module (importing mlflow costs a
stage job 1.5 CPU-s, logging 1.1 s more): the workflow's track rule records every built artifact of the
spec in one process (runlib.track.resync), after each training phase and before the report. Tracking
never fails a stage: when MLflow is unreachable `log_stage` prints one warning line and returns None,
and the track rule warns and goes on. mlflow is imported only inside the functions that talk to it.

The parent run of a spec is found by its tags (runlib.kind=parent, runlib.spec_key, runlib.spec_name)
or created, under an fcntl lock in <work>/locks, so stage jobs that start together share one parent.
Identifying tags are set last (runlib.kind), so a run left half-logged by a killed job is never
taken for a finished one.

A child is found by its parent and its artifact's key (tag runlib.key), so recording a stage is
idempotent: a rerun, a second process that waited for another's build, or `runlib track --resync`
(runlib.track.resync: the store rebuilt from the manifests) logs nothing for a key already recorded.

A train_phase run also gets its metrics.jsonl as metric histories (step = the optimizer step) and
its checkpoint's location (tag runlib.checkpoint, param checkpoint); an eval_phase run gets its
eval.json as metrics at step = the phase index. Metric names follow the one scheme of runlib.track's
docstring (one name per quantity); runlib.track.metrics computes them, without mlflow. `update_parent`
gives the parent the run's summary metrics and the span of its artifacts' builds; `log_report` attaches
the run report to the parent.
"""

from __future__ import annotations

import fcntl
import hashlib
import math
import re
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from runlib.audit import AuditResult, audit
from runlib.audit.render import json_view, text
from runlib.graph.measured import audit_measured, measured
from runlib.spec import load_spec
from runlib.spec.models import RunSpec
from runlib.store.keys import canonical, spec_key
from runlib.store.manifest import Manifest
from runlib.store.node import StageNode
from runlib.store.settings import tracking_uri, work_dir
from runlib.track.flatten import clean_key, flatten
from runlib.track.metrics import (
    build_span_ms,
    eval_metrics,
    is_number,
    is_value,
    own_manifests,
    parent_summary,
    read_json_object,
    stage_metrics,
    train_history,
)
from runlib.util.jsonl import read_jsonl

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

T = TypeVar("T")

LOCK_NAME = "mlflow-parent.lock"
# on a child: "true" when, as it was recorded, another parent of the experiment had a child for its artifact
# key: the artifact was built for another run and reused by this one (a variant that shares the first
# phases), so the build is not this run's and its time is not in this run's span (parent_own_manifests)
REUSED_TAG = "runlib.reused"
LOCKED_ATTEMPTS = 6  # sqlite "database is locked": retry with backoff 0.5, 1, 2, 4, 8 s
PROBE_TIMEOUT_S = 5.0


# ---------------------------------------------------------------------------------------- helpers


def experiment_name(spec: RunSpec) -> str:
    return spec.tracking.experiment or spec.name


def parent_run_name(spec: RunSpec) -> str:
    return f"{spec.name}-{spec_key(spec)}"


@contextmanager
def _file_lock(name: str = LOCK_NAME) -> Iterator[None]:
    directory = work_dir() / "locks"
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / name, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _retry(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call fn, retrying while SQLite answers "database is locked" (concurrent stage jobs)."""
    for attempt in range(LOCKED_ATTEMPTS):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            if "database is locked" not in str(exc) or attempt == LOCKED_ATTEMPTS - 1:
                raise
            time.sleep(0.5 * 2**attempt)
    raise AssertionError("unreachable")


def _client() -> MlflowClient:
    from mlflow.tracking import MlflowClient

    return _retry(MlflowClient, tracking_uri=tracking_uri())


def _probe(uri: str) -> None:
    """Fail fast when an HTTP tracking server does not answer at all (MLflow's own retries take minutes)."""
    if not uri.startswith(("http://", "https://")):
        return
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=PROBE_TIMEOUT_S):
            pass
    except urllib.error.HTTPError:
        return  # it answered (an auth proxy, a path prefix): let MLflow's client have its say
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ConnectionError(f"no MLflow server answers at {uri} ({reason})") from None


def _chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _log_params(client: MlflowClient, run_id: str, params: dict[str, str]) -> None:
    from mlflow.entities import Param
    from mlflow.utils.validation import MAX_PARAMS_TAGS_PER_BATCH

    entries = [Param(k, v) for k, v in params.items()]
    for chunk in _chunks(entries, MAX_PARAMS_TAGS_PER_BATCH):
        _retry(client.log_batch, run_id, params=list(chunk))


def _log_metric_points(
    client: MlflowClient, run_id: str, points: Sequence[tuple[str, float, int]], timestamp_ms: int
) -> None:
    """Log (name, value, step) points, at most MAX_METRICS_PER_BATCH (1000) per log_batch call."""
    from mlflow.entities import Metric
    from mlflow.utils.validation import MAX_METRICS_PER_BATCH

    entries = [Metric(k, v, timestamp_ms, step) for k, v, step in points]
    for chunk in _chunks(entries, MAX_METRICS_PER_BATCH):
        _retry(client.log_batch, run_id, metrics=list(chunk))


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")


def _search_one(client: MlflowClient, experiment_id: str, tags: dict[str, str]) -> str | None:
    filter_string = " and ".join(f"tags.`{k}` = '{_quote(v)}'" for k, v in tags.items())
    runs = _retry(
        client.search_runs,
        [experiment_id],
        filter_string=filter_string,
        max_results=1,
        order_by=["attributes.start_time ASC"],
    )
    return runs[0].info.run_id if runs else None


def _artifact_location(name: str) -> str | None:
    """For a SQLite store, artifacts go under <work>/mlartifacts (not ./mlruns at whatever the cwd is)."""
    if not tracking_uri().startswith("sqlite:"):
        return None  # a server decides (its --artifacts-destination); other stores use their default
    folder = re.sub(r"[^\w.-]", "_", name)
    if not folder.strip("."):  # "." or "..": not a folder of its own under mlartifacts
        folder = folder.replace(".", "_")
    return (work_dir() / "mlartifacts" / folder).resolve().as_uri()


def _experiment_id(client: MlflowClient, name: str) -> str:
    from mlflow.exceptions import MlflowException

    exp = _retry(client.get_experiment_by_name, name)
    if exp is None:
        try:
            return _retry(client.create_experiment, name, artifact_location=_artifact_location(name))
        except MlflowException as exc:  # created meanwhile by another machine sharing the server
            if "RESOURCE_ALREADY_EXISTS" not in str(exc.error_code):
                raise
            exp = _retry(client.get_experiment_by_name, name)
            if exp is None:
                raise RuntimeError(f"MLflow experiment {name!r} was created meanwhile but cannot be read") from exc
    if exp.lifecycle_stage == "deleted":
        raise RuntimeError(
            f"MLflow experiment {name!r} is deleted: restore it (`mlflow experiments restore --experiment-id "
            f"{exp.experiment_id}`), delete it for good (`mlflow gc`), or set tracking.experiment in the spec"
        )
    return exp.experiment_id


# ------------------------------------------------------------------------------------- the parent


def _audit(spec: RunSpec, spec_path: str | Path | None) -> AuditResult:
    """The audit the parent records: `runlib audit`'s (audit_loaded with the measured token counts of the
    sources tokenized here), with line numbers when spec_path is this spec's file."""
    if spec_path and Path(spec_path).is_file():
        try:
            loaded = load_spec(spec_path)
        except Exception:
            loaded = None
        if loaded is not None and loaded.spec == spec:  # line numbers only when the file is this spec
            return audit_measured(loaded)
    tokens, prediction = measured(spec)
    return audit(
        spec, None, str(spec_path) if spec_path else "<spec>", measured_tokens=tokens, ladder_prediction=prediction
    )


def _create_parent(
    client: MlflowClient,
    experiment_id: str,
    spec: RunSpec,
    spec_path: str | Path | None,
    start_ms: int | None = None,
) -> str:
    key = spec_key(spec)
    result = _audit(spec, spec_path)
    tags = {"runlib.spec_key": key, "runlib.spec_name": spec.name, "runlib.accelerator": spec.hardware.accelerator}
    if spec_path:
        tags["runlib.spec_file"] = str(Path(spec_path).resolve())
    run = _retry(client.create_run, experiment_id, start_time=start_ms, run_name=parent_run_name(spec), tags=tags)
    run_id: str = run.info.run_id
    params = flatten(spec.model_dump(mode="json"), "spec.")
    params.update(flatten(json_view.derived(result.plan), "derived."))
    _log_params(client, run_id, params)
    _retry(client.log_text, run_id, text.render(result), "audit/report.txt")
    _retry(client.log_text, run_id, json_view.render(result), "audit/report.json")
    if spec_path and Path(spec_path).is_file():
        _retry(client.log_artifact, run_id, str(spec_path), "spec")
    _retry(client.set_tag, run_id, "runlib.kind", "parent")  # last: marks the parent complete
    # its end: the last artifact's (update_parent moves it as stages are built)
    _retry(client.set_terminated, run_id, "FINISHED", end_time=start_ms)
    return run_id


def _parent(spec: RunSpec, spec_path: str | Path | None, start_ms: int | None = None) -> tuple[MlflowClient, str, str]:
    """(client, experiment id, parent run id); the store is opened under the lock too (a fresh SQLite
    file gets its schema created once, not by two jobs at once). start_ms: a new parent's start time (the
    first build of the run's artifacts: runlib.track.resync passes it), else now."""
    with _file_lock():
        client = _client()
        experiment_id = _experiment_id(client, experiment_name(spec))
        tags = {"runlib.kind": "parent", "runlib.spec_key": spec_key(spec), "runlib.spec_name": spec.name}
        run_id = _search_one(client, experiment_id, tags)
        if run_id is None:
            run_id = _create_parent(client, experiment_id, spec, spec_path, start_ms)
        return client, experiment_id, run_id


def keys_recorded_elsewhere(client: MlflowClient, experiment_id: str, parent_id: str | None) -> set[str]:
    """The artifact keys that a complete child of another parent of the experiment records (one paged search;
    parent_id None: of any parent): artifacts another run built (or reused itself), which this run reuses."""
    keys: set[str] = set()
    token = None
    while True:
        page = _retry(
            client.search_runs, [experiment_id], filter_string="tags.`runlib.kind` = 'stage'", page_token=token
        )
        keys.update(
            r.data.tags["runlib.key"]
            for r in page
            if "runlib.key" in r.data.tags and r.data.tags.get("mlflow.parentRunId") != parent_id
        )
        token = page.token
        if not token:
            return keys


def update_parent(
    client: MlflowClient,
    parent_id: str,
    manifests: dict[str, Manifest],
    evals: dict[int, dict[str, Any]],
    planned_device_hours: float | None,
    run_instances: Collection[str] | None = None,
    reused_keys: Collection[str] = (),
) -> int:
    """Log the parent's summary metrics that changed and move its end time to the last end of its own
    builds; the number of metrics logged (0 when nothing changed: a repeated resync logs nothing)."""
    run = _retry(client.get_run, parent_id)
    current = run.data.metrics
    points = [
        (k, v, step)
        for k, v, step in parent_summary(manifests, evals, planned_device_hours, run_instances, reused_keys)
        if k not in current or current[k] != v
    ]
    span = build_span_ms(own_manifests(manifests, reused_keys).values())
    if points:
        _log_metric_points(client, parent_id, points, span[1] if span else int(time.time() * 1000))
    if span is not None and run.info.end_time != span[1]:
        _retry(client.set_terminated, parent_id, "FINISHED", end_time=max(span[1], run.info.start_time or 0))
    return len(points)


def parent_run(spec: RunSpec, spec_path: str | Path | None) -> str:
    """The id of the spec's MLflow parent run, created (with the spec, the plan and the audit) if missing."""
    return _parent(spec, spec_path)[2]


# ------------------------------------------------------------------------------------- the stages


def parent_identity(spec: RunSpec) -> str:
    """Which parent run a spec's records go to: its store, its experiment and its parent's name (the spec's
    name and key). Names the track rule's stamps (runlib.workflow.snake), so a renamed spec, another
    experiment or another MLFLOW_TRACKING_URI is tracked anew."""
    text = "\n".join((tracking_uri(), experiment_name(spec), parent_run_name(spec)))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def recorded_keys(client: MlflowClient, experiment_id: str, parent_id: str) -> set[str]:
    """The artifact keys the parent has a complete child for (one paged search, not one per artifact)."""
    return set(recorded_children(client, experiment_id, parent_id))


def recorded_children(client: MlflowClient, experiment_id: str, parent_id: str) -> dict[str, bool]:
    """Artifact key -> whether it is reused (REUSED_TAG), for each complete child of the parent (one paged
    search)."""
    filter_string = f"tags.`mlflow.parentRunId` = '{_quote(parent_id)}' and tags.`runlib.kind` = 'stage'"
    keys: dict[str, bool] = {}
    token = None
    while True:
        page = _retry(client.search_runs, [experiment_id], filter_string=filter_string, page_token=token)
        for r in page:
            if "runlib.key" in r.data.tags:
                keys[r.data.tags["runlib.key"]] = r.data.tags.get(REUSED_TAG) == "true"
        token = page.token
        if not token:
            return keys


def manifest_digest(manifest: Manifest) -> str:
    return hashlib.sha256(canonical(manifest.model_dump(mode="json")).encode()).hexdigest()[:16]


def _stage_children(client: MlflowClient, experiment_id: str, parent_id: str, key: str) -> tuple[str | None, list[str]]:
    """(a complete child run of the parent for artifact `key` or None, the ids of incomplete ones: runs a
    killed job left without the runlib.kind tag that is set last)."""
    filter_string = f"tags.`mlflow.parentRunId` = '{_quote(parent_id)}' and tags.`runlib.key` = '{_quote(key)}'"
    runs = _retry(
        client.search_runs, [experiment_id], filter_string=filter_string, order_by=["attributes.start_time ASC"]
    )
    complete = [r.info.run_id for r in runs if r.data.tags.get("runlib.kind") == "stage"]
    incomplete = [r.info.run_id for r in runs if r.data.tags.get("runlib.kind") != "stage"]
    return (complete[0] if complete else None), incomplete


def _log_stage(
    spec: RunSpec,
    spec_path: str | Path | None,
    node: StageNode,
    manifest: Manifest,
    artifact_files: Iterable[str | Path],
    parent: tuple[MlflowClient, str, str] | None = None,
    elsewhere: Collection[str] | None = None,
) -> tuple[str, bool]:
    """(the child run's id, whether this call created it). Idempotent: when the spec's parent already has a
    complete child for this artifact key (a rerun that found the artifact built, a second spec or run that
    waited for another's build, `runlib track --resync`), nothing is logged; children a killed job left
    incomplete are deleted and the record is made again. Under a per-key lock, so two processes of this
    machine do not both log the same child. `parent`: _parent's answer, when the caller has it already;
    `elsewhere`: keys_recorded_elsewhere's answer (None: asked here), for the child's REUSED_TAG."""
    client, experiment_id, parent_id = parent or _parent(spec, spec_path)
    with _file_lock(f"mlflow-stage-{node.key}.lock"):
        existing, incomplete = _stage_children(client, experiment_id, parent_id, node.key)
        if existing:
            return existing, False
        for run_id in incomplete:
            _retry(client.delete_run, run_id)
        reused = node.key in (
            elsewhere if elsewhere is not None else _recorded_elsewhere(client, experiment_id, parent_id, node.key)
        )
        return _log_child(client, experiment_id, parent_id, spec, node, manifest, artifact_files, reused), True


def _recorded_elsewhere(client: MlflowClient, experiment_id: str, parent_id: str, key: str) -> set[str]:
    """{key} when another parent of the experiment has a complete child for artifact `key`, else {}."""
    filter_string = f"tags.`runlib.key` = '{_quote(key)}' and tags.`runlib.kind` = 'stage'"
    runs = _retry(client.search_runs, [experiment_id], filter_string=filter_string)
    return {key} if any(r.data.tags.get("mlflow.parentRunId") != parent_id for r in runs) else set()


@dataclass
class ChildRecord:
    """What a stage's child run records: _child_record's answer, which _log_child logs."""

    tags: dict[str, str]
    params: dict[str, str]
    points: list[tuple[str, float, int]]  # (name, value, step): the summary at step 0, then the histories
    files: list[Path]  # artifacts to attach (a missing one is skipped: an optional file the stage did not write)
    start_ms: int | None
    end_ms: int | None


def _child_record(
    parent_id: str,
    spec: RunSpec,
    node: StageNode,
    manifest: Manifest,
    artifact_files: Iterable[str | Path],
    reused: bool,
) -> ChildRecord:
    """The tags, params, metric points, files and span of one artifact's child run (reads only its files)."""
    started, wall = manifest.timings.started_at, manifest.timings.wall_seconds
    start_ms = int(started * 1000) if is_number(started) else None
    end_ms = None
    if start_ms is not None and is_number(wall):
        end_ms = start_ms + int(wall * 1000)
    tags = {
        "mlflow.parentRunId": parent_id,
        "runlib.stage": node.stage,
        "runlib.key": node.key,
        "runlib.content_hash": manifest.content_hash,
        "runlib.spec_key": spec_key(spec),
        "runlib.manifest_digest": manifest_digest(manifest),
        REUSED_TAG: "true" if reused else "false",
    }
    params = flatten(node.config.model_dump(mode="json"), "config.")
    params.update({clean_key(f"input.{role}"): key for role, key in node.inputs.items()})
    files = [Path(p) for p in artifact_files]
    history: list[tuple[str, float, int]] = []  # metrics with their own steps
    if node.stage == "train_phase":
        history = train_history(read_jsonl(node.dir / "metrics.jsonl"))
        checkpoint = str((node.dir / "final.pt").resolve())
        tags["runlib.checkpoint"] = checkpoint
        params["checkpoint"] = checkpoint
    elif node.stage == "eval_phase":
        eval_json = node.dir / "eval.json"
        data = read_json_object(eval_json)
        if data is not None:
            index = data.get("phase_index", node.params.get("phase", 0))
            step = int(index) if is_value(index) and math.isfinite(index) else 0
            history = [(k, v, step) for k, v in eval_metrics(data).items()]
            if eval_json.resolve() not in {p.resolve() for p in files}:
                files.append(eval_json)
    # a count also logged as a history (tokens, tokens_per_s) would add a stray point at step 0
    summary = {k: v for k, v in stage_metrics(manifest).items() if k not in {name for name, _, _ in history}}
    points = [(k, v, 0) for k, v in summary.items()] + history
    return ChildRecord(tags, params, points, files, start_ms, end_ms)


def _log_child(
    client: MlflowClient,
    experiment_id: str,
    parent_id: str,
    spec: RunSpec,
    node: StageNode,
    manifest: Manifest,
    artifact_files: Iterable[str | Path],
    reused: bool = False,
) -> str:
    """Create the child run of one artifact and log its record (_child_record); the run's id. The
    identifying tag runlib.kind is set last; a failure marks the run FAILED and is raised."""
    record = _child_record(parent_id, spec, node, manifest, artifact_files, reused)
    run = _retry(client.create_run, experiment_id, start_time=record.start_ms, run_name=node.instance, tags=record.tags)
    run_id: str = run.info.run_id
    try:
        _log_params(client, run_id, record.params)
        _log_metric_points(client, run_id, record.points, record.end_ms or int(time.time() * 1000))
        _retry(client.log_dict, run_id, manifest.model_dump(mode="json"), "manifest.json")
        for path in record.files:
            if not path.exists():  # an optional file the stage did not write (spikes.json)
                continue
            if path.is_dir():
                _retry(client.log_artifacts, run_id, str(path), path.name)
            else:
                _retry(client.log_artifact, run_id, str(path))
        _retry(client.set_tag, run_id, "runlib.kind", "stage")  # last: marks the record complete
        _retry(client.set_terminated, run_id, "FINISHED", end_time=record.end_ms)
    except BaseException:
        try:
            client.set_terminated(run_id, "FAILED")
        except Exception:
            pass
        raise
    return run_id


def log_stage(
    spec: RunSpec,
    spec_path: str | Path | None,
    node: StageNode,
    manifest: Manifest,
    artifact_files: Iterable[str | Path] = (),
) -> str | None:
    """Record a built stage as a child run of the spec's parent run; its id, or None when tracking failed.

    Idempotent by artifact key: a parent that has a child for node.key already keeps it (its id is
    returned). A stage that built its artifact must not fail because of tracking: any error becomes one warning
    line on stderr naming the tracking URI.
    """
    uri = tracking_uri()
    try:
        _probe(uri)
        return _log_stage(spec, spec_path, node, manifest, artifact_files)[0]
    except Exception as exc:
        _warn(f"{node.instance} is built but not recorded", uri, exc)
        return None


def _warn(what: str, uri: str, exc: Exception) -> None:
    message = " ".join(str(exc).split())
    if len(message) > 300:
        message = message[:297] + "..."
    print(
        f"runlib: warning: MLflow tracking at {uri} failed; {what} ({type(exc).__name__}: {message})", file=sys.stderr
    )


def log_report(spec: RunSpec, spec_path: str | Path | None, report_dir: str | Path) -> str | None:
    """Log the files of a run report directory as artifacts of the spec's parent run, under report/;
    the parent run's id, or None (one warning line on stderr) when tracking failed."""
    uri = tracking_uri()
    report_dir = Path(report_dir)
    try:
        if not report_dir.is_dir():
            raise FileNotFoundError(f"no report directory {report_dir}")
        _probe(uri)
        client, _, parent_id = _parent(spec, spec_path)
        _retry(client.log_artifacts, parent_id, str(report_dir), "report")
        return parent_id
    except Exception as exc:
        _warn(f"the report {report_dir} is not recorded", uri, exc)
        return None
