"""Training through the project's own launcher: 2-process DDP on CPU equals one process, FSDP2, tensor,
context and pipeline parallelism equal DDP, and a phase killed with SIGKILL resumes to bitwise the same weights as an
uninterrupted run."""

import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import torch

from runlib.graph.build import build_graph
from runlib.model.transformer import Transformer
from runlib.spec import load_spec
from runlib.train import checkpoint as ckpt
from runlib.train import dist_checkpoint as dcp_ckpt
from runlib.train.launch import launch_commands
from runlib.train.phase import worker_argv
from tests.limits import HANG_GUARD_S
from tests.workflow.conftest import TINY

# one xdist worker runs this module (pyproject: --dist loadgroup), so the data stages are built once
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("phase_training")]
PHASE_JOB = Path(__file__).parent / "phase_job.py"


@pytest.fixture(autouse=True)
def _tokenized_work_dir(tokenized, monkeypatch):
    """Every test here reads the artifacts of `tokenized`'s work directory."""
    monkeypatch.setenv("RUNLIB_WORK_DIR", str(tokenized[2] / "work"))


def phase_launch(graph, node, out, scratch, processes, stop_after=None):
    """The phase's one local launch (accelerate launch of the runlib worker), as runlib.train.phase builds it."""
    out.mkdir(parents=True, exist_ok=True)
    scratch.mkdir(parents=True, exist_ok=True)
    config_file = scratch / "config.json"
    config_file.write_text(node.config.model_dump_json())
    inputs = {role: n.dir for role, n in graph.input_nodes(node).items()}
    parallel = node.config.parallel.model_copy(update={"processes_per_node": processes})
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    [launch] = launch_commands(parallel, "cpu", worker_argv(config_file, inputs, out, scratch, stop_after), env)
    return launch


def launch(graph, node, out, scratch, processes, stop_after=None, **popen):
    cmd = phase_launch(graph, node, out, scratch, processes, stop_after)
    if popen:
        return subprocess.Popen(list(cmd.argv), env=dict(cmd.env), **popen)
    return subprocess.run(list(cmd.argv), env=dict(cmd.env), capture_output=True, text=True, timeout=HANG_GUARD_S)


@pytest.fixture(scope="session")
def ddp_reference(tokenized, tmp_path_factory):
    """Phase 0's weights after 2 updates of 2-process DDP on one machine: what every layout must reproduce."""
    _, graph, workdir = tokenized
    node = graph.find("train_phase", phase=0)
    tmp = tmp_path_factory.mktemp("ddp")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RUNLIB_WORK_DIR", str(workdir / "work"))
        ddp = launch(graph, node, tmp / "out", tmp / "scratch", 2, stop_after=2)
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    return checkpoint_weights(node, tmp / "scratch" / "step-2")


def weights(path):
    return ckpt.load(path)["model"]


def checkpoint_weights(node, directory):
    """A sharded (DCP) checkpoint's weights, loaded into one unsharded model."""
    cfg = node.config
    model = Transformer(cfg.model, cfg.vocab_rows, cfg.position_rows)
    dcp_ckpt.load_checkpoint(directory, model)
    return model.state_dict()


def test_two_processes_make_the_same_update_as_one(tokenized, tmp_path):
    spec, graph, _ = tokenized
    node = graph.find("train_phase", phase=0)
    one = launch(graph, node, tmp_path / "out1", tmp_path / "s1", 1, stop_after=1)
    two = launch(graph, node, tmp_path / "out2", tmp_path / "s2", 2, stop_after=1)
    assert one.returncode == 0, one.stderr[-3000:]
    assert two.returncode == 0, two.stderr[-3000:]
    assert "rank 0 of 1" in one.stdout
    # really distributed: two ranks of one gloo world, not two independent world-1 processes
    assert "rank 0 of 2, MULTI_CPU" in two.stdout and "rank 1 of 2, MULTI_CPU" in two.stdout
    a, b = checkpoint_weights(node, tmp_path / "s1" / "step-1"), checkpoint_weights(node, tmp_path / "s2" / "step-1")
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-5, atol=1e-6)
    # and the update did something: the weights moved away from the seeded initialisation
    torch.manual_seed(spec.seed)
    init = Transformer(node.config.model, node.config.vocab_rows, node.config.position_rows).state_dict()
    assert any(not torch.equal(init[n], a[n]) for n in a)


