"""`runlib plan SPEC`: every stage with its key, whether it is built, and for a stage built before
under another key, which config fields changed; `--stage INSTANCE` prints one stage's config.
Reads manifests only; no torch, no mlflow."""

from __future__ import annotations

import difflib
from typing import Any

from runlib.errors import UserError
from runlib.workflow.graph import StageGraph, StageNode
from runlib.workflow.keys import STAGE_VERSIONS
from runlib.workflow.manifest import MANIFEST, Manifest, read_manifest


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Leaves of nested dicts and lists by dotted path ('curate.dedup.exact', 'tasks.0.examples');
    an empty dict or list is a leaf of its own."""
    if isinstance(obj, (dict, list)):
        items = obj.items() if isinstance(obj, dict) else enumerate(obj)
        out: dict[str, Any] = {}
        for k, v in items:
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out or {prefix: obj}
    return {prefix: obj}


def previous_build(node: StageNode) -> Manifest | None:
    """The most recently built manifest of the same stage instance under another key (manifests that
    do not read, e.g. from an older runlib, are passed over)."""
    stage_dir = node.dir.parent
    if not stage_dir.is_dir():
        return None
    best, best_mtime = None, -1.0
    for path in stage_dir.glob(f"*/{MANIFEST}"):
        if path.parent.name == node.key:
            continue
        mtime = path.stat().st_mtime
        if mtime > best_mtime:
            try:
                manifest = read_manifest(path.parent)
            except UserError:
                continue
            if manifest.instance == node.instance:
                best, best_mtime = manifest, mtime
    return best


def changed_fields(node: StageNode, before: Manifest) -> list[str]:
    """The config fields (dotted paths) that differ from the earlier build, then 'input <role>' for
    each input whose key differs; empty when only the stage's code version changed."""
    now, then = flatten(node.config.model_dump(mode="json")), flatten(before.config)
    missing = object()
    differ = {k for k in now.keys() | then.keys() if now.get(k, missing) != then.get(k, missing)}
    # an empty list or dict that gained items shows as itself and its new items: name the field once
    fields = sorted(k for k in differ if not any(k.startswith(f"{d}.") for d in differ))
    inputs_now, inputs_then = node.inputs, before.inputs
    fields += [
        f"input {role}"
        for role in sorted(inputs_now.keys() | inputs_then.keys())
        if inputs_now.get(role) != inputs_then.get(role)
    ]
    return fields


def plan_rows(graph: StageGraph) -> list[dict[str, Any]]:
    rows = []
    for node in graph.nodes:
        built = node.manifest_path.exists()
        row = {"stage": node.stage, "instance": node.instance, "key": node.key, "built": built, "changed": None}
        if not built:
            before = previous_build(node)
            if before is not None:
                row["changed"] = changed_fields(node, before)
        rows.append(row)
    return rows


def render(rows: list[dict[str, Any]], spec_file: str) -> str:
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


def find_instance(graph: StageGraph, name: str) -> StageNode:
    """The node named `name`: its instance name ('tokenize code', 'train_phase long') or its key."""
    for node in graph.nodes:
        if name in (node.instance, node.key):
            return node
    names = [n.instance for n in graph.nodes]
    guess = difflib.get_close_matches(name, names, n=3)
    hint = f"; did you mean {' or '.join(map(repr, guess))}?" if guess else f"; the stages: {', '.join(names)}"
    raise UserError(f"--stage {name!r}: no stage instance of that name or key in this spec{hint}")


def stage_view(graph: StageGraph, node: StageNode) -> dict[str, Any]:
    """One stage for `runlib plan --stage`: what its key hashes (config, input keys, code version)."""
    inputs = graph.input_nodes(node)
    return {
        "stage": node.stage,
        "instance": node.instance,
        "key": node.key,
        "version": STAGE_VERSIONS[node.stage],
        "built": node.manifest_path.exists(),
        "inputs": {role: {"instance": n.instance, "key": n.key} for role, n in inputs.items()},
        "config": node.config.model_dump(mode="json"),
    }
