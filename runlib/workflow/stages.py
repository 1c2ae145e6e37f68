"""Run one stage instance: find it in the spec's graph by key, check its inputs are built, build its
artifact atomically, record it in MLflow. One function per stage adapts the graph to the stage code,
which receives the node's config and its inputs' artifact directories, never the spec."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from runlib.errors import UserError
from runlib.spec import load_spec
from runlib.workflow.artifacts import build_artifact, is_built
from runlib.workflow.graph import StageGraph, StageNode, build_graph
from runlib.workflow.manifest import Manifest, read_manifest
from runlib.workflow.settings import done_stamp


def input_dirs(graph: StageGraph, node: StageNode) -> dict[str, Path]:
    """Input role -> the input artifact's directory."""
    return {role: n.dir for role, n in graph.input_nodes(node).items()}


def _curate_shard(graph: StageGraph, node: StageNode, out: Path) -> dict[str, Any]:
    from runlib.curate.stage import curate_shard

    return curate_shard(node.config, out, source_name=node.params["source"])


def _curate_source(graph: StageGraph, node: StageNode, out: Path) -> dict[str, Any]:
    from runlib.curate.stage import curate_source

    dirs = input_dirs(graph, node)
    shard_dirs = [dirs[f"shard{i}"] for i in range(len(dirs))]
    return curate_source(node.config, shard_dirs, out, source_name=node.params["source"])


def _train_tokenizer(graph: StageGraph, node: StageNode, out: Path) -> dict[str, Any]:
    from runlib.tokenizer.train import train_tokenizer

    curated = {role.removeprefix("source:"): d for role, d in input_dirs(graph, node).items()}
    return train_tokenizer(node.config, curated, out)


def _tokenize(graph: StageGraph, node: StageNode, out: Path) -> dict[str, Any]:
    from runlib.data.tokenize import tokenize_source

    dirs = input_dirs(graph, node)
    return tokenize_source(node.config, dirs["curated"], dirs["tokenizer"], out)


def _train_phase(graph: StageGraph, node: StageNode, out: Path) -> dict[str, Any]:
    from runlib.train.phase import train_phase

    return train_phase(node.config, input_dirs(graph, node), out, key=node.key)


def _eval_phase(graph: StageGraph, node: StageNode, out: Path) -> dict[str, Any]:
    from runlib.eval.stage import evaluate_phase

    dirs = input_dirs(graph, node)
    token_dirs = {role.removeprefix("tokens:"): d for role, d in dirs.items() if role.startswith("tokens:")}
    return evaluate_phase(node.config, dirs["model"], dirs["tokenizer"], token_dirs, out)


BUILDERS = {
    "curate_shard": _curate_shard,
    "curate_source": _curate_source,
    "train_tokenizer": _train_tokenizer,
    "tokenize": _tokenize,
    "train_phase": _train_phase,
    "eval_phase": _eval_phase,
}
TRACKED_FILES = {
    "train_tokenizer": ["tokenizer.json"],
    "train_phase": ["metrics.jsonl", "spikes.json"],
    "eval_phase": ["eval.json"],
}


def run_stage(stage: str, spec_path: str, key: str, track: bool = True) -> Manifest:
    loaded = load_spec(spec_path)
    graph = build_graph(loaded.spec)
    node = graph.by_key(stage, key)
    missing = [n.instance for n in graph.input_nodes(node).values() if not is_built(n)]
    if missing:
        raise UserError(
            f"{node.instance}: inputs not built yet: {', '.join(missing)} (run snakemake, not the stage alone)"
        )
    stamp = done_stamp(stage, key)
    if is_built(node):
        print(f"{node.instance}: already built at {node.dir}", file=sys.stderr)
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.touch()
        return read_manifest(node.dir)
    manifest = build_artifact(node, lambda tmp: BUILDERS[stage](graph, node, tmp))
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(manifest.content_hash + "\n")
    print(f"{node.instance}: built {node.dir} in {manifest.timings.wall_seconds} s", file=sys.stderr)
    if track:
        from runlib.track.mlflow_track import log_stage

        files = [node.dir / f for f in TRACKED_FILES.get(stage, [])]
        log_stage(loaded.spec, spec_path, node, manifest, files)
    return manifest