@pytest.mark.parametrize(
    "layout, old, new, mesh",
    [
        ("fsdp", "parallelism: {sharding: none}", "parallelism: {sharding: fsdp}", {"dp_shard": 2, "tp": 1}),
        (
            "tensor",
            "parallelism: {sharding: none}\nbatch: {micro_batch: 4, grad_accum: 1,",
            "parallelism: {sharding: none, tensor: 2}\nbatch: {micro_batch: 4, grad_accum: 2,",
            {"dp_replicate": 1, "dp_shard": 1, "tp": 2},
        ),
        (
            "context",
            "parallelism: {sharding: none}\nbatch: {micro_batch: 4, grad_accum: 1,",
            "parallelism: {sharding: none, context: 2}\nbatch: {micro_batch: 4, grad_accum: 2,",
            {"dp_replicate": 1, "cp": 2},
        ),
        (
            "pipeline",
            "parallelism: {sharding: none}\nbatch: {micro_batch: 4, grad_accum: 1,",
            "parallelism: {sharding: none, pipeline: 2}\nbatch: {micro_batch: 4, grad_accum: 2,",
            {"dp_replicate": 1, "pp": 2},
        ),
        (
            "recompute",
            "parallelism: {sharding: none}",
            "parallelism: {sharding: none, activation_checkpointing: full}",
            {"dp_replicate": 2, "tp": 1},
        ),
        (
            "recompute_mlp",
            "parallelism: {sharding: none}",
            "parallelism: {sharding: fsdp, activation_checkpointing: mlp}",
            {"dp_shard": 2, "tp": 1},
        ),
    ],
)
def test_parallel_layouts_make_the_same_updates_as_ddp(tokenized, ddp_reference, tmp_path, layout, old, new, mesh):
    """The spec's layout is the one that runs (the worker prints its mesh), and it trains the same model."""
    spec, graph, _ = tokenized
    node = graph.find("train_phase", phase=0)
    _, _, variant_graph = spec_variant(tmp_path, old, new)
    variant = variant_graph.find("train_phase", phase=0)
    assert variant.key != node.key  # the layout is part of what the phase reads
    other = launch(variant_graph, variant, tmp_path / layout, tmp_path / f"{layout}-s", 2, stop_after=2)
    assert other.returncode == 0, other.stderr[-3000:]
    ran = json.loads(other.stdout.split("runlib worker: mesh ", 1)[1].splitlines()[0])
    assert {k: ran[k] for k in mesh} == mesh
    a = ddp_reference
    b = checkpoint_weights(variant, tmp_path / f"{layout}-s" / "step-2")
    for name in a:
        # Adam turns a gradient entry within rounding of zero (a rare token's embedding row) into an update of
        # up to ~lr in either direction: 5e-6 absolute, as tests/train/test_parallel.py; a missing or doubled
        # reduction moves every parameter by ~lr (tiny's 3e-3)
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=5e-6)


def test_a_pipelined_phase_ends_in_one_model_that_any_layout_loads(tokenized, tmp_path):
    """The whole phase with pipeline 2 (tied embeddings: two copies, their gradients added): its final.pt is
    the whole model (every stage's tensors, the tied pair equal), its held-out evaluations ran through the
    stages, and it ends at the DDP phase's loss."""
    spec, graph, _ = tokenized
    node = graph.find("train_phase", phase=0)
    ddp = launch(graph, node, tmp_path / "ddp", tmp_path / "ddp-s", 2)
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    pipeline = (
        "parallelism: {sharding: none}\nbatch: {micro_batch: 4, grad_accum: 1,",
        "parallelism: {sharding: none, pipeline: 2}\nbatch: {micro_batch: 4, grad_accum: 2,",
    )
    _, _, pp_graph = spec_variant(tmp_path, *pipeline)
    pp_node = pp_graph.find("train_phase", phase=0)
    pp = launch(pp_graph, pp_node, tmp_path / "pp", tmp_path / "pp-s", 2)
    assert pp.returncode == 0, pp.stderr[-3000:]
    a, b = ckpt.load(tmp_path / "ddp" / "final.pt"), ckpt.load(tmp_path / "pp" / "final.pt")
    assert a["model"].keys() == b["model"].keys() and a["optimizer"]["state"].keys() == b["optimizer"]["state"].keys()
    assert torch.equal(b["model"]["tok_embeddings.weight"], b["model"]["lm_head.weight"])
    model = Transformer(pp_node.config.model, pp_node.config.vocab_rows, pp_node.config.position_rows)
    model.load_state_dict(b["model"])  # one process loads the pipelined phase's model
    records = [json.loads(x) for x in (tmp_path / "pp" / "metrics.jsonl").read_text().splitlines()]
    ddp_records = [json.loads(x) for x in (tmp_path / "ddp" / "metrics.jsonl").read_text().splitlines()]
    held = [r for r in records if "heldout_loss_by_source" in r]
    assert held and all(math.isfinite(v) for r in held for v in r["heldout_loss_by_source"].values())
    last, ddp_last = [r for r in records if "loss" in r][-1], [r for r in ddp_records if "loss" in r][-1]
    assert abs(last["loss"] - ddp_last["loss"]) <= 1e-3 * ddp_last["loss"]
    ddp_held = [r for r in ddp_records if "heldout_loss_by_source" in r][-1]["heldout_loss_by_source"]
    assert held[-1]["heldout_loss_by_source"] == pytest.approx(ddp_held, rel=1e-3)


