"""`runlib track --resync [SPEC]`: rebuild a spec's MLflow records from the manifests on disk.

Every artifact of the spec that is built (its manifest reads) gets a child run of the spec's parent run,
exactly as the stage would have logged it (runlib.track.mlflow_track.log_stage: counts, the config as
params, metrics.jsonl / eval.json as metric histories, the manifest and the tracked files as MLflow
artifacts); the parent is created when missing. Artifacts already recorded (a child with their key) are
left alone, so a resync can be repeated, and after `rm mlflow.db` it brings every child back.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

from runlib.errors import UserError


@dataclass(frozen=True)
class Resynced:
    instance: str
    status: str  # "logged" | "recorded" (already in MLflow) | "not built" | "FAILED: <why>"


def resync(spec_path: str | Path) -> list[Resynced]:
    """Record every built artifact of the spec at spec_path in MLflow (see the module docstring)."""
    from runlib.spec import load_spec
    from runlib.track import mlflow_track
    from runlib.workflow.graph import build_graph
    from runlib.workflow.manifest import find_manifest
    from runlib.workflow.settings import tracking_uri
    from runlib.workflow.stages import TRACKED_FILES

    spec = load_spec(spec_path).spec
    graph = build_graph(spec)
    uri = tracking_uri()
    try:
        mlflow_track._probe(uri)
        mlflow_track.parent_run(spec, spec_path)
    except Exception as exc:
        raise UserError(
            f"runlib track --resync: MLflow tracking at {uri} failed ({type(exc).__name__}: {exc})"
        ) from None
    out = []
    for node in graph.nodes:
        try:
            manifest = find_manifest(node.dir)
        except UserError as exc:
            out.append(Resynced(node.instance, f"FAILED: {exc}"))
            continue
        if manifest is None:
            out.append(Resynced(node.instance, "not built"))
            continue
        files = [node.dir / f for f in TRACKED_FILES.get(node.stage, []) if (node.dir / f).exists()]
        try:
            _, created = mlflow_track._log_stage(spec, spec_path, node, manifest, files)
        except Exception as exc:
            message = " ".join(str(exc).split())[:300]
            out.append(Resynced(node.instance, f"FAILED: {type(exc).__name__}: {message}"))
            continue
        out.append(Resynced(node.instance, "logged" if created else "recorded"))
    return out


def main_resync(spec_path: str | Path) -> int:
    """Print one line per stage instance and a summary; 2 when any built artifact could not be recorded."""
    from runlib.workflow.settings import tracking_uri

    started = time.monotonic()
    rows = resync(spec_path)
    for row in rows:
        print(f"  {row.instance:<32} {row.status}")
    failed = sum(row.status.startswith("FAILED") for row in rows)
    logged = sum(row.status == "logged" for row in rows)
    recorded = sum(row.status == "recorded" for row in rows)
    print(
        f"{logged} logged, {recorded} already recorded, {sum(r.status == 'not built' for r in rows)} not built, "
        f"{failed} failed; MLflow at {tracking_uri()} ({time.monotonic() - started:.1f} s)"
    )
    if failed:
        print(f"runlib track --resync: {failed} built artifact(s) not recorded (listed above)", file=sys.stderr)
        return 2
    return 0
