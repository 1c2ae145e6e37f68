"""MLflow records rebuilt from the manifests (`runlib track --resync`) and log_stage idempotent by artifact key."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from runlib.cli import main
from runlib.graph.build import build_graph
from runlib.spec import load_spec
from runlib.store.artifacts import build_artifact
from runlib.store.manifest import read_manifest
from tests.workflow.conftest import TINY

MlflowClient = pytest.importorskip("mlflow.tracking").MlflowClient  # mlflow: the stages' optional extra

from runlib.track import mlflow_track  # noqa: E402


def _client(work: Path, spelling: str = "") -> MlflowClient:
    """A client of the work dir's store; another `spelling` of the path gets a store MLflow has not
    cached in this process (its engine for the first spelling still holds a deleted mlflow.db open)."""
    return MlflowClient(tracking_uri=f"sqlite:///{work.resolve()}/{spelling}mlflow.db")


def _children(work: Path, experiment: str, spelling: str = "") -> dict[str, list]:
    """Artifact key -> the complete child runs of the experiment's one parent with that key."""
    client = _client(work, spelling)
    exp = client.get_experiment_by_name(experiment)
    parents = client.search_runs([exp.experiment_id], "tags.`runlib.kind` = 'parent'")
    assert len(parents) == 1
    runs = client.search_runs(
        [exp.experiment_id], f"tags.`mlflow.parentRunId` = '{parents[0].info.run_id}' and tags.`runlib.kind` = 'stage'"
    )
    out: dict[str, list] = {}
    for run in runs:
        out.setdefault(run.data.tags["runlib.key"], []).append(run)
    return out


def _build(node, files: dict[str, str], counts: dict) -> None:
    def build(tmp: Path) -> dict:
        for name, text in files.items():
            (tmp / name).write_text(text)
        return {"counts": counts}

    build_artifact(node, build)


