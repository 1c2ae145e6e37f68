"""The manifest of an artifact (`artifacts/<stage>/<key>/manifest.json`): a typed model, one reader, one writer.

Every part of runlib that looks at a built artifact (the stage runner, `runlib plan`, the run report,
MLflow tracking, the stages that read their inputs' manifests) goes through `read_manifest`, so a
manifest that is not valid JSON or does not match the model is one clear error naming the file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from runlib.errors import UserError

MANIFEST = "manifest.json"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class Timings(_Model):
    started_at: float
    """Unix time the build started."""

    wall_seconds: float
    """Seconds the build took (the stage function, hashing the outputs included)."""


class OutputFile(_Model):
    sha256: str
    """SHA-256 of the file's bytes."""

    bytes: int
    """Size of the file."""


class Manifest(_Model):
    """What a built artifact is: which stage instance built it from which config and inputs, and what it holds."""

    stage: str
    """Stage kind (= rule name = artifact folder), e.g. curate_shard."""

    instance: str
    """Human name of the stage instance, e.g. 'curate_shard code/0'."""

    key: str
    """The artifact's key (its folder name): a hash of stage, code version, config and input keys."""

    config: dict[str, Any]
    """The stage config the artifact was built from (StageConfig.model_dump(mode='json'))."""

    inputs: dict[str, str]
    """Input role -> the input artifact's key."""

    counts: dict[str, Any]
    """The stage's headline numbers (documents, tokens, losses)."""

    details: dict[str, Any]
    """Everything else the stage returned about what it wrote."""

    timings: Timings
    """When and how long."""

    libraries: dict[str, str]
    """Versions of Python, runlib and the libraries the build loaded."""

    outputs: dict[str, OutputFile]
    """Every output file (relative path) with its hash and size; the manifest itself excluded."""

    content_hash: str
    """SHA-256 over the sorted (path, sha256) list of the outputs: equal for byte-equal rebuilds."""


def manifest_path(directory: str | Path) -> Path:
    return Path(directory) / MANIFEST


def read_manifest(directory: str | Path) -> Manifest:
    """The manifest of the artifact in `directory`; UserError naming the file if it is missing or invalid."""
    path = manifest_path(directory)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: no manifest (the artifact is not built)") from None
    except (OSError, ValueError) as exc:
        raise UserError(
            f"{path}: not a readable JSON manifest ({exc}); delete the artifact folder to rebuild it"
        ) from None
    try:
        return Manifest.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or '(top level)'}: {e['msg']}" for e in exc.errors(include_url=False)
        )
        raise UserError(
            f"{path}: not a valid manifest ({problems}); it was written by another runlib version or edited: "
            "delete the artifact folder to rebuild it"
        ) from None


def find_manifest(directory: str | Path) -> Manifest | None:
    """read_manifest, or None when the artifact is not built (no manifest file)."""
    if not manifest_path(directory).exists():
        return None
    return read_manifest(directory)


def write_manifest(directory: str | Path, manifest: Manifest) -> Path:
    """Write the manifest into `directory` atomically (sorted keys, two-space indent); returns its path."""
    path = manifest_path(directory)
    text = json.dumps(manifest.model_dump(mode="json"), indent=2, sort_keys=True, ensure_ascii=False, default=str)
    tmp = path.with_name(f".{MANIFEST}.{os.getpid()}.tmp")  # plain permissions (mkstemp's are private)
    tmp.write_text(text + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path
