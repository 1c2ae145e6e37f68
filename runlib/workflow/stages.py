"""Run one stage instance: find it in the spec's graph by key, check its inputs are built, build its
artifact atomically, record it in MLflow. One function per stage adapts the graph to the stage code."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from runlib.errors import UserError
from runlib.spec import LoadedSpec, load_spec
from runlib.workflow.artifacts import build_artifact, is_built, read_manifest
from runlib.workflow.graph import StageGraph, StageNode, build_graph, shard_plan
from runlib.workflow.settings import done_stamp


def _curate_shard(loaded: LoadedSpec, graph: StageGraph, node: StageNode, out: Path) -> dict[str, Any]:
    from runlib.curate.stage import curate_shard

    name, shard = node.params["source"], node.params["shard"]
    files = shard_plan(name, loaded.spec.data.sources[name])[shard]
    return curate_shard(loaded.spec, name, shard, node.projection["shards"], files, out)


def _curate_source(loaded: LoadedSpec, graph: StageGraph, node: StageNode, out: Path) -> dict[str, Any]:
    from runlib.curate.stage import curate_source

    shards = graph.input_nodes(node)
    dirs = [shards[f"shard{i}"].dir for i in range(len(shards))]
    return curate_source(loaded.spec, node.params["source"], dirs, out)


def _train_tokenizer(loaded: LoadedSpec, graph: StageGraph, node: StageNode, out: Path) -> dict[str, Any]:
    from runlib.tokenizer.train import train_tokenizer

    curated = {role.removeprefix("source:"): n.dir for role, n in graph.input_nodes(node).items()}
    return train_tokenizer(loaded.spec, curated, out)


def _tokenize(loaded: LoadedSpec, graph: StageGraph, node: StageNode, out: Path) -> dict[str, Any]:
    from runlib.data.tokenize import tokenize_source

    inputs = graph.input_nodes(node)
    return tokenize_source(loaded.spec, inputs["curated"].dir, inputs["tokenizer"].dir, out)


def _train_phase(loaded: LoadedSpec, graph: StageGraph, node: StageNode, out: Path) -> dict[str, Any]:
    from runlib.train.phase import train_phase

    return train_phase(loaded.spec, loaded.source_map.file, node, out)


def _eval_phase(loaded: LoadedSpec, graph: StageGraph, node: StageNode, out: Path) -> dict[str, Any]:
    from runlib.eval.stage import evaluate_phase

    inputs = graph.input_nodes(node)
    token_dirs = {role.removeprefix("tokens:"): n.dir for role, n in inputs.items() if role.startswith("tokens:")}
    return evaluate_phase(
        loaded.spec, node.params["phase"], inputs["model"].dir, inputs["tokenizer"].dir, token_dirs, out
    )


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


def run_stage(stage: str, spec_path: str, key: str, track: bool = True) -> dict[str, Any]:
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
        return read_manifest(node.dir) or {}
    manifest = build_artifact(node, lambda tmp: BUILDERS[stage](loaded, graph, node, tmp))
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(manifest["content_hash"] + "\n")
    print(f"{node.instance}: built {node.dir} in {manifest['timings']['wall_seconds']} s", file=sys.stderr)
    if track:
        from runlib.track.mlflow_track import log_stage

        files = [node.dir / f for f in TRACKED_FILES.get(stage, [])]
        log_stage(loaded.spec, spec_path, node, manifest, files)
    return manifest
