"""Run one stage instance: build (or find built) its artifact under the commit protocol of
runlib.store.artifacts and write its stamps. The stage kind's run function (runlib.graph.registry) adapts
the graph to the stage code, which receives the node's config and its inputs' artifact directories, never
the spec.

A stage job does not record itself in MLflow: the workflow's `track` rule (rules/track.smk, `runlib
track --resync --stamp`) logs the manifests of every built artifact in one process, after each training
phase and before the report (runlib.track.resync). So no stage job imports mlflow, and one whose artifact
is already built (a rerun after a kill, another spec sharing it) needs neither the spec nor its graph:
the stage and the key name the artifact's folder.

Test-only: RUNLIB_FAULT_PAUSE_AFTER_COMMIT_S=<seconds> makes run_stage sleep that long after the
artifact's commit and before its stamps, so the fault-injection tests
(tests/workflow/test_commit_protocol.py) can kill a run in that window. Never set it otherwise.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING

from runlib.errors import UserError
from runlib.graph.registry import STAGES, stage_kind
from runlib.store.artifacts import (
    ArtifactError,
    Verification,
    build_artifact,
    build_lock,
    chain_problems,
    describe_failure,
    input_record,
    is_built,
    remove_orphans,
    verify_artifact,
    verify_node,
)
from runlib.store.diskfull import disk_full_message
from runlib.store.manifest import MANIFEST, Manifest, ManifestError, read_manifest
from runlib.store.node import ArtifactRef
from runlib.store.settings import built_marker, done_stamp
from runlib.util.atomic import write_text_atomic

if TYPE_CHECKING:
    from runlib.graph.build import StageGraph
    from runlib.store.node import StageNode

FAULT_PAUSE_ENV = "RUNLIB_FAULT_PAUSE_AFTER_COMMIT_S"


def _fault_pause() -> None:
    """The test hook of the module docstring."""
    seconds = os.environ.get(FAULT_PAUSE_ENV)
    if seconds:
        print(f"{FAULT_PAUSE_ENV}={seconds}: pausing after the commit (test hook)", file=sys.stderr, flush=True)
        time.sleep(float(seconds))


def _stamp(stage: str, key: str, manifest: Manifest) -> None:
    write_text_atomic(built_marker(stage, key), manifest.content_hash + "\n")
    write_text_atomic(done_stamp(stage, key), manifest.content_hash + "\n")


def run_stage(stage: str, spec_path: str, key: str) -> Manifest:
    """Build (or find built) the artifact of `stage` with `key` and write its stamps.

    Under the artifact's build lock: orphans of killed builds are removed; a built artifact is verified
    cheaply (manifest checksum and MAC, sizes, its inputs' manifests against what it read) and stamped,
    never rebuilt, without loading the spec; otherwise the spec's graph gives the node, every input is
    verified in full (sizes and digests), the chain upstream is checked and the stage runs. A mismatch is an ArtifactError (exit 2) naming the artifact, the file and the commands that
    rebuild it."""
    stage_kind(stage)  # an unknown stage: a UserError naming the known ones
    ref = ArtifactRef(stage, key, f"{stage} {key}")
    # the workflow appends to the stage's log (Workflow.command): each attempt starts with this line
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
    print(
        f"== runlib {stage.replace('_', '-')} --key {key}: pid {os.getpid()}, {started} ==", file=sys.stderr, flush=True
    )
    with build_lock(ref):  # an ArtifactRef: build_lock reads stage, key and instance only
        for orphan in remove_orphans(ref):
            print(f"{ref.instance}: removed {orphan} (left by a killed build)", file=sys.stderr)
        if is_built(ref):
            verification = verify_artifact(ref.dir, full=False)
            if verification.ok and verification.manifest is not None:
                manifest = verification.manifest
                print(f"{manifest.instance}: already built at {ref.dir}", file=sys.stderr)
                _stamp(stage, key, manifest)
                return manifest
        # not built, or built but failing the cheap check (the spec's graph names it in the error)
        try:
            manifest = _build_from_spec(stage, spec_path, key)
            _stamp(stage, key, manifest)
        except (OSError, RuntimeError) as exc:  # a full disk: say so, not the writer's words
            message = disk_full_message(ref.instance, ref.dir, exc)
            if message is None:
                raise
            raise UserError(message) from None
    return manifest


def upstream(graph: StageGraph, node: StageNode) -> list[StageNode]:
    """Every node the node's inputs were built from, transitively (its direct inputs excluded)."""
    seen: dict[tuple[str, str], StageNode] = {}
    todo = [n for n in graph.input_nodes(node).values()]
    while todo:
        for n in graph.input_nodes(todo.pop()).values():
            if (n.stage, n.key) not in seen:
                seen[(n.stage, n.key)] = n
                todo.append(n)
    return sorted(seen.values(), key=lambda n: (n.stage, n.key))


def _build_from_spec(stage: str, spec_path: str, key: str) -> Manifest:
    """The slow path of run_stage, under the build lock: the node from the spec's graph, its inputs
    verified in full (their chain included), the chain of every artifact further upstream checked (so a
    resealed artifact that a consumer already read is refused, runlib.store.artifacts), the build,
    recording what it read of each input, and its commit."""
    # lazy: the spec and its graph (pydantic models, numpy) are loaded only when the artifact is not built
    # yet; a rerun that finds it built stays cheap (python -m runlib.bench.stage_overhead)
    from runlib.graph.build import build_graph
    from runlib.spec import load_spec

    graph = build_graph(load_spec(spec_path).spec)
    node = graph.by_key(stage, key)
    if is_built(node):  # the cheap check failed: raise its ArtifactError, naming the instance
        return verify_node(node, full=False, spec_path=spec_path)
    inputs = graph.input_nodes(node)
    missing = [n.instance for n in inputs.values() if not is_built(n)]
    if missing:
        raise UserError(
            f"{node.instance}: inputs not built yet: {', '.join(missing)} (run snakemake, not the stage alone)"
        )
    read = {role: input_record(n.stage, verify_node(n, full=True, spec_path=spec_path)) for role, n in inputs.items()}
    for n in upstream(graph, node):  # their manifests and chains only: their files are not read
        if is_built(n):
            try:
                read_back = read_manifest(n.dir)
                manifest: Manifest | None = read_back
                problems = chain_problems(n.dir, read_back)
            except ManifestError as exc:
                manifest, problems = None, [f"{MANIFEST}: {exc.problem}"]
            if problems:
                failed = Verification(n.dir, manifest, tuple(problems), 0, 0.0, False)
                raise ArtifactError(describe_failure(n, failed, spec_path))
    manifest = build_artifact(node, lambda tmp: STAGES[stage].run(graph, node, tmp), read)
    print(f"{node.instance}: built {node.dir} in {manifest.timings.wall_seconds} s", file=sys.stderr)
    _fault_pause()
    return manifest
