"""Artifacts verified when read, their commit protocol in one process (orphans,
stamps, the already-built path) and per-artifact build locks (problem 6), on the tiny spec's data
stages, which build in a few seconds; `runlib verify`."""

import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from runlib.cli import main
from runlib.errors import UserError
from runlib.graph.build import build_graph
from runlib.graph.stages import run_stage
from runlib.spec import load_spec
from runlib.store import artifacts
from runlib.store.artifacts import build_artifact
from runlib.store.command import snakemake_command
from runlib.store.manifest import read_manifest
from runlib.store.settings import built_marker, done_stamp
from tests.conftest import ROOT
from tests.helpers import DATA_STAGES
from tests.limits import HANG_GUARD_S
from tests.workflow.conftest import TINY


@pytest.fixture(scope="session")
def graph():
    return build_graph(load_spec(TINY).spec)


@pytest.fixture(scope="session")  # not module: xdist may interleave other modules (a rebuild each time)
def built_data(tmp_path_factory, graph) -> Path:
    """A work directory with the tiny spec's data stages built (copied per test)."""
    work = tmp_path_factory.mktemp("built") / "work"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RUNLIB_WORK_DIR", str(work))
        for stage in DATA_STAGES:
            for node in graph.of(stage):
                run_stage(stage, str(TINY), node.key)
    return work


@pytest.fixture
def work(built_data, tmp_path, monkeypatch) -> Path:
    copy = shutil.copytree(built_data, tmp_path / "work")
    monkeypatch.setenv("RUNLIB_WORK_DIR", str(copy))
    return copy


def fake_phase(node, payload: bytes = b"\x80\x02weights" * 4096) -> None:
    """A train_phase artifact built with a stand-in final.pt (verification does not read its content)."""

    def build(tmp: Path) -> dict:
        (tmp / "final.pt").write_bytes(payload)
        return {"counts": {}}

    build_artifact(node, build)


def done(node) -> Path:
    return done_stamp(node.stage, node.key)


def flip(path: Path, offset: int, count: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset : offset + count] = bytes(b ^ 0xFF for b in data[offset : offset + count])
    path.write_bytes(bytes(data))


def test_flipped_bytes_in_final_pt_stop_the_next_phase(work, graph):
    first, second = graph.find("train_phase", phase=0), graph.find("train_phase", phase=1)
    fake_phase(first)
    flip(first.dir / "final.pt", 1000, 64)  # same size: only the digest tells
    with pytest.raises(UserError) as err:
        run_stage("train_phase", str(TINY), second.key)
    message = str(err.value)
    assert message.startswith(f"artifact train_phase/{first.key} (train_phase foundation): final.pt: its content")
    assert f"rebuild it with: rm -r {first.dir} && {snakemake_command(TINY, cores='all')}" in message
    assert not second.dir.exists()


