"""`runlib plan SPEC`: every stage with its key, whether it is built, and for a stage built before
under another key, which config fields changed; `--stage INSTANCE` prints one stage's config.
Reads manifests only; no torch, no mlflow."""

from __future__ import annotations

import difflib
from typing import Any

from runlib.curate.memory import SIZED_STAGES, data_job_mem_mb
from runlib.errors import UserError
from runlib.graph.build import StageGraph, is_branch, is_rung
from runlib.graph.registry import STAGES
from runlib.store.manifest import MANIFEST, Manifest, read_manifest
from runlib.store.node import StageNode


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
    """The earlier build of the same stage instance under another key that differs from this node in the
    fewest config fields and inputs (changed_fields), the most recent of those; manifests that do not read,
    e.g. from an older runlib, are passed over. Not simply the most recent: in a work directory that several
    specs (a baseline and its variants) build into, that is often another spec's build, and the change it
    shows (other inputs, other fields) is not the edit that made this key."""
    stage_dir = node.dir.parent
    if not stage_dir.is_dir():
        return None
    best, best_rank = None, (0, 0.0)
    for path in stage_dir.glob(f"*/{MANIFEST}"):
        if path.parent.name == node.key:
            continue
        try:
            mtime = path.stat().st_mtime
            manifest = read_manifest(path.parent)
        except (OSError, UserError):
            continue
        if manifest.instance != node.instance:
            continue
        rank = (-len(changed_fields(node, manifest)), mtime)
        if best is None or rank > best_rank:
            best, best_rank = manifest, rank
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


def branch_parts(graph: StageGraph) -> dict[str, tuple[str, str | None]]:
    """With branches (PhaseSpec.branches): node key -> ('prefix', None) for the stages every branch shares
    (trained once), ('phase', None) for the branched phase as written, ('branch', name) for a branch's
    train_phase and eval_phase. Empty without branches (a ladder rung's nodes are left out)."""
    branches = [n for n in graph.nodes if is_branch(n) and not is_rung(n)]
    if not branches:
        return {}
    last = branches[0].params["phase"]
    parts: dict[str, tuple[str, str | None]] = {}
    for n in graph.nodes:
        if is_rung(n):
            continue
        if is_branch(n):
            parts[n.key] = ("branch", n.params["branch"])
        elif n.stage in ("train_phase", "eval_phase") and n.params.get("phase") == last:
            parts[n.key] = ("phase", None)
        else:
            parts[n.key] = ("prefix", None)
    return parts


def plan_rows(graph: StageGraph) -> list[dict[str, Any]]:
    """One row per stage; with branches, each row also has `part` (prefix, phase or branch: branch_parts)
    and `branch` (the branch's name, else None), the prefix's rows first."""
    parts = branch_parts(graph)
    rows = []
    for node in graph.nodes:
        built = node.manifest_path.exists()
        row: dict[str, Any] = {
            "stage": node.stage,
            "instance": node.instance,
            "key": node.key,
            "built": built,
            "changed": None,
        }
        if node.stage in SIZED_STAGES:
            row["bytes_read"] = graph.bytes_read(node)
            row["input_format"] = graph.input_format(node) if node.stage == "curate_shard" else "jsonl"
        if not built:
            before = previous_build(node)
            if before is not None:
                row["changed"] = changed_fields(node, before)
        if node.key in parts:
            row["part"], row["branch"] = parts[node.key]
        rows.append(row)
    order = {"prefix": 0, "phase": 1, "branch": 2}
    branch_order = {b: i for i, b in enumerate(dict.fromkeys(r["branch"] for r in rows if r.get("branch")))}
    # stable: graph order within a part, and each branch's train and eval rows together
    return sorted(rows, key=lambda r: (order.get(r.get("part", "prefix"), 0), branch_order.get(r.get("branch"), -1)))


def _heading(rows: list[dict[str, Any]], part: str, i: int) -> str | None:
    """The line before the first row of a part of a branched run."""
    if i > 0 and rows[i - 1].get("part") == part:
        return None
    if part == "prefix":
        return "shared prefix (trained once; every branch starts from its last checkpoint):"
    if part == "phase":
        trained = [r["instance"] for r in rows if r.get("part") == "prefix" and r["stage"] == "train_phase"]
        start = f"from the end of {trained[-1]}" if trained else "from initialization"
        return f"branched phase, {start}: the phase as written, then each branch"
    return None


def data_job_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Per data stage that grows with its input: its jobs, the most input one holds, and the memory it asks
    (runlib.curate.memory), from the rows' `bytes_read`."""
    lines = []
    for stage in SIZED_STAGES:
        sized = [
            (r["bytes_read"], r.get("input_format", "jsonl")) for r in rows if r["stage"] == stage and "bytes_read" in r
        ]
        if sized:
            floor = STAGES[stage].resources
            most = max(size for size, _ in sized)
            asked = max(
                (floor.mem_mb if floor is not None else 0, *(data_job_mem_mb(stage, size, fmt) for size, fmt in sized))
            )
            held = f"the largest holding {most / 2**20:,.1f} MB of input files" if most else "no input files (builtin)"
            lines.append(f"{stage}: {len(sized)} jobs, {held}: {asked:,} MB of memory asked (runlib.curate.memory)")
    return lines


def render(rows: list[dict[str, Any]], spec_file: str) -> str:
    lines = [f"stages of {spec_file}", f"  {'stage':<30} {'key':<16}  status"]
    for i, r in enumerate(rows):
        heading = _heading(rows, r["part"], i) if "part" in r else None
        if heading:
            lines.append(heading)
        if r["built"]:
            status = "built"
        elif r["changed"] is not None:
            status = "to build; changed since last built: " + (", ".join(r["changed"]) or "stage code version")
        else:
            status = "to build"
        lines.append(f"  {r['instance'][:30]:<30} {r['key']}  {status}")
    built = sum(r["built"] for r in rows)
    lines.append(f"{built} of {len(rows)} stages built")
    lines += data_job_lines(rows)
    soups = {r["branch"] for r in rows if r.get("part") == "branch" and r["stage"] == "soup_phase"}
    branches = sorted({r["branch"] for r in rows if r.get("part") == "branch"} - soups)
    if branches:
        shared = sum(r.get("part") == "prefix" for r in rows)
        souped = f" and a soup ({', '.join(sorted(soups))})" if soups else ""
        lines.append(f"{len(branches)} branches ({', '.join(branches)}){souped} share {shared} prefix stages")
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
        "version": STAGES[node.stage].version,
        "built": node.manifest_path.exists(),
        "inputs": {role: {"instance": n.instance, "key": n.key} for role, n in inputs.items()},
        "config": node.config.model_dump(mode="json"),
    }
