"""Machine-local settings: where this machine keeps things. Never part of a stage key."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from runlib.store.command import snakemake_command


def work_dir() -> Path:
    """Artifacts, logs, the MLflow store: RUNLIB_WORK_DIR, default ./work (gitignored)."""
    return Path(os.environ.get("RUNLIB_WORK_DIR", "work"))


def artifacts_dir() -> Path:
    return work_dir() / "artifacts"


def tracking_uri() -> str:
    """MLFLOW_TRACKING_URI, default a SQLite file in the work directory."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    return f"sqlite:///{(work_dir() / 'mlflow.db').resolve()}"


def done_stamp(stage: str, key: str) -> Path:
    """Written (atomically) after a stage's artifact is committed; what downstream Snakemake rules depend
    on (marked ancient). It lies outside the artifact, so whatever Snakemake deletes (--rerun-incomplete,
    a failed job's outputs) is a stamp, never the artifact."""
    return work_dir() / "done" / stage / key


def built_marker(stage: str, key: str) -> Path:
    """The rule's second output, written with the done stamp. When the artifact's folder is deleted,
    loading the Snakefile removes this marker (not the stamp), so Snakemake reruns that one job and no
    job downstream (their input, the stamp, is still there; a missing one would rerun them all)."""
    return work_dir() / "done" / stage / f"{key}.built"


def lock_file(stage: str, key: str) -> Path:
    """The per-artifact build lock (fcntl.flock) that a stage run holds while it builds or stamps it."""
    return work_dir() / "locks" / stage / f"{key}.lock"


def rebuild_hint(stage: str, key: str, spec_path: str | None = None) -> str:
    """The commands that rebuild one artifact: delete its folder and run Snakemake again (which then
    reruns that stage only: runlib.workflow.snake.Workflow.drop_stale_markers)."""
    directory = artifacts_dir() / stage / key
    spec = spec_path or os.environ.get("RUNLIB_SPEC") or "<your spec>"
    return f"rm -r {shlex.quote(str(directory))} && {snakemake_command(spec, cores='all')}"