def test_resync_rebuilds_the_store_and_log_stage_is_idempotent_by_key(
    work: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deleting mlflow.db once lost the history although every manifest was still there; a second
    manifest for a key already recorded (a process that waited for another's build, a rebuild) added a
    second child, as log_stage searched by manifest digest.

    Over 80 lines: one test, since a fresh MLflow store costs seconds."""
    spec_file = tmp_path / "tiny.yaml"
    shutil.copy(TINY, spec_file)
    spec = load_spec(spec_file).spec
    graph = build_graph(spec)
    shard = graph.find("curate_shard", source="docs", shard=0)
    train = graph.find("train_phase", phase=0)
    evaluation = graph.of("eval_phase")[-1]
    tokenizer = graph.of("train_tokenizer")[0]
    records = [{"step": s, "loss": 6.0 - s / 10, "lr": 1e-3, "tokens": s * 1024} for s in (1, 2, 3)]
    _build(shard, {"docs.jsonl": "{}\n", "stats.json": "{}"}, {"docs": 3})
    _build(train, {"metrics.jsonl": "".join(json.dumps(r) + "\n" for r in records)}, {"steps": 3})
    eval_json = {"phase_index": 3, "heldout": {"docs": {"loss": 4.5, "perplexity": 90.0}}}
    _build(evaluation, {"eval.json": json.dumps(eval_json)}, {"sources": 1})
    built = {shard.key, train.key, evaluation.key}

    def check(out: str, logged: int, recorded: int, spelling: str = "", resynced: bool = True) -> None:
        not_built = len(graph.nodes) - len(built)
        assert f"{logged} logged, {recorded} already recorded, {not_built} not built, 0 failed" in out
        children = _children(work, "runlib-tests", spelling)
        assert set(children) == built and all(len(v) == 1 for v in children.values())
        client = _client(work, spelling)
        train_run = children[train.key][0]
        history = client.get_metric_history(train_run.info.run_id, "train/loss")
        assert sorted((m.step, m.value) for m in history) == [(1, 5.9), (2, 5.8), (3, 5.7)]
        assert train_run.info.run_name == "train_phase foundation"
        eval_run = children[evaluation.key][0]
        eval_loss = client.get_metric_history(eval_run.info.run_id, "heldout/docs/loss")
        assert [(m.step, m.value) for m in eval_loss] == [(3, 4.5)]
        assert children[shard.key][0].data.metrics["count/docs"] == 3
        if not resynced:
            return
        # the parent: the run's summary under the children's names, once however often it is resynced, and
        # the span of the builds (first start to last end), not the moment it was created
        parent = client.get_run(mlflow_track.parent_run(spec, spec_file))
        summary = {name: client.get_metric_history(parent.info.run_id, name) for name in parent.data.metrics}
        assert [(m.step, m.value) for m in summary["heldout/docs/loss"]] == [(3, 4.5)]
        assert all(len(points) == 1 for points in summary.values()), summary
        assert {"run/wall_seconds", "train/device_hours", "plan/device_hours"} <= set(summary)
        manifests = [read_manifest(n.dir) for n in graph.nodes if n.key in built]
        first = min(m.timings.started_at for m in manifests)
        last = max(m.timings.started_at + m.timings.wall_seconds for m in manifests)
        assert parent.info.end_time == int(last * 1000)
        assert parent.info.start_time == int(first * 1000)  # the resync created it
        assert parent.data.metrics["run/wall_seconds"] == pytest.approx(last - first, abs=2e-3)

    assert main(["track", "--resync", str(spec_file)]) == 0
    check(capsys.readouterr().out, logged=3, recorded=0)
    stamp = work / "tracked" / "x" / train.key  # as the workflow's track rule runs it
    assert main(["track", "--resync", str(spec_file), "--stamp", str(stamp)]) == 0  # idempotent: nothing logged twice
    check(capsys.readouterr().out, logged=0, recorded=3)
    assert stamp.read_text().startswith("0 logged, 3 already recorded")

    # log_stage: another manifest of a recorded key logs nothing; an incomplete child is replaced
    first = read_manifest(shard.dir)
    again = first.model_copy(update={"timings": first.timings.model_copy(update={"started_at": time.time() + 5})})
    assert mlflow_track.manifest_digest(again) != mlflow_track.manifest_digest(first)
    assert (
        mlflow_track.log_stage(spec, spec_file, shard, again)
        == _children(work, "runlib-tests")[shard.key][0].info.run_id
    )
    client = _client(work)
    parent_id = mlflow_track.parent_run(spec, spec_file)
    exp_id = client.get_run(parent_id).info.experiment_id
    stale = client.create_run(exp_id, tags={"mlflow.parentRunId": parent_id, "runlib.key": tokenizer.key}).info.run_id
    _build(tokenizer, {"tokenizer.json": "{}"}, {"vocab": 768})
    new_id = mlflow_track.log_stage(spec, spec_file, tokenizer, read_manifest(tokenizer.dir))
    assert new_id != stale and client.get_run(stale).info.lifecycle_stage == "deleted"
    built.add(tokenizer.key)
    check(
        f"0 logged, 0 already recorded, {len(graph.nodes) - 4} not built, 0 failed",
        logged=0,
        recorded=0,
        resynced=False,
    )

    (work / "mlflow.db").unlink()  # the store is gone; a resync brings every child back
    # (the same file under another spelling: MLflow's engine for the first one holds the deleted file open)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{work.resolve()}/./mlflow.db")
    assert main(["track", "--resync", str(spec_file)]) == 0
    check(capsys.readouterr().out, logged=4, recorded=0, spelling="./")


def test_track_usage_errors(work: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RUNLIB_SPEC", raising=False)
    assert main(["track", str(TINY)]) == 2
    assert "give --resync" in capsys.readouterr().err


def test_the_track_rule_warns_and_goes_on_when_mlflow_is_unreachable(
    work: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 9: tracking runs in the workflow's track rule, not in the stage jobs; like log_stage before
    it, it never fails the run (a stamp, a warning, exit 0), while a resync by hand exits 2."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # the discard port: nothing answers
    stamp = work / "tracked" / "x" / "0123456789abcdef"
    assert main(["track", "--resync", str(TINY), "--stamp", str(stamp)]) == 0
    err = capsys.readouterr().err
    assert "warning" in err and "no MLflow server answers at http://127.0.0.1:9" in err
    assert "retry: runlib track --resync" in err and stamp.read_text().startswith("not recorded:")
    assert main(["track", "--resync", str(TINY)]) == 2
    assert "no MLflow server answers" in capsys.readouterr().err


def test_the_parent_identity_names_store_experiment_and_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    """The track rule's stamps are named by it: a renamed spec, another experiment or another store is
    tracked anew, an unchanged one is not."""
    spec = load_spec(TINY).spec
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:////tmp/a.db")
    first = mlflow_track.parent_identity(spec)
    assert mlflow_track.parent_identity(load_spec(TINY).spec) == first
    renamed = spec.model_copy(update={"name": "other"})
    experiment = spec.model_copy(update={"tracking": spec.tracking.model_copy(update={"experiment": "elsewhere"})})
    identities = {first, mlflow_track.parent_identity(renamed), mlflow_track.parent_identity(experiment)}
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:////tmp/b.db")
    identities.add(mlflow_track.parent_identity(spec))
    assert len(identities) == 4
