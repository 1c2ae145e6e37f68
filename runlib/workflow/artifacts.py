"""Content-addressed artifacts: `artifacts/<stage>/<key>/` with a manifest.json, written atomically.

A stage builds into a temporary sibling directory; the manifest (runlib.workflow.manifest.Manifest)
is written last and the directory renamed into place, so a killed job never leaves a directory that
looks finished (one with a manifest). The manifest's content hash covers the output files only (not
timings), so a rebuild of an unchanged key can be compared byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from runlib import __version__
from runlib.workflow.graph import StageNode
from runlib.workflow.manifest import MANIFEST, Manifest, find_manifest, read_manifest, write_manifest

__all__ = ["MANIFEST", "Manifest", "build_artifact", "find_manifest", "is_built", "read_manifest"]
TRACKED_LIBRARIES = (
    "pydantic",
    "tokenizers",
    "numpy",
    "pyarrow",
    "pandera",
    "torch",
    "accelerate",
    "mlflow",
    "snakemake",
)


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def output_hashes(directory: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST):
        out[path.relative_to(directory).as_posix()] = {"sha256": file_sha256(path), "bytes": path.stat().st_size}
    return out


def content_hash(outputs: dict[str, dict[str, Any]]) -> str:
    listing = "\n".join(f"{name} {info['sha256']}" for name, info in sorted(outputs.items()))
    return hashlib.sha256(listing.encode()).hexdigest()


def library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version(), "runlib": __version__}
    for name in TRACKED_LIBRARIES:
        if name in sys.modules or name in ("tokenizers", "numpy"):
            try:
                versions[name] = metadata.version(name)
            except metadata.PackageNotFoundError:
                pass
    return versions


def is_built(node: StageNode) -> bool:
    return node.manifest_path.exists()


def build_artifact(node: StageNode, build: Callable[[Path], dict[str, Any]]) -> Manifest:
    """Run `build(tmp_dir)` and commit its files as node's artifact; returns the manifest.

    `build` writes its files into tmp_dir and returns what the manifest should record about them
    (at least "counts"; anything else goes under "details")."""
    final = node.dir
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".tmp-{node.key}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    started = time.time()
    try:
        result = json.loads(json.dumps(build(tmp), default=str))  # as the manifest file will hold it
        outputs = output_hashes(tmp)
        manifest = Manifest.model_validate(
            {
                "stage": node.stage,
                "instance": node.instance,
                "key": node.key,
                "config": node.config.model_dump(mode="json"),
                "inputs": node.inputs,
                "counts": result.get("counts", {}),
                "details": {k: v for k, v in result.items() if k != "counts"},
                "timings": {"started_at": started, "wall_seconds": round(time.time() - started, 3)},
                "libraries": library_versions(),
                "outputs": outputs,
                "content_hash": content_hash(outputs),
            }
        )
        write_manifest(tmp, manifest)
        if (final / MANIFEST).exists():  # built meanwhile by another process: keep that one
            shutil.rmtree(tmp)
            return read_manifest(final)
        if final.exists():
            shutil.rmtree(final)  # an empty directory Snakemake made for the output, or leftovers
        os.replace(tmp, final)
        return manifest
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
