"""A stage kind is one registry entry: a toy kind added here (one entry, one function) gets nodes keyed in the
graph, a `runlib` subcommand that builds its artifact under the commit protocol, `runlib plan` rows, rule
resources and a tracking record, without touching any other file; and the registry is what every reader
reads (the CLI's stage subcommands, the versions in the keys, the rules' resources)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runlib.cli import build_parser, main
from runlib.graph import registry
from runlib.graph.build import StageGraph, build_graph
from runlib.graph.nodes import GraphContext
from runlib.graph.plan_view import plan_rows
from runlib.graph.registry import STAGES, Resources, StageKind, input_dirs
from runlib.plan import derive
from runlib.spec import load_spec
from runlib.store.manifest import read_manifest
from runlib.store.node import StageNode
from runlib.store.stageconfig import StageConfig
from runlib.workflow.resources import JobResources
from tests.conftest import ROOT
from tests.graph.pinned_keys import PINNED_PYTHON

TINY = ROOT / "tests" / "fixtures" / "tiny.yaml"


class LineCountConfig(StageConfig):
    """The toy stage reads nothing but its input: a curated source."""

    min_chars: int = 0


def count_lines(graph: StageGraph, node: StageNode, out: Path) -> dict:
    """The toy stage: the documents of a curated source, counted."""
    train = input_dirs(graph, node)["curated"] / "train.jsonl"
    documents = sum(1 for line in train.read_text().splitlines() if len(line) >= node.config.min_chars)
    (out / "lines.json").write_text(json.dumps({"documents": documents}))
    return {"counts": {"documents": documents}}


TOY = StageKind(
    name="count_lines",
    version=1,
    config=LineCountConfig,
    nodes=lambda g: [
        g.make("count_lines", f"count_lines {n.params['source']}", LineCountConfig(), {"curated": n.key}, **n.params)
        for n in g.of("filter_shard")
        if n.params["shard"] == 0
    ],
    run=count_lines,
    help="count a curated source's documents (a test's toy stage)",
    resources=Resources(threads=1, mem_mb=123, runtime_min=7),
    tracked_files=("lines.json",),
)


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setitem(STAGES, TOY.name, TOY)
    monkeypatch.setenv("RUNLIB_WORK_DIR", str(tmp_path / "work"))
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr("platform.python_version", lambda: PINNED_PYTHON)
    return tmp_path


def test_a_toy_stage_is_one_entry_and_one_function(toy: Path) -> None:
    spec = load_spec(TINY).spec
    graph = build_graph(spec)
    toys = graph.of("count_lines")
    assert [n.instance for n in toys] == ["count_lines docs", "count_lines code", "count_lines arithmetic"]
    curated = {n.key for n in graph.of("filter_shard")}
    assert all(set(n.inputs.values()) <= curated for n in toys)
    # its key holds its version: another version, another key; the other stages' keys do not move
    other = build_graph(spec)
    assert [n.key for n in other.of("count_lines")] == [n.key for n in toys]
    bumped = GraphContext(spec, spec, derive(spec), {**registry.versions(), "count_lines": 2})
    assert bumped.make("count_lines", "x", LineCountConfig(), toys[0].inputs).key != toys[0].key
    # `runlib plan` lists it; the rule gets its resources; the CLI has its subcommand
    assert [r["instance"] for r in plan_rows(graph) if r["stage"] == "count_lines"] == [n.instance for n in toys]
    jobs = JobResources(spec, graph)
    assert (jobs.threads("count_lines"), jobs.resources("count_lines")) == (1, {"mem_mb": 123, "runtime": 7})
    assert "count-lines" in build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]

    # built through the CLI, as the rule's shell line does: inputs first, then the toy
    for node in [
        *graph.of("curate_shard"),
        *graph.of("dedup_partition"),
        *graph.of("curate_source"),
        *graph.of("filter_shard"),
    ]:
        if node.params["source"] == "arithmetic":
            assert main([node.stage.replace("_", "-"), "--spec", str(TINY), "--key", node.key]) == 0
    node = next(n for n in toys if n.params["source"] == "arithmetic")
    assert main(["count-lines", "--spec", str(TINY), "--key", node.key]) == 0
    manifest = read_manifest(node.dir)
    written = json.loads((node.dir / "lines.json").read_text())["documents"]
    assert manifest.counts["documents"] == written > 0


def test_every_stage_kind_is_read_from_the_registry() -> None:
    """The CLI's stage subcommands are the registry's kinds; every kind's rule file exists and names it."""
    choices = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    rules = "".join(p.read_text() for p in (ROOT / "rules").glob("*.smk"))
    for kind in STAGES.values():
        assert kind.command in choices
        assert f"rule {kind.name}:" in rules
        assert f'WF.command("{kind.name}")' in rules
        assert f'WF.resources("{kind.name}")' in rules
        assert issubclass(kind.config, StageConfig)


def test_a_phase_rope_scaling_reaches_its_training_and_evaluation_only(tmp_path: Path) -> None:
    """phases[].rope_scaling: the long phase's train and eval configs carry it (Engine and the eval stage pass it
    to set_rope), the other phases' do not, and the earlier phases' keys stay as they were (a later phase starts
    from the long phase's weights: its key follows)."""
    text = TINY.read_text()
    old = "{name: long, kind: long_context,"
    assert old in text
    scaled = tmp_path / "scaled.yaml"
    scaled.write_text(text.replace(old, old + " rope_scaling: {kind: yarn, factor: 2, original_seq_len: 128},"))
    plain, graph = build_graph(load_spec(TINY).spec), build_graph(load_spec(scaled).spec)
    long = next(i for i, p in enumerate(load_spec(TINY).spec.phases) if p.name == "long")
    for i in range(len(load_spec(TINY).spec.phases)):
        train, before = graph.find("train_phase", phase=i), plain.find("train_phase", phase=i)
        evaluation = graph.find("eval_phase", phase=i)
        if i == long:
            assert train.config.rope_scaling.kind == "yarn" and evaluation.config.rope_scaling.factor == 2
            assert train.key != before.key
        else:
            assert train.config.rope_scaling is None and evaluation.config.rope_scaling is None
            assert (train.key == before.key) == (i < long)
