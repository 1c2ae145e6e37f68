"""`runlib plan SPEC`: every stage with its key, whether it is built, and for a stage built before
under another key, which spec fields changed. Reads manifests only; no torch, no mlflow."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runlib.workflow.artifacts import MANIFEST
from runlib.workflow.graph import StageGraph, StageNode


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out or {prefix: {}}
    return {prefix: obj}


def previous_build(node: StageNode) -> dict[str, Any] | None:
    """The most recently built manifest of the same stage instance under another key."""
    stage_dir = node.dir.parent
    if not stage_dir.is_dir():
        return None
    best, best_mtime = None, -1.0
    for path in stage_dir.glob(f"*/{MANIFEST}"):
        if path.parent.name == node.key:
            continue
        mtime = path.stat().st_mtime
        if mtime > best_mtime:
            manifest = json.loads(path.read_text())
            if manifest.get("instance") == node.instance:
                best, best_mtime = manifest, mtime
    return best


def changed_fields(node: StageNode, before: dict[str, Any]) -> list[str]:
    now, then = flatten(node.projection), flatten(before.get("projection", {}))
    fields = sorted(k for k in now.keys() | then.keys() if now.get(k) != then.get(k))
    inputs_now, inputs_then = node.inputs, before.get("inputs", {})
    fields += [
        f"input {role}"
        for role in sorted(inputs_now.keys() | inputs_then.keys())
        if inputs_now.get(role) != inputs_then.get(role)
    ]
    return fields


def plan_rows(graph: StageGraph) -> list[dict[str, Any]]:
    rows = []
    for node in graph.nodes:
        built = (node.dir / MANIFEST).exists()
        row = {"stage": node.stage, "instance": node.instance, "key": node.key, "built": built, "changed": None}
        if not built:
            before = previous_build(node)
            if before is not None:
                row["changed"] = changed_fields(node, before)
        rows.append(row)
    return rows


def render(rows: list[dict[str, Any]], spec_file: str | Path) -> str:
    lines = [f"stages of {spec_file}", f"  {'stage':<30} {'key':<16}  status"]
    for r in rows:
        if r["built"]:
            status = "built"
        elif r["changed"] is not None:
            status = "to build; changed since last built: " + (", ".join(r["changed"]) or "stage code version")
        else:
            status = "to build"
        lines.append(f"  {r['instance'][:30]:<30} {r['key']}  {status}")
    built = sum(r["built"] for r in rows)
    lines.append(f"{built} of {len(rows)} stages built")
    return "\n".join(lines) + "\n"