INTERLEAVED = "pipeline: 2, pipeline_schedule: interleaved_1f1b, pipeline_virtual_stages: 2"


def four_layers(tmp_path, parallelism: str, batch: str, processes: int):
    """TINY with 4 layers, the given parallelism and batch, on a world of `processes`: its phase 0 node."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    _, _, graph = spec_variant(
        tmp_path,
        "parallelism: {sharding: none}\nbatch: {micro_batch: 4, grad_accum: 1,",
        f"parallelism: {parallelism}\nbatch: {{{batch}",
        "  layers: 2\n",
        "  layers: 4\n",
        "devices_per_node: 2",
        f"devices_per_node: {processes}",  # the spec's world: its data-parallel degree
    )
    return graph, graph.find("train_phase", phase=0)


@pytest.fixture(scope="session")
def four_layer_1f1b(tokenized, tmp_path_factory):
    """Phase 0 of TINY with 4 layers, whole, under 1F1B over 2 stages: final.pt and the metric records."""
    tmp = tmp_path_factory.mktemp("1f1b")
    graph, node = four_layers(tmp, "{sharding: none, pipeline: 2}", "micro_batch: 4, grad_accum: 2,", 2)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RUNLIB_WORK_DIR", str(tokenized[2] / "work"))
        proc = launch(graph, node, tmp / "out", tmp / "s", 2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return ckpt.load(tmp / "out" / "final.pt"), metric_records(tmp / "out")


def metric_records(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    "name, processes, parallelism, batch",
    [
        ("none", 2, "{sharding: none, " + INTERLEAVED + "}", "micro_batch: 4, grad_accum: 2,"),
        ("fsdp", 4, "{sharding: fsdp, " + INTERLEAVED + "}", "micro_batch: 2, grad_accum: 2,"),
    ],
)
def test_an_interleaved_pipeline_trains_the_phase_as_1f1b(
    four_layer_1f1b, tmp_path, name, processes, parallelism, batch
):
    """Interleaved 1F1B with two model chunks per rank (4 layers in 4 stages: 0 and 2 on the first rank, 1 and 3
    on the second; the tied embedding's copies on stages 0 and 3), alone and over FSDP2 (each chunk its own
    FSDP root over shared modules), stopped after 2 steps and resumed from its sharded checkpoint, makes
    plain 1F1B's updates over the same 4 layers; its final.pt is the whole model, and its held-out losses
    ran through the four stages in turn. Over FSDP2 the resumed phase equals an uninterrupted one bitwise."""
    graph, node = four_layers(tmp_path, parallelism, batch, processes)
    out, scratch = tmp_path / "out", tmp_path / "s"
    stopped = launch(graph, node, out, scratch, processes, stop_after=2)
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    assert json.loads(stopped.stdout.split("runlib worker: mesh ", 1)[1].splitlines()[0])["pp"] == 2
    assert not (out / "final.pt").exists() and dcp_ckpt.latest_checkpoint(scratch) is not None
    resumed = launch(graph, node, out, scratch, processes)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "runlib worker: resumed at step 2 " in resumed.stdout
    (a, a_records), b = four_layer_1f1b, ckpt.load(out / "final.pt")
    assert a["model"].keys() == b["model"].keys() and a["optimizer"]["state"].keys() == b["optimizer"]["state"].keys()
    assert torch.equal(b["model"]["tok_embeddings.weight"], b["model"]["lm_head.weight"])
    for key in a["model"]:
        torch.testing.assert_close(a["model"][key], b["model"][key], rtol=1e-4, atol=5e-6)
    held = [
        [r["heldout_loss_by_source"] for r in recs if "heldout_loss_by_source" in r]
        for recs in (a_records, metric_records(out))
    ]
    assert held[0] and held[1][-1] == pytest.approx(held[0][-1], rel=1e-4)
    if name == "fsdp":
        whole = launch(graph, node, tmp_path / "whole", tmp_path / "whole-s", processes)
        assert whole.returncode == 0, whole.stderr[-3000:]
        c = ckpt.load(tmp_path / "whole" / "final.pt")
        assert all(torch.equal(b["model"][k], c["model"][k]) for k in c["model"])


@pytest.mark.parametrize(
    "layout, old, new",
    [
        (
            "context",
            "parallelism: {sharding: none}\nbatch: {micro_batch: 4, grad_accum: 1,",
            "parallelism: {sharding: none, context: 2}\nbatch: {micro_batch: 4, grad_accum: 2,",
        ),
        (
            "pipeline",
            "parallelism: {sharding: none}\nbatch: {micro_batch: 4, grad_accum: 1,",
            "parallelism: {sharding: none, pipeline: 2}\nbatch: {micro_batch: 4, grad_accum: 2,",
        ),
    ],
)
def test_the_mean_of_micro_batch_means_is_the_same_on_any_layout(tokenized, tmp_path, layout, old, new):
    """data.loss_normalization: micro_batch_mean (each micro-batch's own token mean, averaged): a context-parallel
    rank scores part of each micro-batch's tokens, a pipeline's last stage all of them; both make DDP's updates."""
    mean_of_means = ("  packing: document\n", "  packing: document\n  loss_normalization: micro_batch_mean\n")
    _, _, ddp_graph = spec_variant(tmp_path, *mean_of_means)
    ddp_node = ddp_graph.find("train_phase", phase=0)
    ddp = launch(ddp_graph, ddp_node, tmp_path / "ddp", tmp_path / "ddp-s", 2, stop_after=2)
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    _, _, graph = spec_variant(tmp_path, *mean_of_means, old, new)
    node = graph.find("train_phase", phase=0)
    other = launch(graph, node, tmp_path / layout, tmp_path / f"{layout}-s", 2, stop_after=2)
    assert other.returncode == 0, other.stderr[-3000:]
    a = checkpoint_weights(ddp_node, tmp_path / "ddp-s" / "step-2")
    b = checkpoint_weights(node, tmp_path / f"{layout}-s" / "step-2")
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=5e-6)