def test_a_zeroed_token_shard_stops_training(work, graph):
    tokens = graph.find("tokenize", source="code")
    shard = tokens.dir / "train.bin"
    size = shard.stat().st_size
    zeroed = min(400_000, size // 2)
    with open(shard, "r+b") as f:
        f.write(bytes(zeroed))
    assert shard.stat().st_size == size
    with pytest.raises(
        UserError, match=rf"artifact tokenize/{tokens.key} \(tokenize code/0\): train\.bin: its content"
    ):
        run_stage("train_phase", str(TINY), graph.find("train_phase", phase=0).key)


def test_an_edited_tokenizer_manifest_is_refused_on_every_read(work, graph):
    tok = graph.of("train_tokenizer")[0]
    data = json.loads(tok.manifest_path.read_text())
    data["details"]["eos_id"] += 1
    tok.manifest_path.write_text(json.dumps(data, indent=2, sort_keys=True))
    with pytest.raises(UserError, match="edited or corrupted after the build") as err:
        read_manifest(tok.dir)  # what the trainer and the evaluator read eos_id through
    assert str(tok.manifest_path) in str(err.value) and "rebuild it with: rm -r" in str(err.value)
    with pytest.raises(UserError, match=rf"artifact train_tokenizer/{tok.key} \(train_tokenizer\): manifest\.json"):
        run_stage("train_phase", str(TINY), graph.find("train_phase", phase=0).key)


def test_a_truncated_artifact_is_refused_and_the_advice_rebuilds_it(work, graph):
    shard = graph.find("curate_shard", source="code", shard=0)
    before = read_manifest(shard.dir)
    docs = shard.dir / "docs.jsonl"
    docs.write_bytes(docs.read_bytes()[:-10])
    with pytest.raises(UserError, match=r"docs\.jsonl: \d+ bytes, the manifest says \d+") as err:
        run_stage("curate_shard", str(TINY), shard.key)  # the cheap check of a built artifact
    assert f"rebuild it with: rm -r {shard.dir} && {snakemake_command(TINY, cores='all')}" in str(err.value)
    shutil.rmtree(shard.dir)  # what the message says; Snakemake then reruns this stage (the next test says why)
    rebuilt = run_stage("curate_shard", str(TINY), shard.key)
    assert rebuilt.content_hash == before.content_hash and done(shard).read_text().strip() == rebuilt.content_hash


def test_a_file_added_or_removed_after_the_build_fails_verification(work, graph):
    node = graph.find("curate_source", source="docs")
    (node.dir / "extra.txt").write_text("x")
    (node.dir / "stats.json").unlink()
    problems = artifacts.verify_artifact(node.dir).problems
    assert problems == ("stats.json: missing", "extra.txt: not in the manifest (added after the build)")


def test_built_artifact_is_stamped_not_rebuilt_without_the_spec_and_orphans_go(work, graph, capsys):
    node = graph.find("curate_shard", source="docs", shard=1)
    before = read_manifest(node.dir)
    done(node).unlink()  # as after a kill between the commit and the stamps
    built_marker(node.stage, node.key).unlink()
    orphan = node.dir.parent / f".tmp-{node.key}-999999"  # a killed build's
    (orphan / "sub").mkdir(parents=True)
    other = node.dir.parent / ".tmp-0123456789abcdef-999999"  # another key's: not ours to judge
    other.mkdir()
    # the stage and the key name a built artifact: the spec is not read (a stage's fixed cost: python -m runlib.bench.stage_overhead)
    after = run_stage("curate_shard", str(work / "no-such-spec.yaml"), node.key)
    assert after.timings == before.timings  # not rebuilt
    assert done(node).read_text() == built_marker(node.stage, node.key).read_text() == before.content_hash + "\n"
    assert not orphan.exists() and other.exists()
    err = capsys.readouterr().err
    assert f"{node.instance}: already built" in err and f"removed {orphan}" in err


def test_runlib_verify(work, graph, capsys):
    assert main(["verify", str(TINY)]) == 0
    out = capsys.readouterr().out
    assert out.count("\n  ok ") == sum(len(graph.of(s)) for s in DATA_STAGES)
    assert out.count("\n  not built ") == len(graph.of("train_phase")) + len(graph.of("eval_phase"))
    assert "s/GB" not in out or "too little data" in out
    tokens = graph.find("tokenize", source="arithmetic")
    flip(tokens.dir / "heldout.bin", 0, 1)
    assert main(["verify", str(TINY), "--stage", "tokenize"]) == 2
    out = capsys.readouterr().out
    assert out.count("\n  ok ") == len(graph.of("tokenize")) - 1 and "curate_shard" not in out
    failed = next(line for line in out.splitlines() if "FAILED" in line)
    assert "tokenize arithmetic/0" in failed and tokens.key in failed
    assert (
        "heldout.bin: its content differs" in out
        and f"rm -r {tokens.dir} && {snakemake_command(TINY, cores='all')}" in out
    )
    assert main(["verify", str(TINY), "--stage", "tokenize code/0"]) == 0
    assert main(["verify", str(TINY), "--stage", "tokenize cod"]) == 2  # a usage error names the instances
    err = capsys.readouterr().err
    assert "did you mean" in err and "'tokenize code/0'" in err


def test_two_concurrent_builders_build_once(tmp_path):
    """Two processes start the same stage at once (two specs sharing it, or two `--nolock` Snakemake
    runs): one builds, the other waits for its lock and finds it built."""
    node = build_graph(load_spec(TINY).spec).find("curate_shard", source="docs", shard=0)
    env = {**os.environ, "RUNLIB_WORK_DIR": str(tmp_path / "work")}
    cmd = [sys.executable, "-X", "importtime", "-m", "runlib", "curate-shard", "--spec", str(TINY), "--key", node.key]
    # stderr to files, not pipes: -X importtime fills a pipe, and the builder would block on it while
    # holding the lock the other waits for (a deadlock of the test, not of runlib)
    logs = [tmp_path / f"job{i}.err" for i in range(2)]
    procs = []
    for log in logs:
        with open(log, "w") as err:
            procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=err, text=True))
    for p in procs:
        p.wait(timeout=HANG_GUARD_S)
    errs = [log.read_text() for log in logs]
    assert [p.returncode for p in procs] == [0, 0], errs
    built = [e for e in errs if f"{node.instance}: built " in e]
    waited = [e for e in errs if f"{node.instance}: already built" in e]
    assert len(built) == 1 and len(waited) == 1, errs
    # neither job imports mlflow (the track rule records them), nor torch
    imported = {
        line.rsplit("|", 1)[1].strip() for e in errs for line in e.splitlines() if line.startswith("import time:")
    }
    assert "runlib.graph.stages" in imported and not {"mlflow", "torch"} & imported
    assert not list((tmp_path / "work" / "artifacts" / "curate_shard").glob(".tmp-*"))


def test_deleting_an_artifact_folder_drops_its_built_marker_when_the_snakefile_loads(work, graph, monkeypatch):
    """Snakemake then reruns that job (an output is missing) and no job downstream (their input, the
    done stamp, is still there)."""
    from runlib.workflow.snake import Workflow

    for name in ("RUNLIB_SPEC", "RUNLIB_PYTHON"):  # Workflow sets them for its jobs; restored after the test
        monkeypatch.setenv(name, "")
    tok, shard = graph.of("train_tokenizer")[0], graph.find("curate_shard", source="code", shard=1)
    shutil.rmtree(tok.dir)
    workflow = Workflow(str(TINY))
    assert workflow.drop_stale_markers() == []  # it did its work when it loaded
    assert not built_marker(tok.stage, tok.key).exists() and done(tok).exists()
    assert built_marker(shard.stage, shard.key).exists()

    # the track rule: one stamp per training phase under the spec's MLflow parent, after its evaluation
    phases = graph.of("train_phase")
    stamps = workflow.track_targets()
    assert [Path(s).name for s in stamps] == [n.key for n in phases]
    assert len({Path(s).parent for s in stamps}) == 1 and Path(stamps[0]).parent.parent == work / "tracked"
    assert set(stamps) <= set(workflow.report_inputs())
    inputs = workflow.track_inputs()(types.SimpleNamespace(key=phases[1].key))
    evals = [n for n in graph.of("eval_phase") if n.inputs["model"] == phases[1].key]
    assert len(evals) == 1 and inputs == [str(done(phases[1])), str(done(evals[0]))]
    assert all(getattr(path, "flags", {}).get("ancient") for path in inputs)
