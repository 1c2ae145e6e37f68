"""`runlib track --resync [SPEC]`: record a spec's built artifacts in MLflow from the manifests on disk.

Every artifact of the spec that is built (its manifest reads) gets a child run of the spec's parent run
(runlib.track.mlflow_track: counts, the config as params, metrics.jsonl / eval.json as metric histories,
the manifest and the tracked files as MLflow artifacts); the parent is created when missing. Artifacts
already recorded (a child with their key) are left alone, so a resync can be repeated, and after
`rm mlflow.db` it brings every child back. The parent gets the run's summary metrics (final held-out loss
per source, tokens, wall time, device-hours measured and planned: mlflow_track.parent_summary) and spans
the builds of the run's artifacts (a new parent starts at the first build, each resync moves its end to
the last); only changed values are logged, so a repeated resync logs nothing. A run that reuses artifacts
another parent of the experiment recorded first (a variant sharing the first phases: each child says so in
its runlib.reused tag) spans only its own builds, so its wall time counts from its own start.

This is also how a workflow run is tracked: stage jobs never import mlflow; the track rule
(rules/track.smk) runs `runlib track --resync --stamp FILE` after each training phase (its evaluation
included) and before the report, so MLflow shows a phase's curves while the next one trains, and a
thousand curation shards cost one MLflow process, not a thousand. One process pays for mlflow's import
once, finds the parent once and lists its recorded children with one paged search; only the artifacts
not yet recorded are logged (each under its per-key lock, re-checked there). With --stamp, a tracking
failure is a warning, never a failed workflow: the next track step, or `runlib track --resync`, retries.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import sys
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from runlib.errors import UserError
from runlib.graph.build import StageGraph, build_graph
from runlib.graph.registry import STAGES
from runlib.graph.train_plans import node_device_hours, train_plans
from runlib.spec import load_spec
from runlib.spec.models import RunSpec
from runlib.store.manifest import Manifest, find_manifest
from runlib.store.settings import tracking_uri, work_dir
from runlib.track import mlflow_track
from runlib.track.metrics import build_span_ms, own_manifests, read_json_object
from runlib.util.atomic import write_text_atomic
from runlib.util.deadline import deadline

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

# A stalled MLflow server (it answers /health, not the API) held `runlib track` 7+ minutes: MLflow's
# REST client waits MLFLOW_HTTP_REQUEST_TIMEOUT (default 120 s) per request and retries
# MLFLOW_HTTP_REQUEST_MAX_RETRIES (default 7) times with backoff (mlflow/environment_variables.py,
# mlflow/utils/rest_utils.py). The tracking process sets both lower unless the user has set them, and
# the whole resync runs under TRACK_DEADLINE_S (RUNLIB_TRACK_DEADLINE_S overrides): past it, the run
# goes on untracked and the next track step retries.
HTTP_REQUEST_TIMEOUT_S = 20
HTTP_REQUEST_MAX_RETRIES = 2
TRACK_DEADLINE_S = 300.0


class TrackDeadline(BaseException):
    """The resync ran past its deadline. A BaseException, so that the per-artifact `except Exception`
    handlers of resync() do not swallow it and go on to the next MLflow call."""


def bound_mlflow_requests(environ: dict[str, str] | None = None) -> None:
    """MLflow's HTTP timeout and retries for this process, unless the user set them (before mlflow is used)."""
    env = os.environ if environ is None else environ
    env.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(HTTP_REQUEST_TIMEOUT_S))
    env.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", str(HTTP_REQUEST_MAX_RETRIES))


def track_deadline_s() -> float:
    """The resync's deadline in seconds: RUNLIB_TRACK_DEADLINE_S, else TRACK_DEADLINE_S."""
    try:
        value = float(os.environ.get("RUNLIB_TRACK_DEADLINE_S", TRACK_DEADLINE_S))
    except ValueError:
        raise UserError("RUNLIB_TRACK_DEADLINE_S: give seconds, e.g. RUNLIB_TRACK_DEADLINE_S=300") from None
    return value if value > 0 else TRACK_DEADLINE_S


@contextmanager
def one_tracker() -> Iterator[None]:
    """Hold the work directory's tracking lock (an exclusive flock on <work>/locks/track.lock) for the block.

    The track jobs of a workflow run beside each other and beside training (rules/track.smk gives them no
    core), and two MLflow writers on one SQLite store fail with "database is locked" once SQLite's busy
    timeout passes (sqlite3.connect's 5 s default): one failed a track step of the data DAG test on a
    loaded machine. Waiting here instead keeps the writers in turn; the wait counts against the deadline."""
    path = work_dir() / "locks" / "track.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # interrupted by the deadline's SIGALRM (TrackDeadline)
        yield
    finally:
        os.close(fd)  # releases the lock


