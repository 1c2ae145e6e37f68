"""A data job's memory comes from the bytes it reads, not a fixed share: a large shard's curate_shard and
dedup_partition jobs ask Slurm for more (runlib.workflow.resources.data_job_mem_mb), a small one keeps the
registry's floor."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from runlib.curate.memory import data_job_mem_mb, join_mem_mb, quality_cut_mem_mb
from runlib.graph.build import build_graph
from runlib.graph.plan_view import plan_rows, render
from runlib.graph.registry import stage_kind
from runlib.graph.scale import BYTES_PER_TOKEN, TIMED_STAGES, job_runtime_min, job_seconds
from runlib.workflow.resources import JobResources
from tests.curate import jsonl_source, make_spec


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RUNLIB_WORK_DIR", str(tmp_path / "work"))
    Path("data").mkdir()
    Path("data/a.jsonl").write_text('{"text": "one small document"}\n')
    with open("data/b.jsonl", "wb") as f:  # 1.2 GB, sparse: only its size matters here
        f.truncate(1200 * 2**20)


def test_a_large_shard_asks_for_memory_in_proportion(files: None) -> None:
    spec = make_spec({"web": jsonl_source(dedup={"minhash": {}})})
    graph = build_graph(spec)
    jobs = JobResources(spec, graph)
    floor = stage_kind("curate_shard").resources.mem_mb  # type: ignore[union-attr]
    mem = jobs.resources("curate_shard")["mem_mb"]
    small, large = (n for n in graph.of("curate_shard") if n.params["source"] == "web")
    assert callable(mem)
    assert mem(SimpleNamespace(key=small.key), []) == floor
    assert mem(SimpleNamespace(key=large.key), []) == data_job_mem_mb("curate_shard", os.path.getsize("data/b.jsonl"))
    assert mem(SimpleNamespace(key=large.key), []) > 5 * floor
    # each of the 2 slices holds about half the source's tables
    partition = next(n for n in graph.of("dedup_partition") if n.params["source"] == "web")
    sliced = jobs.resources("dedup_partition")["mem_mb"](SimpleNamespace(key=partition.key), [])  # type: ignore[operator]
    assert sliced == data_job_mem_mb("dedup_partition", (1200 * 2**20 + 31) // 2) > floor
    # the join's memory is set when it starts, from its inputs' counts: before they are built, the floor
    join = next(n for n in graph.of("curate_source") if n.params["source"] == "web")
    join_mem = jobs.resources("curate_source")["mem_mb"]
    assert callable(join_mem)
    assert join_mem(SimpleNamespace(key=join.key), []) == stage_kind("curate_source").resources.mem_mb  # type: ignore[union-attr]
    # runlib plan says it: the jobs per stage, the most input one holds, the memory it asks
    text = render(plan_rows(graph), "spec.yaml")
    asked = data_job_mem_mb("curate_shard", 1200 * 2**20)
    assert (
        f"curate_shard: {len(graph.of('curate_shard'))} jobs, the largest holding 1,200.0 MB of input files: {asked:,} MB"
        in text
    )


def test_the_join_and_the_quality_cut_ask_for_what_their_inputs_counted(files: None) -> None:
    """curate_source's memory follows the largest shard's documents and the duplicates and pairs its partitions
    found; filter_quality's the documents the join kept (runlib.curate.memory, measured slopes)."""
    spec = make_spec(
        {
            "web": jsonl_source(dedup={"minhash": {}}, classifier={"positives": ["anchor"]}),
            "anchor": jsonl_source(path="data/a.jsonl"),
        }
    )
    graph = build_graph(spec)
    jobs = JobResources(spec, graph)
    join = graph.find("curate_source", source="web")
    inputs = graph.input_nodes(join)
    floor = stage_kind("curate_source").resources.mem_mb  # type: ignore[union-attr]
    for role, node in inputs.items():
        node.dir.mkdir(parents=True)
        counts = (
            {"docs": 30_000_000}
            if role.startswith("shard")
            else {"exact_duplicates": 4_000_000, "verified_pairs": 6_000_000}
        )
        (node.dir / "stats.json").write_text(json.dumps({"counts": counts}))
    partitions = sum(role.startswith("partition") for role in inputs)
    expected = join_mem_mb(30_000_000, partitions * 10_000_000)
    assert jobs.counted_mem_mb("curate_source", join.key) == expected > 3 * floor
    assert jobs.resources("curate_source")["mem_mb"](SimpleNamespace(key=join.key), []) == expected  # type: ignore[operator]
    (join.dir).mkdir(parents=True)
    (join.dir / "stats.json").write_text(json.dumps({"counts": {"docs_train": 90_000_000, "docs_heldout": 200}}))
    cut = graph.find("filter_quality", source="web")
    assert jobs.counted_mem_mb("filter_quality", cut.key) == quality_cut_mem_mb(90_000_200) > 2 * floor
    # an unreadable count falls back to the registry share
    (join.dir / "stats.json").write_text("{")
    assert jobs.counted_mem_mb("filter_quality", cut.key) == stage_kind("filter_quality").resources.mem_mb  # type: ignore[union-attr]


def test_a_data_job_gets_the_time_its_work_takes(files: None) -> None:
    """Slurm's time limit of curate_shard, dedup_partition, curate_source and tokenize comes from the bytes of
    their work at the measured rates (runlib.graph.scale): a join of 100B declared tokens' text would not fit
    the registry's 30 minutes; a small shard keeps them."""
    source = jsonl_source(dedup={"minhash": {}}) | {"tokens": "100B"}
    spec = make_spec({"web": source})
    graph = build_graph(spec)
    jobs = JobResources(spec, graph)
    runtime = {stage: jobs.resources(stage)["runtime"] for stage in TIMED_STAGES}
    assert all(callable(r) for r in runtime.values())
    small, large = (n for n in graph.of("curate_shard") if n.params["source"] == "web")
    floor = stage_kind("curate_shard").resources.runtime_min  # type: ignore[union-attr]
    assert runtime["curate_shard"](SimpleNamespace(key=small.key)) == floor  # type: ignore[operator]
    assert runtime["curate_shard"](SimpleNamespace(key=large.key)) == job_runtime_min(  # type: ignore[operator]
        job_seconds("curate_shard", os.path.getsize("data/b.jsonl")), floor
    )
    join = graph.of("curate_source")[0]
    seconds = job_seconds("curate_source", 100 * 10**9 * BYTES_PER_TOKEN)
    assert runtime["curate_source"](SimpleNamespace(key=join.key)) == math.ceil(seconds * 1.5 / 60) + 10 > 60  # type: ignore[operator]
    part = graph.of("tokenize")[0]
    seconds = job_seconds("tokenize", 100 * 10**9 * BYTES_PER_TOKEN // 2)  # 2 parts: one per shard
    assert runtime["tokenize"](SimpleNamespace(key=part.key)) == math.ceil(seconds * 1.5 / 60) + 10  # type: ignore[operator]


def test_a_builtin_source_has_no_input_files_to_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from runlib.spec import load_spec
    from tests.workflow.conftest import TINY

    monkeypatch.setenv("RUNLIB_WORK_DIR", str(tmp_path / "work"))
    graph = build_graph(load_spec(TINY).spec)
    text = render(plan_rows(graph), "tiny.yaml")
    assert f"curate_shard: {len(graph.of('curate_shard'))} jobs, no input files (builtin): 2,000 MB" in text
