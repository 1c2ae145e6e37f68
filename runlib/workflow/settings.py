"""Machine-local settings: where this machine keeps things. Never part of a stage key."""

from __future__ import annotations

import os
from pathlib import Path


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
    """Written after a stage's artifact is committed; what downstream Snakemake rules depend on."""
    return work_dir() / "done" / stage / key
