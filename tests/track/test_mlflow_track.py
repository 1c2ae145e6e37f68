"""runlib.track: flattening, the parent/child runs in a SQLite store, a real `mlflow server`, an unreachable URI."""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from runlib.audit import audit
from runlib.audit.cases import case_data
from runlib.audit.render.json_view import derived
from runlib.curate.config import CurateShardConfig, InputFile
from runlib.spec import load_spec, validate_data
from runlib.spec.models import CurateSpec, InputSpec
from runlib.store.keys import spec_key
from runlib.store.manifest import Manifest
from runlib.store.node import StageNode
from runlib.store.stageconfig import StageConfig
from runlib.track.flatten import MAX_ENTITY_KEY_LENGTH, MAX_PARAM_VAL_LENGTH, flatten
from tests.helpers import fake_manifest

MlflowClient = pytest.importorskip("mlflow.tracking").MlflowClient  # mlflow: the stages' optional extra

from runlib.track import mlflow_track  # noqa: E402

# ---------------------------------------------------------------------------------------- fixtures


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "spec.yaml"
    with open(path, "w") as f:
        YAML().dump(case_data({}), f)
    return path


@pytest.fixture
def spec(spec_file: Path):
    return load_spec(spec_file).spec


class SeqLenConfig(StageConfig):
    seq_len: int
    """A one-field stage config."""


def _node(instance: str, stage: str, key: str, inputs: dict[str, str] | None = None) -> StageNode:
    config = CurateShardConfig(
        input=InputSpec(format="jsonl", path="data/web/*.jsonl"),
        curate=CurateSpec(),
        shard=0,
        shards=1,
        files=[InputFile(path=f, bytes=10, digest="xxh3_128:" + "0" * 32) for f in ("a.jsonl", "b.jsonl")],
    )
    return StageNode(stage, instance, key, config, inputs or {})


def _manifest(node: StageNode, counts: dict[str, int], details: dict | None = None) -> Manifest:
    """A build of 2.5 s that ended half a second ago."""
    return fake_manifest(node, counts=counts, details=details, started_at=time.time() - 3.0, wall_seconds=2.5)


def _artifact_paths(client: MlflowClient, run_id: str, path: str | None = None) -> set[str]:
    out = set()
    for info in client.list_artifacts(run_id, path):
        out |= _artifact_paths(client, run_id, info.path) if info.is_dir else {info.path}
    return out


# ----------------------------------------------------------------------------------------- flatten


def test_flatten_dotted_keys_and_values() -> None:
    flat = flatten(
        {"model": {"d_model": 768, "bias": False}, "phases": [{"tokens": 5}], "x": None, "e": {}, "l": []},
        "spec.",
    )
    assert flat == {
        "spec.model.d_model": "768",
        "spec.model.bias": "false",
        "spec.phases.0.tokens": "5",
        "spec.x": "null",
        "spec.e": "{}",
        "spec.l": "[]",
    }
    long = flatten({"v": "y" * (MAX_PARAM_VAL_LENGTH + 100)})["v"]
    assert len(long) == MAX_PARAM_VAL_LENGTH and long.endswith("[truncated]")
    from mlflow.utils import validation  # the limits runlib spells out (so as not to import mlflow)

    assert (MAX_PARAM_VAL_LENGTH, MAX_ENTITY_KEY_LENGTH) == (
        validation.MAX_PARAM_VAL_LENGTH,
        validation.MAX_ENTITY_KEY_LENGTH,
    )
    assert list(flatten({"a/b": {"c@d": 1}})) == ["a_b.c_d"]  # invalid name characters replaced


# ------------------------------------------------------------------------------- the SQLite store