TWO_NODES = ("devices_per_node: 2", "devices_per_node: 1", "nodes: 1,", "nodes: 2,")


def phase_job(tmp_path, graph, node, name):
    """Files for tests/train/phase_job.py: the phase's config and its inputs."""
    (tmp_path / f"{name}.json").write_text(node.config.model_dump_json())
    inputs = {role: str(n.dir) for role, n in graph.input_nodes(node).items()}
    (tmp_path / f"{name}-inputs.json").write_text(json.dumps(inputs))
    return [str(tmp_path / f"{name}.json"), str(tmp_path / f"{name}-inputs.json")]


def test_two_nodes_on_loopback_train_as_two_processes_on_one_machine(tokenized, ddp_reference, tmp_path):
    """hardware.nodes: 2 outside Slurm on cpu: one accelerate launch per node on 127.0.0.1."""
    spec, graph, _ = tokenized
    reference = ddp_reference
    _, _, variant_graph = spec_variant(tmp_path, *TWO_NODES)
    variant = variant_graph.find("train_phase", phase=0)
    assert (variant.config.parallel.nodes, variant.config.parallel.processes_per_node) == (2, 1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    job = [sys.executable, str(PHASE_JOB), *phase_job(tmp_path, variant_graph, variant, "two-nodes")]
    job += [str(tmp_path / "nodes-out"), str(tmp_path / "nodes-s"), "2"]
    proc = subprocess.run(
        job, env={**env, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=HANG_GUARD_S
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rank 0 of 2, MULTI_CPU" in proc.stdout and "rank 1 of 2, MULTI_CPU" in proc.stdout
    trained = checkpoint_weights(variant, tmp_path / "nodes-s" / "step-2")
    assert all(torch.equal(reference[k], trained[k]) for k in reference)


def slurm_nodes_up() -> int:
    if shutil.which("sinfo") is None:
        return 0
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True)
    return sum(1 for s in out.stdout.split() if s in ("idle", "mixed", "allocated", "completing"))


@pytest.mark.skipif(shutil.which("sinfo") is None, reason="no Slurm here: .ci/start-slurm installs and starts one")
def test_two_slurm_nodes_train_the_phase_as_two_processes_on_one_machine(tokenized, ddp_reference, tmp_path):
    """hardware.nodes: 2 under the CI's two-node Slurm: the real worker, one accelerate launch per node."""
    assert slurm_nodes_up() >= 2, "Slurm is not up with 2 nodes (n1, n2): run .ci/start-slurm (as root)"
    spec, graph, _ = tokenized
    reference = ddp_reference
    _, _, variant_graph = spec_variant(tmp_path, *TWO_NODES)
    variant = variant_graph.find("train_phase", phase=0)
    args = [*phase_job(tmp_path, variant_graph, variant, "slurm"), str(tmp_path / "s-out"), str(tmp_path / "s-s"), "2"]
    step = " ".join(shlex.quote(x) for x in [sys.executable, str(PHASE_JOB), *args])
    name = f"runlib-phase-{uuid.uuid4().hex[:8]}"
    submit = ["sbatch", "--wait", "--parsable", "--job-name", name, "--output", str(tmp_path / "job.log")]
    submit += ["--nodes=2", "--ntasks=2", "--cpus-per-task=1", "--mem=3000", "-t", "15", "-D", str(tmp_path)]
    submit += ["--wrap", f"srun -n1 --cpus-per-task=1 --nodes=2 {step}"]  # as Snakemake's job-step plugin
    try:
        job = subprocess.run(submit, capture_output=True, text=True, timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired:
        subprocess.run(["scancel", "--name", name])
        raise
    log = (tmp_path / "job.log").read_text() if (tmp_path / "job.log").exists() else ""
    assert job.returncode == 0, f"{job.stdout}{job.stderr}\n{log[-6000:]}"
    assert "rank 0 of 2, MULTI_CPU" in log and "rank 1 of 2, MULTI_CPU" in log, log[-3000:]
    trained = checkpoint_weights(variant, tmp_path / "s-s" / "step-2")
    assert all(torch.equal(reference[k], trained[k]) for k in reference)


def test_sigkill_mid_phase_then_resume_is_bitwise_identical(tokenized, tmp_path):
    spec, graph, _ = tokenized
    node = graph.find("train_phase", phase=0)
    reference = launch(graph, node, tmp_path / "ref", tmp_path / "ref-scratch", 1)
    assert reference.returncode == 0, reference.stderr[-3000:]

    out, scratch = tmp_path / "killed", tmp_path / "killed-scratch"
    proc = launch(
        graph, node, out, scratch, 1, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.time() + 300
    while dcp_ckpt.latest_checkpoint(scratch) is None and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "training ended before its first checkpoint; the test needs a longer phase"
    os.killpg(proc.pid, signal.SIGKILL)  # no cleanup, no final save
    proc.wait()
    assert not (out / "final.pt").exists() and dcp_ckpt.latest_checkpoint(scratch) is not None

    resumed_from = int(dcp_ckpt.latest_checkpoint(scratch).name.split("-")[1])
    resumed = launch(graph, node, out, scratch, 1)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"runlib worker: resumed at step {resumed_from} " in resumed.stdout  # the log says so
    a, b = weights(tmp_path / "ref" / "final.pt"), weights(out / "final.pt")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), "resumed weights differ from the uninterrupted run"
    ref_opt, res_opt = ckpt.load(tmp_path / "ref" / "final.pt"), ckpt.load(out / "final.pt")
    assert (
        ref_opt["state"]["step"] == res_opt["state"]["step"]
        and ref_opt["state"]["tokens"] == res_opt["state"]["tokens"]
    )


def spec_variant(tmp_path, old: str, new: str, *more: str):
    """TINY with `old` replaced by `new` (and each further (old, new) pair of `more`)."""
    text = TINY.read_text()
    pairs = [(old, new), *zip(more[::2], more[1::2], strict=True)]
    for a, b in pairs:
        assert a in text, a
        text = text.replace(a, b)
    path = tmp_path / "variant.yaml"
    path.write_text(text)
    loaded = load_spec(path).spec
    return path, loaded, build_graph(loaded)


def launch_spec(graph, node, out, scratch, stop_after=None):
    return launch(graph, node, out, scratch, 1, stop_after)


def test_spike_skip_drops_batches_and_still_makes_every_update(tokenized, tmp_path):
    path, spec, graph = spec_variant(
        tmp_path,
        "spike: {action: skip}",
        "spike: {action: skip, zscore: 0.001, window: 10}",
        "monitor: {eval_every: 25 steps,",
        "monitor: {eval_every: 30 steps, log_every: 7 steps,",
        "checkpoint: {every: 50 steps, keep: 2}",
        "checkpoint: {every: 50 steps, keep: 2, state: [model, scheduler, data, rng]}",
    )
    node = graph.find("train_phase", phase=0)
    proc = launch_spec(graph, node, tmp_path / "out", tmp_path / "scratch")
    assert proc.returncode == 0, proc.stderr[-3000:]
    # monitor.log_every and eval_every: training metrics every 7 steps, held-out loss every 30 (and at the end)
    records = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r] == [*range(7, 80, 7), 80]
    assert [r["step"] for r in records if "heldout_loss_by_source" in r] == [30, 60, 80]
    assert all(math.isfinite(v) for r in records for v in r.get("heldout_loss_by_source", {}).values())
    # checkpoint.state without the optimizer: the phase's final state holds none
    saved = ckpt.load(tmp_path / "out" / "final.pt")
    assert "optimizer" not in saved and {"model", "state", "rng"} <= saved.keys()
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
    proc = launch_spec(graph, node, tmp_path / "out", tmp_path / "scratch")
    assert proc.returncode != 0
    assert "loss spikes persisted after 2 rollbacks" in proc.stderr


def test_bf16_autocast_trains_on_cpu(tokenized, tmp_path):
    path, spec, graph = spec_variant(tmp_path, "precision: {compute: fp32}", "precision: {compute: bf16}")
    node = graph.find("train_phase", phase=0)
    scratch = tmp_path / "scratch"
    proc = launch_spec(graph, node, tmp_path / "out", scratch, stop_after=8)  # logs every 4 steps
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(x) for x in (scratch / "metrics.jsonl").read_text().splitlines()]
    assert records and all(math.isfinite(r["loss"]) for r in records)
    assert torch.load(scratch / "step-8" / "extra.pt", weights_only=True)["state"]["step"] == 8


def test_weight_decay_follows_lr_shrinks_the_weights_by_lr_squared(tokenized, tmp_path):
    """optimizer.weight_decay_follows_lr (PaLM's lr^2 decay): from the same start and batch, the first update
    differs from a constant decay's only by the shrink, p0 x lr x (wd - wd x lr / peak) on decayed matrices."""
    runs = {}
    for follows in (False, True):
        extra = ", weight_decay_follows_lr: true" if follows else ""
        (tmp_path / str(follows)).mkdir()
        _, spec, graph = spec_variant(
            tmp_path / str(follows),
            "weight_decay: 0.1, grad_clip: 1.0, z_loss: 1e-4}",  # a decay large enough to measure in one step
            f"weight_decay: 10.0, grad_clip: 1.0, z_loss: 1e-4{extra}}}",
        )
        node = graph.find("train_phase", phase=0)
        proc = launch_spec(graph, node, tmp_path / f"out{follows}", tmp_path / f"s{follows}", stop_after=1)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[follows] = checkpoint_weights(node, tmp_path / f"s{follows}" / "step-1")
    cfg = node.config
    peak, wd = cfg.optimizer.lr, cfg.optimizer.weight_decay
    lr = cfg.schedule.lr_at(cfg.loader.segments[0].batch_sequences * cfg.seq_len)
    assert 0 < lr < peak / 2  # in the warmup: the two decays differ
    torch.manual_seed(spec.seed)
    init = Transformer(cfg.model, cfg.vocab_rows, cfg.position_rows).state_dict()
    decayed = [n for n, p in init.items() if p.dim() == 2]
    assert decayed
    for name, p0 in init.items():
        expected = p0 * lr * (wd - wd * lr / peak) if name in decayed else torch.zeros_like(p0)
        torch.testing.assert_close(runs[True][name] - runs[False][name], expected, rtol=0, atol=2e-7)
    assert max(float((p0 * lr * (wd - wd * lr / peak)).abs().max()) for n, p0 in init.items() if n in decayed) > 1e-5


def test_async_checkpoints_on_two_processes_hold_what_blocking_ones_do(tokenized, tmp_path):
    """checkpoint.async_save on 2 gloo processes (the writer's own process group): the checkpoints it leaves
    verify and hold, bitwise, the weights the blocking saves hold at the same steps (and training between
    them is undisturbed by the write in flight)."""
    saved = {}
    for background in (False, True):
        flag = ", async_save: true" if background else ""
        (tmp_path / str(background)).mkdir()
        _, _, graph = spec_variant(
            tmp_path / str(background),
            "checkpoint: {every: 50 steps, keep: 2}",
            f"checkpoint: {{every: 4 steps, keep: 2{flag}}}",
        )
        node = graph.find("train_phase", phase=0)
        assert node.config.checkpoint.async_save is background
        scratch = tmp_path / f"s{background}"
        proc = launch(graph, node, tmp_path / f"out{background}", scratch, 2, stop_after=10)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert sorted(p.name for p in scratch.iterdir() if p.name.startswith("step-")) == ["step-10", "step-8"]
        assert not [p for p in scratch.iterdir() if p.name.endswith(".tmp")]
        saved[background] = {}
        for step in (8, 10):
            assert dcp_ckpt.verify_checkpoint(scratch / f"step-{step}") is None
            saved[background][step] = checkpoint_weights(node, scratch / f"step-{step}")
    for step in (8, 10):
        for name, tensor in saved[False][step].items():
            assert torch.equal(tensor, saved[True][step][name]), (step, name)


def test_a_phase_on_machines_of_its_own_is_planned_launched_and_trained_on_them(tokenized, ddp_reference, tmp_path):
    """phases[].hardware: the foundation phase on one device of the run's two (twice the accumulation: the same
    global batch). Its job config and Slurm
    resources ask for one process, its planned hours double at the same device-hours, the other phases keep
    the run's two, and the phase trains in one process to the two-process run's weights (the data order
    is a function of seed and step on any world size)."""
    from runlib.graph.train_plans import node_device_hours, train_plans
    from runlib.plan import derive
    from runlib.train.launch import phase_job_resources

    spec, graph, _ = tokenized
    path, variant_spec, variant_graph = spec_variant(
        tmp_path,
        "{name: foundation, kind: foundation,",
        "{name: foundation, kind: foundation, hardware: {devices_per_node: 1}, batch: {grad_accum: 2},",
    )
    own, later = variant_graph.find("train_phase", phase=0), variant_graph.find("train_phase", phase=1)
    assert (own.config.parallel.nodes, own.config.parallel.processes_per_node) == (1, 1)
    assert later.config.parallel.processes_per_node == 2 and later.config == graph.find("train_phase", phase=1).config
    base, moved = derive(spec), derive(variant_spec)
    assert moved.phases[0].hours == pytest.approx(2 * base.phases[0].hours)
    assert moved.phases[1].hours == pytest.approx(base.phases[1].hours)
    base_hours = node_device_hours(graph.find("train_phase", phase=0), train_plans(spec))
    assert node_device_hours(own, train_plans(variant_spec)) == pytest.approx(base_hours)
    resources = phase_job_resources(own.config.parallel, "cpu", 1, moved.phases[0])
    assert resources["nodes"] == resources["tasks"] == 1 and resources["cpus_per_task"] == 1
    job = [sys.executable, str(PHASE_JOB), *phase_job(tmp_path, variant_graph, own, "own-machines")]
    job += [str(tmp_path / "own-out"), str(tmp_path / "own-s"), "2"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    proc = subprocess.run(
        job, env={**env, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=HANG_GUARD_S
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rank 0 of 1" in proc.stdout and "rank 1 of" not in proc.stdout
    trained = checkpoint_weights(own, tmp_path / "own-s" / "step-2")
    for name, tensor in ddp_reference.items():
        torch.testing.assert_close(trained[name], tensor, rtol=1e-5, atol=1e-6)
