"""Training through the project's own launcher: 2-process DDP on CPU equals one process, and a
phase killed with SIGKILL resumes to bitwise the same weights as an uninterrupted run."""

import os
import signal
import subprocess
import time

import pytest
import torch

from runlib.spec import load_spec
from runlib.train import checkpoint as ckpt
from runlib.train.phase import launch_command, launch_env
from runlib.workflow.graph import build_graph
from tests.workflow.conftest import TINY, snakemake

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tokenized(tmp_path_factory):
    """The tiny spec's data stages, built once for this module by real Snakemake."""
    workdir = tmp_path_factory.mktemp("train")
    os.environ["RUNLIB_WORK_DIR"] = str(workdir / "work")
    spec = load_spec(TINY).spec
    graph = build_graph(spec)
    targets = [str(n.manifest_path) for n in graph.of("tokenize")]
    proc = snakemake(workdir, TINY, "--cores", "2", *targets)
    assert proc.returncode == 0, proc.stderr[-3000:]
    yield spec, graph, workdir
    os.environ.pop("RUNLIB_WORK_DIR", None)


def launch(spec, node, out, scratch, processes, stop_after=None, **popen):
    out.mkdir(parents=True, exist_ok=True)
    cmd = launch_command(spec, str(TINY), node.key, out, processes, stop_after, scratch)
    env = launch_env(spec, processes)
    env["OMP_NUM_THREADS"] = "1"
    if popen:
        return subprocess.Popen(cmd, env=env, **popen)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


def weights(path):
    return ckpt.load(path)["model"]


def test_two_processes_make_the_same_update_as_one(tokenized, tmp_path):
    spec, graph, _ = tokenized
    node = graph.find("train_phase", phase=0)
    one = launch(spec, node, tmp_path / "out1", tmp_path / "s1", 1, stop_after=1)
    two = launch(spec, node, tmp_path / "out2", tmp_path / "s2", 2, stop_after=1)
    assert one.returncode == 0, one.stderr[-3000:]
    assert two.returncode == 0, two.stderr[-3000:]
    assert "rank 0 of 1" in one.stdout
    # really distributed: two ranks of one gloo world, not two independent world-1 processes
    assert "rank 0 of 2, MULTI_CPU" in two.stdout and "rank 1 of 2, MULTI_CPU" in two.stdout
    a, b = weights(tmp_path / "s1" / "step-1.pt"), weights(tmp_path / "s2" / "step-1.pt")
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-5, atol=1e-6)
    # and the update did something: the weights moved away from the seeded initialisation
    from runlib.model.transformer import build_model
    from runlib.plan import derive

    torch.manual_seed(spec.seed)
    init = build_model(spec, derive(spec)).state_dict()
    assert any(not torch.equal(init[n], a[n]) for n in a)


def test_sigkill_mid_phase_then_resume_is_bitwise_identical(tokenized, tmp_path):
    spec, graph, _ = tokenized
    node = graph.find("train_phase", phase=0)
    reference = launch(spec, node, tmp_path / "ref", tmp_path / "ref-scratch", 1)
    assert reference.returncode == 0, reference.stderr[-3000:]

    out, scratch = tmp_path / "killed", tmp_path / "killed-scratch"
    proc = launch(
        spec, node, out, scratch, 1, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.time() + 300
    while ckpt.latest(scratch) is None and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "training ended before its first checkpoint; the test needs a longer phase"
    os.killpg(proc.pid, signal.SIGKILL)  # no cleanup, no final save
    proc.wait()
    assert not (out / "final.pt").exists() and ckpt.latest(scratch) is not None

    resumed = launch(spec, node, out, scratch, 1)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a, b = weights(tmp_path / "ref" / "final.pt"), weights(out / "final.pt")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), "resumed weights differ from the uninterrupted run"
    ref_opt, res_opt = ckpt.load(tmp_path / "ref" / "final.pt"), ckpt.load(out / "final.pt")
    assert (
        ref_opt["state"]["step"] == res_opt["state"]["step"]
        and ref_opt["state"]["tokens"] == res_opt["state"]["tokens"]
    )


def spec_variant(tmp_path, old: str, new: str):
    text = TINY.read_text()
    assert old in text
    path = tmp_path / "variant.yaml"
    path.write_text(text.replace(old, new))
    loaded = load_spec(path).spec
    return path, loaded, build_graph(loaded)


def launch_spec(spec_path, spec, node, out, scratch):
    out.mkdir(parents=True, exist_ok=True)
    cmd = launch_command(spec, str(spec_path), node.key, out, 1, None, scratch)
    env = launch_env(spec, 1)
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


def test_spike_skip_drops_batches_and_still_makes_every_update(tokenized, tmp_path):
    import json

    path, spec, graph = spec_variant(
        tmp_path, "spike: {action: skip}", "spike: {action: skip, zscore: 0.001, window: 10}"
    )
    node = graph.find("train_phase", phase=0)
    proc = launch_spec(path, spec, node, tmp_path / "out", tmp_path / "scratch")
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads((tmp_path / "out" / "spikes.json").read_text())
    assert record["spikes"] and all(s["action"] == "skip" for s in record["spikes"])
    assert sorted(record["skipped_data_steps"]) == sorted(s["data_step"] for s in record["spikes"])
    final = ckpt.load(tmp_path / "out" / "final.pt")["state"]
    assert final["step"] == 80 and final["tokens"] == 80 * 1024  # every planned update still happened


def test_spike_rollback_gives_up_after_max_retries(tokenized, tmp_path):
    path, spec, graph = spec_variant(
        tmp_path, "spike: {action: skip}", "spike: {action: rollback, zscore: 0.001, window: 10, max_retries: 2}"
    )
    node = graph.find("train_phase", phase=0)
    proc = launch_spec(path, spec, node, tmp_path / "out", tmp_path / "scratch")
    assert proc.returncode != 0
    assert "loss spikes persisted after 2 rollbacks" in proc.stderr


def test_bf16_autocast_trains_on_cpu(tokenized, tmp_path):
    path, spec, graph = spec_variant(tmp_path, "precision: {compute: fp32}", "precision: {compute: bf16}")
    node = graph.find("train_phase", phase=0)
    out, scratch = tmp_path / "out", tmp_path / "scratch"
    out.mkdir()
    cmd = launch_command(spec, str(path), node.key, out, 1, 8, scratch)  # logs every 4 steps
    env = launch_env(spec, 1)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json
    import math

    records = [json.loads(x) for x in (scratch / "metrics.jsonl").read_text().splitlines()]
    assert records and all(math.isfinite(r["loss"]) for r in records)
    assert ckpt.load(scratch / "step-8.pt")["state"]["step"] == 8