def test_parent_and_stage_runs_in_sqlite(work: Path, tmp_path: Path, spec, spec_file: Path) -> None:
    shard = _node("curate_shard web/0", "curate_shard", "k1")
    tok = _node("train_tokenizer", "train_tokenizer", "k2", {"source:web": "k1"})
    shard_manifest = _manifest(shard, {"docs": 120, "bytes": 45678})
    tok_manifest = _manifest(tok, {"vocab": 32000}, {"compression": {"bytes_per_token": 3.9}, "notes": "x"})
    tok_file = tmp_path / "tokenizer.json"
    tok_file.write_text('{"model": {}}')

    shard_id = mlflow_track.log_stage(spec, spec_file, shard, shard_manifest)
    tok_id = mlflow_track.log_stage(spec, spec_file, tok, tok_manifest, [tok_file])
    assert shard_id and tok_id and shard_id != tok_id
    # logging the same manifest again (a rerun that found the artifact) records nothing new
    assert mlflow_track.log_stage(spec, spec_file, shard, shard_manifest) == shard_id

    key = spec_key(spec)
    client = MlflowClient(tracking_uri=f"sqlite:///{(work / 'mlflow.db').resolve()}")
    exp = client.get_experiment_by_name(spec.name)
    assert exp is not None
    assert exp.artifact_location.startswith((work / "mlartifacts").resolve().as_uri())
    assert not (tmp_path / "mlruns").exists()

    parents = client.search_runs([exp.experiment_id], "tags.`runlib.kind` = 'parent'")
    assert len(parents) == 1
    parent = parents[0]
    assert parent.info.run_name == f"{spec.name}-{key}"
    assert parent.data.tags["runlib.spec_key"] == key and parent.data.tags["runlib.spec_name"] == spec.name
    params = parent.data.params
    assert params["spec.model.d_model"] == "768"
    assert params["spec.name"] == spec.name
    plan_derived = derived(audit(spec).plan)
    assert params["derived.params.total"] == str(plan_derived["params"]["total"])
    assert params["derived.phases.0.tokens"] == str(plan_derived["phases"][0]["tokens"])
    assert len(params) > 100  # so the batching of log_batch (100 params a call) was needed
    assert {"audit/report.txt", "audit/report.json", "spec/spec.yaml"} <= _artifact_paths(client, parent.info.run_id)
    report = client.download_artifacts(parent.info.run_id, "audit/report.txt", str(tmp_path))
    assert "error(s)" in Path(report).read_text()

    assert mlflow_track.parent_run(spec, spec_file) == parent.info.run_id  # found, not created again

    children = client.search_runs([exp.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    assert sorted(c.info.run_id for c in children) == sorted([shard_id, tok_id])
    runs = {c.info.run_name: c for c in children}
    assert set(runs) == {"curate_shard web/0", "train_tokenizer"}
    for run, node, manifest in (
        (runs["curate_shard web/0"], shard, shard_manifest),
        (runs["train_tokenizer"], tok, tok_manifest),
    ):
        assert run.info.status == "FINISHED"
        assert run.data.tags["runlib.stage"] == node.stage
        assert run.data.tags["runlib.key"] == node.key
        assert run.data.tags["runlib.content_hash"] == manifest.content_hash
        for name, value in manifest.counts.items():
            assert run.data.metrics[f"count/{name}"] == value
        assert run.data.metrics["stage/wall_seconds"] == 2.5
        assert run.data.params["config.files.1.path"] == "b.jsonl"
        assert run.data.params["config.input.format"] == "jsonl"
        assert "manifest.json" in _artifact_paths(client, run.info.run_id)
    tok_run = runs["train_tokenizer"]
    assert tok_run.data.params["input.source:web"] == "k1"
    assert tok_run.data.metrics["detail/compression/bytes_per_token"] == 3.9
    assert not any("notes" in name for name in tok_run.data.metrics)
    assert "tokenizer.json" in _artifact_paths(client, tok_run.info.run_id)
    assert tok_run.info.end_time - tok_run.info.start_time == 2500  # the stage's own wall time


def test_train_and_eval_phase_metrics(
    work: Path, tmp_path: Path, spec, spec_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every phase's and evaluation's metrics reach MLflow, batched, against one real training run.

    Over 80 lines: one training run feeds every assertion (a run per assertion would multiply its minutes)."""
    batches: list[int] = []
    log_batch = MlflowClient.log_batch

    def counting_log_batch(self, run_id, metrics=(), *args, **kwargs):
        if metrics:
            batches.append(len(metrics))
        return log_batch(self, run_id, metrics, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "log_batch", counting_log_batch)

    train = StageNode("train_phase", "train_phase foundation", "kt1", SeqLenConfig(seq_len=2048), {}, {"phase": 0})
    train.dir.mkdir(parents=True)
    steps = list(range(10, 3010, 10))  # 300 records x 8 metrics: more than one batch of 1000
    records = [
        {
            "step": s,
            "tokens": s * 4096,
            "loss": 10.0 - s / 1000,
            "lr": 1e-3 * min(1.0, s / 500),
            "grad_norm": 1.0 + s / 1e4,
            "tokens_per_s": 5e4 + s,
            "mfu": 0.3,
            "loss_by_source": {"web": 10.5 - s / 1000, "code": 9.0 - s / 1000},
        }
        for s in steps
    ]
    records[5]["loss"] = math.nan  # a spike to NaN is recorded, not dropped
    records[9]["heldout_loss_by_source"] = {"web": 8.25}  # monitor.eval_every during training
    (train.dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + "not json\n")
    counts = {"steps": steps[-1], "tokens": steps[-1] * 4096, "final_loss": 7.0, "tokens_per_s": 53000.0, "spikes": 0}
    details = {"loss_by_source": {"web": 7.5, "code": 6.0}, "memory": {"estimate_bytes_per_device": 1e9}}
    train_id = mlflow_track.log_stage(spec, spec_file, train, _manifest(train, counts, details))
    assert train_id
    assert batches and max(batches) <= 1000 and sum(batches) >= 300 * 8

    client = MlflowClient(tracking_uri=f"sqlite:///{(work / 'mlflow.db').resolve()}")
    run = client.get_run(train_id)
    for name in ("loss", "lr", "grad_norm", "tokens", "tokens_per_s", "mfu", "loss/web", "loss/code"):
        history = client.get_metric_history(train_id, f"train/{name}")
        assert sorted(m.step for m in history) == steps, name  # no stray point at step 0 from the counts
    loss = {m.step: m.value for m in client.get_metric_history(train_id, "train/loss")}
    assert loss[20] == pytest.approx(9.98) and math.isnan(loss[60])
    web = {m.step: m.value for m in client.get_metric_history(train_id, "train/loss/web")}
    assert web[3000] == pytest.approx(7.5)
    heldout = client.get_metric_history(train_id, "train/heldout_loss/web")
    assert [(m.step, m.value) for m in heldout] == [(100, 8.25)]
    # one name per quantity: the manifest's copies of the history (tokens, final loss, loss by source) are
    # not logged again; what only the manifest has is, under count/ and detail/
    assert run.data.metrics["train/tokens"] == steps[-1] * 4096
    assert run.data.metrics["count/steps"] == steps[-1] and run.data.metrics["count/spikes"] == 0
    assert run.data.metrics["detail/memory/estimate_bytes_per_device"] == 1e9
    for duplicate in ("count/tokens", "count/final_loss", "count/tokens_per_s", "detail/loss_by_source/web"):
        assert duplicate not in run.data.metrics, duplicate
    checkpoint = str((train.dir / "final.pt").resolve())
    assert run.data.tags["runlib.checkpoint"] == checkpoint and run.data.params["checkpoint"] == checkpoint

    evaluation = StageNode(
        "eval_phase", "eval_phase long", "ke1", SeqLenConfig(seq_len=4096), {"model": "kt1"}, {"phase": 2}
    )
    evaluation.dir.mkdir(parents=True)
    data = {
        "phase": "long",
        "phase_index": 2,
        "tokens": 123456,
        "heldout": {
            "web": {"loss": 3.25, "perplexity": math.exp(3.25), "bits_per_byte": 1.1, "tokens": 4096},
            "code": {"loss": 2.5, "perplexity": math.exp(2.5), "bits_per_byte": 0.9, "tokens": 2048},
        },
        "tasks": {
            "mc": {"kind": "multiple_choice", "acc": 0.5, "acc_norm": 0.625, "n": 8},
            "cont": {"kind": "answer_loglik", "loglik_mean": -12.5, "loglik_per_token": -2.5, "n": 4},
        },
    }
    (evaluation.dir / "eval.json").write_text(json.dumps(data))
    eval_counts = {"web_loss": 3.25, "code_loss": 2.5, "mc_acc": 0.5}
    eval_id = mlflow_track.log_stage(spec, spec_file, evaluation, _manifest(evaluation, eval_counts))
    assert eval_id
    run = client.get_run(eval_id)
    expected = {
        "heldout/web/loss": 3.25,
        "heldout/web/perplexity": math.exp(3.25),
        "heldout/web/bits_per_byte": 1.1,
        "heldout/code/loss": 2.5,
        "heldout/code/bits_per_byte": 0.9,
        "task/mc/acc": 0.5,
        "task/mc/acc_norm": 0.625,
        "task/cont/loglik_per_token": -2.5,
    }
    for name, value in expected.items():
        history = client.get_metric_history(eval_id, name)
        assert [(m.step, m.value) for m in history] == [(2, pytest.approx(value))], name
    assert "task/mc/kind" not in run.data.metrics
    # the eval manifest's counts copy eval.json (web_loss = heldout/web/loss): not logged a second time
    assert not any(name.startswith("count/") for name in run.data.metrics)
    assert {"eval.json", "manifest.json"} <= _artifact_paths(client, eval_id)


def test_log_report_to_parent(work: Path, tmp_path: Path, spec, spec_file: Path) -> None:
    report = tmp_path / "reports" / "run"
    report.mkdir(parents=True)
    (report / "report.md").write_text("# Run report\n")
    (report / "loss.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    parent_id = mlflow_track.log_report(spec, spec_file, report)
    assert parent_id == mlflow_track.parent_run(spec, spec_file)
    client = MlflowClient(tracking_uri=f"sqlite:///{(work / 'mlflow.db').resolve()}")
    assert {"report/report.md", "report/loss.png"} <= _artifact_paths(client, parent_id)


def test_log_report_without_report_warns(
    work: Path, tmp_path: Path, spec, spec_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert mlflow_track.log_report(spec, spec_file, tmp_path / "nowhere") is None
    assert "runlib: warning:" in capsys.readouterr().err


def _parent_in_subprocess(spec_path: str, barrier, results) -> None:
    from runlib.track.mlflow_track import parent_run

    loaded = load_spec(spec_path)
    barrier.wait(timeout=120)
    results.put(parent_run(loaded.spec, spec_path))


@pytest.mark.parametrize("fresh_store", [True, False], ids=["fresh-db", "existing-db"])
def test_concurrent_parent_run_creates_one(work: Path, spec, spec_file: Path, fresh_store: bool) -> None:
    """Without the lock, a fresh SQLite file gets its schema created twice (`duplicate column name`),
    and in an existing experiment both jobs miss the parent and create one each (both seen without it)."""
    if not fresh_store:
        work.mkdir(parents=True)
        client = MlflowClient(tracking_uri=f"sqlite:///{(work / 'mlflow.db').resolve()}")
        client.create_experiment(spec.name, artifact_location=(work / "mlartifacts").resolve().as_uri())
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_parent_in_subprocess, args=(str(spec_file), barrier, results)) for _ in range(2)]
    for p in procs:
        p.start()
    try:
        deadline = time.monotonic() + 180
        while any(p.exitcode is None for p in procs) and time.monotonic() < deadline:
            assert all(p.exitcode in (None, 0) for p in procs), "a parent_run process failed"
            time.sleep(0.2)
        assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
        ids = [results.get(timeout=10) for _ in procs]
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join(timeout=10)
    assert ids[0] == ids[1]
    client = MlflowClient(tracking_uri=f"sqlite:///{(work / 'mlflow.db').resolve()}")
    exp = client.get_experiment_by_name(spec.name)
    assert len(client.search_runs([exp.experiment_id], "tags.`runlib.kind` = 'parent'")) == 1


def test_spec_built_from_case_data_matches_file(spec, spec_file: Path) -> None:
    assert validate_data(case_data({})).spec == spec
    assert spec_key(spec) == spec_key(validate_data(case_data({"name": "renamed"})).spec)


# -------------------------------------------------------------------------------- tracking failure


@pytest.mark.parametrize("uri", ["http://127.0.0.1:1", "nosuchscheme://nowhere"])
def test_unreachable_tracking_warns_and_returns_none(
    work: Path, spec, spec_file: Path, uri: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "3")
    node = _node("curate_shard web/0", "curate_shard", "k1")
    started = time.monotonic()
    assert mlflow_track.log_stage(spec, spec_file, node, _manifest(node, {"docs": 1})) is None
    assert time.monotonic() - started < 15
    err = capsys.readouterr().err.strip().splitlines()
    warnings = [line for line in err if line.startswith("runlib: warning:")]
    assert len(warnings) == 1 and uri in warnings[0] and "curate_shard web/0" in warnings[0]


# ---------------------------------------------------------------------------- a real mlflow server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_stage_logged_to_mlflow_server(
    work: Path, tmp_path: Path, spec, spec_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = _free_port()
    art = tmp_path / "art"
    mlflow_bin = Path(sys.executable).with_name("mlflow")
    log = open(tmp_path / "server.log", "wb")
    server = subprocess.Popen(
        [
            str(mlflow_bin),
            "server",
            "--backend-store-uri",
            f"sqlite:///{tmp_path / 'srv.db'}",
            "--artifacts-destination",
            str(art),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    pgid = server.pid  # start_new_session: the server leads its own process group
    uri = f"http://127.0.0.1:{port}"
    try:
        # a generous bound, only reached when the server never answers: on a loaded 2-core machine its
        # start (mlflow's imports, the SQLite migrations) took over 60 s (no pass may depend on load)
        deadline = time.monotonic() + 600
        while True:
            assert server.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "mlflow server not healthy after 600 s"
            time.sleep(0.5)

        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        node = _node("curate_shard web/0", "curate_shard", "k1")
        manifest = _manifest(node, {"docs": 7, "bytes": 99})
        run_id = mlflow_track.log_stage(spec, spec_file, node, manifest)
        assert run_id is not None

        client = MlflowClient(tracking_uri=uri)
        run = client.get_run(run_id)
        assert run.data.metrics["count/docs"] == 7 and run.data.metrics["count/bytes"] == 99
        parent = client.get_run(run.data.tags["mlflow.parentRunId"])
        assert parent.info.run_name == f"{spec.name}-{spec_key(spec)}"
        assert parent.data.params["spec.model.d_model"] == "768"
        assert "manifest.json" in _artifact_paths(client, run_id)
        assert list(art.rglob(f"{run_id}/artifacts/manifest.json"))  # proxied to --artifacts-destination
        assert not (work / "mlartifacts").exists()  # the server, not the client, stores artifacts
    finally:
        if _group_alive(pgid):
            os.killpg(pgid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(pgid, signal.SIGKILL)
            server.wait(timeout=10)
        deadline = time.monotonic() + 15
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _group_alive(pgid):
            os.killpg(pgid, signal.SIGKILL)
            time.sleep(0.5)
        log.close()
    assert not _group_alive(pgid), "a process of the mlflow server's group survived SIGTERM"


@pytest.mark.parametrize("name", ["..", ".", "a/../.."])
def test_an_experiments_artifact_folder_stays_under_mlartifacts(name, tmp_path, monkeypatch):
    """tracking.experiment '..' put its artifact folder at <work>/mlartifacts/.., the work directory itself."""
    monkeypatch.setenv("RUNLIB_WORK_DIR", str(tmp_path / "work"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    location = Path(mlflow_track._artifact_location(name).removeprefix("file://"))
    assert location.parent == (tmp_path / "work" / "mlartifacts").resolve(), location
