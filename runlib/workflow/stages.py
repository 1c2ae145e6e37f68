"""Run one stage instance: find it in the spec's graph by key, verify its inputs, build its artifact
under the commit protocol of runlib.workflow.artifacts, record it in MLflow. One function per stage
adapts the graph to the stage code, which receives the node's config and its inputs' artifact
directories, never the spec.

Test-only: RUNLIB_FAULT_PAUSE_AFTER_COMMIT_S=<seconds> makes run_stage sleep that long after the
artifact's commit and before its stamps, so the fault-injection tests
(tests/workflow/test_commit_protocol.py) can kill a run in that window. Never set it otherwise.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from runlib.errors import UserError
from runlib.spec import load_spec
from runlib.util.atomic import write_text_atomic
from runlib.workflow.artifacts import build_artifact, build_lock, is_built, remove_orphans, verify_node
from runlib.workflow.graph import StageGraph, StageNode, build_graph
from runlib.workflow.manifest import Manifest
from runlib.workflow.settings import built_marker, done_stamp

FAULT_PAUSE_ENV = "RUNLIB_FAULT_PAUSE_AFTER_COMMIT_S"


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


def _fault_pause() -> None:
    """The test hook of the module docstring."""
    seconds = os.environ.get(FAULT_PAUSE_ENV)
    if seconds:
        print(f"{FAULT_PAUSE_ENV}={seconds}: pausing after the commit (test hook)", file=sys.stderr, flush=True)
        time.sleep(float(seconds))


def run_stage(stage: str, spec_path: str, key: str, track: bool = True) -> Manifest:
    """Build (or find built) the artifact of `stage` with `key`, write its stamps, record it in MLflow.

    Under the artifact's build lock: orphans of killed builds are removed; a built artifact is verified
    cheaply (manifest checksum, sizes) and stamped, never rebuilt; otherwise every input is verified in
    full (sizes and digests) before the stage runs. A mismatch is an ArtifactError (exit 2) naming the
    artifact, the file and the commands that rebuild it."""
    loaded = load_spec(spec_path)
    graph = build_graph(loaded.spec)
    node = graph.by_key(stage, key)
    with build_lock(node):
        for orphan in remove_orphans(node):
            print(f"{node.instance}: removed {orphan} (left by a killed build)", file=sys.stderr)
        if is_built(node):
            manifest = verify_node(node, full=False, spec_path=spec_path)
            print(f"{node.instance}: already built at {node.dir}", file=sys.stderr)
        else:
            inputs = graph.input_nodes(node)
            missing = [n.instance for n in inputs.values() if not is_built(n)]
            if missing:
                raise UserError(
                    f"{node.instance}: inputs not built yet: {', '.join(missing)} (run snakemake, not the stage alone)"
                )
            for n in inputs.values():
                verify_node(n, full=True, spec_path=spec_path)
            manifest = build_artifact(node, lambda tmp: BUILDERS[stage](graph, node, tmp))
            print(f"{node.instance}: built {node.dir} in {manifest.timings.wall_seconds} s", file=sys.stderr)
            _fault_pause()
        write_text_atomic(built_marker(stage, key), manifest.content_hash + "\n")
        write_text_atomic(done_stamp(stage, key), manifest.content_hash + "\n")
        if track:  # log_stage skips a key its spec's parent run already has (runlib.track.mlflow_track)
            from runlib.track.mlflow_track import log_stage

            files = [node.dir / f for f in TRACKED_FILES.get(stage, [])]
            log_stage(loaded.spec, spec_path, node, manifest, files)
    return manifest