@dataclass(frozen=True)
class Resynced:
    instance: str
    status: str  # "logged" | "recorded" (already in MLflow) | "not built" | "FAILED: <why>"


def resync(spec_path: str | Path) -> list[Resynced]:
    """Record every built artifact of the spec at spec_path in MLflow (see the module docstring)."""
    spec = load_spec(spec_path).spec
    graph = build_graph(spec)
    built: dict[str, Manifest | UserError | None] = {}  # node instance -> its manifest, or the UserError reading it
    for node in graph.nodes:
        try:
            built[node.instance] = find_manifest(node.dir)
        except UserError as exc:
            built[node.instance] = exc
    manifests = {name: m for name, m in built.items() if m is not None and not isinstance(m, UserError)}
    uri = tracking_uri()
    try:
        mlflow_track._probe(uri)
        client = mlflow_track._client()
        experiment_id = mlflow_track._experiment_id(client, mlflow_track.experiment_name(spec))
        # a new parent starts at the first build of this run's own artifacts: not at the builds it reuses
        # from another run of the experiment (a variant sharing the first phases)
        others = mlflow_track.keys_recorded_elsewhere(client, experiment_id, None)
        span = build_span_ms(own_manifests(manifests, others).values())
        parent = mlflow_track._parent(spec, spec_path, start_ms=span[0] if span else None)
        recorded = mlflow_track.recorded_children(*parent)
        elsewhere = mlflow_track.keys_recorded_elsewhere(client, experiment_id, parent[2])
    except Exception as exc:
        message = " ".join(str(exc).split())[:300]
        raise UserError(
            f"runlib track --resync: MLflow tracking at {uri} failed ({type(exc).__name__}: {message})"
        ) from None
    out = []
    for node in graph.nodes:
        manifest = built[node.instance]
        if isinstance(manifest, UserError):
            out.append(Resynced(node.instance, f"FAILED: {manifest}"))
            continue
        if manifest is None:
            out.append(Resynced(node.instance, "not built"))
            continue
        if node.key in recorded:
            out.append(Resynced(node.instance, "recorded"))
            continue
        kind = STAGES[node.stage]
        if not kind.tracked:
            continue
        files = [node.dir / f for f in kind.tracked_files if (node.dir / f).exists()]
        try:
            _, created = mlflow_track._log_stage(
                spec, spec_path, node, manifest, files, parent=parent, elsewhere=elsewhere
            )
        except Exception as exc:
            message = " ".join(str(exc).split())[:300]
            out.append(Resynced(node.instance, f"FAILED: {type(exc).__name__}: {message}"))
            continue
        if created:
            recorded[node.key] = node.key in elsewhere
        out.append(Resynced(node.instance, "logged" if created else "recorded"))
    try:
        reused = {key for key, is_reused in recorded.items() if is_reused}
        _update_parent(spec, graph, manifests, parent, reused)
    except Exception as exc:
        message = " ".join(str(exc).split())[:300]
        out.append(Resynced("parent summary", f"FAILED: {type(exc).__name__}: {message}"))
    return out


def _update_parent(
    spec: RunSpec,
    graph: StageGraph,
    manifests: dict[str, Manifest],
    parent: tuple[MlflowClient, str, str],
    reused: set[str],
) -> int:
    """The parent's summary metrics and end time (mlflow_track.update_parent) from the built artifacts;
    `reused`: the keys of those another run built (their children's REUSED_TAG)."""
    evals = {}
    for node in graph.of("eval_phase"):
        if "rung" in node.params or "branch" in node.params:  # a ladder rung's or a branch's is not the run's
            continue
        data = read_json_object(node.dir / "eval.json") if node.instance in manifests else None
        if data is not None:
            evals[int(node.params.get("phase", 0))] = data
    client, _, parent_id = parent
    trains = graph.of("train_phase")
    plans = train_plans(spec)
    planned = sum(node_device_hours(n, plans) for n in trains)  # rungs and branches cost hours too
    own = {n.instance for n in trains if "rung" not in n.params and "branch" not in n.params}
    return mlflow_track.update_parent(client, parent_id, manifests, evals, planned, own, reused)


def retry_marker(stamp: str | Path) -> Path:
    """Written beside a track stamp when tracking failed: rules/track.smk makes it an input of the track
    job, newer than the stamp, so the next `snakemake` tracks again (a failed track once left a stamp
    that Snakemake took as done: never re-tracked). Kept, older than the stamp, when a track succeeds: Snakemake
    records a job's set of inputs, so a marker that came and went would change that set and rerun the track
    job on the run after the retry ("Set of input files has changed since last execution")."""
    return Path(f"{stamp}.retry")


def damaged_store(uri: str) -> str | None:
    """What SQLite says is wrong with the store file of a `sqlite:///` tracking URI (`PRAGMA quick_check`,
    read-only), or None: not SQLite, no file yet, sound, or only busy (a lock is not damage)."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri[len("sqlite:///") :]
    if not os.path.isfile(path):
        return None
    try:
        con = sqlite3.connect(f"file:{urllib.parse.quote(path)}?mode=ro", uri=True, timeout=5)
        try:
            row = con.execute("PRAGMA quick_check").fetchone()
        finally:
            con.close()
    except sqlite3.DatabaseError as exc:
        return None if "locked" in str(exc) or "busy" in str(exc) else str(exc)
    return None if row and row[0] == "ok" else str(row[0] if row else "no answer")


def _store_hint(uri: str, spec_path: str | Path) -> str:
    problem = damaged_store(uri)
    if problem is None:
        return ""
    path = uri[len("sqlite:///") :]
    return (
        f"\n  the MLflow store {path} is damaged (SQLite: {problem[:120]}): move it aside "
        f"(mv {path} {path}.damaged) and run `runlib track --resync {spec_path}`: every record is rebuilt "
        "from the artifacts' manifests"
    )


def _untracked(stamp: str | Path, message: str) -> int:
    """The track rule's end when tracking failed: a warning, the stamp, and the retry marker."""
    print(
        f"runlib: warning: {message}; the run goes on untracked (the next track step retries; "
        "retry: runlib track --resync)",
        file=sys.stderr,
    )
    write_text_atomic(Path(stamp), f"not recorded: {message}\n")
    marker = retry_marker(stamp)
    write_text_atomic(marker, message + "\n")
    after = Path(stamp).stat().st_mtime_ns + 1_000_000_000  # newer than the stamp on any timestamp granularity
    os.utime(marker, ns=(after, after))
    return 0


def main_resync(spec_path: str | Path, stamp: str | Path | None = None) -> int:
    """Print one line per stage instance and a summary; 2 when any built artifact could not be recorded.

    With `stamp` (the workflow's track rule): a failure is a warning on stderr and the exit status 0, the
    stamp file is written either way (its text says what was recorded), and after a failure its retry
    marker too (retry_marker), so that the next workflow run tracks again. A damaged SQLite store is named,
    with the fix (move it aside, resync)."""
    started = time.monotonic()
    bound_mlflow_requests()
    limit_s = track_deadline_s()
    try:
        with deadline(limit_s, TrackDeadline), one_tracker():
            rows = resync(spec_path)
    except TrackDeadline:
        exc = UserError(
            f"runlib track --resync: MLflow tracking at {tracking_uri()} did not finish within {limit_s:.0f} s "
            "(a stalled server or a locked store; RUNLIB_TRACK_DEADLINE_S sets the limit)"
        )
        if stamp is None:
            raise exc from None
        return _untracked(stamp, str(exc))
    except UserError as exc:
        message = str(exc) + _store_hint(tracking_uri(), spec_path)
        if stamp is None:
            raise UserError(message) from None
        return _untracked(stamp, message)
    for row in rows:
        print(f"  {row.instance:<32} {row.status}")
    failed = sum(row.status.startswith("FAILED") for row in rows)
    logged = sum(row.status == "logged" for row in rows)
    recorded = sum(row.status == "recorded" for row in rows)
    summary = (
        f"{logged} logged, {recorded} already recorded, {sum(r.status == 'not built' for r in rows)} not built, "
        f"{failed} failed; MLflow at {tracking_uri()} ({time.monotonic() - started:.1f} s)"
    )
    print(summary)
    if failed:
        what = f"{failed} built artifact(s) not recorded (listed above)" + _store_hint(tracking_uri(), spec_path)
        if stamp is not None:
            return _untracked(stamp, what)
        print(f"runlib track --resync: {what}", file=sys.stderr)
        return 2
    if stamp is not None:
        write_text_atomic(Path(stamp), summary + "\n")
        marker = retry_marker(stamp)
        if marker.exists():
            before = Path(stamp).stat().st_mtime_ns - 1_000_000_000  # older than the stamp: nothing to retry
            os.utime(marker, ns=(before, before))
    return 0
