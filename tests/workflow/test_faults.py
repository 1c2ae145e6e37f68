"""Fault injection: SIGKILL each stage kind at random instants, then run it again; the
artifact must equal the uninterrupted build's and no orphan may remain. Then corrupt one file of each
artifact kind: verification names it.

The kill instants come from a fixed seed, uniform over the stage's uninterrupted wall time (startup
included), so a kill can land anywhere from the imports to the stamps. A kill that lands after the
stage finished (a faster machine) still checks the rerun: it must find the artifact and keep it.
"""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runlib.graph.build import build_graph
from runlib.spec import load_spec
from runlib.store.artifacts import verify_artifact
from runlib.store.manifest import read_manifest
from tests.conftest import ROOT
from tests.helpers import DATA_STAGES
from tests.limits import HANG_GUARD_S
from tests.workflow.conftest import TINY

# one xdist worker runs the module, so the reference chain is built once
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("faults")]
SEED = 8
# train_phase: 2 instants (3 cost a minute of the suite); a kill in the middle of a phase and its bitwise resume
# is tests/train/test_phase_training.py::test_sigkill_mid_phase_then_resume_is_bitwise_identical
TRIALS = {
    "curate_shard": 2,
    "dedup_partition": 1,
    "curate_source": 2,
    "filter_shard": 1,
    "train_tokenizer": 2,
    "tokenize": 2,
    "train_phase": 2,
    "eval_phase": 2,
}
# files holding measurements of the job that wrote them (throughput, memory, the tokens it trained):
# compared by the fields that describe the result
MEASURED = {
    "metrics.jsonl": lambda row: {k: v for k, v in row.items() if k not in ("tokens_per_s", "mfu")},
    "run.json": lambda row: {k: row[k] for k in ("mesh", "world")},
}


def fault_spec(tmp: Path) -> Path:
    """The tiny spec with a checkpoint every 10 steps, so a killed phase resumes from the middle."""
    text = TINY.read_text()
    assert "checkpoint: {every: 50 steps, keep: 2}" in text
    path = tmp / "fault.yaml"
    path.write_text(text.replace("checkpoint: {every: 50 steps, keep: 2}", "checkpoint: {every: 10 steps, keep: 2}"))
    return path


def stage_command(node, spec: Path, work: Path) -> tuple[list[str], dict[str, str]]:
    env = {**os.environ, "RUNLIB_WORK_DIR": str(work), "RUNLIB_SPEC": str(spec), "OMP_NUM_THREADS": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    argv = [sys.executable, "-m", "runlib", node.stage.replace("_", "-"), "--key", node.key, "--no-track"]
    return argv, env


def run_to_end(node, spec: Path, work: Path) -> float:
    argv, env = stage_command(node, spec, work)
    started = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S, cwd=ROOT)
    assert proc.returncode == 0, (
        f"{node.instance}: exit {proc.returncode}\n{salient(proc.stderr)}\n{proc.stderr[-3000:]}"
    )
    return time.perf_counter() - started


SALIENT = ("terminate called", "what():", "Fatal Python error", "Traceback", "Error", "Signal", "gloo")


def salient(stderr: str, most: int = 40) -> str:
    """The lines of a failed stage's whole stderr that say why a worker died (a C++ abort's message, a
    traceback's head), which its last 3,000 characters may no longer hold."""
    lines = [line for line in stderr.splitlines() if any(word in line for word in SALIENT)]
    return "salient lines:\n" + "\n".join(lines[:most])


def kill_at(node, spec: Path, work: Path, delay_s: float) -> None:
    """Start the stage in its own process group and SIGKILL the whole group after delay_s."""
    argv, env = stage_command(node, spec, work)
    proc = subprocess.Popen(
        argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        proc.wait(timeout=delay_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    # workers of an accelerate launch may outlive their launcher by a moment: none may still write
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)


def comparable(directory: Path) -> dict:
    """An artifact's outputs as compared across builds: digests, except the timed files' other fields."""
    manifest = read_manifest(directory)
    out = {}
    for name, info in manifest.outputs.items():
        if name in MEASURED:
            text = (directory / name).read_text()
            rows = (
                [json.loads(x) for x in text.splitlines() if x.strip()]
                if name.endswith(".jsonl")
                else [json.loads(text)]
            )
            out[name] = [MEASURED[name](row) for row in rows]
        else:
            out[name] = info.model_dump()
    return out


@pytest.fixture(scope="session")  # not module: xdist may interleave other modules (a rebuild each time)
def reference(tmp_path_factory):
    """The chain to the first phase's evaluation, built uninterrupted stage by stage, with wall times."""
    tmp = tmp_path_factory.mktemp("faults")
    spec = fault_spec(tmp)
    graph = build_graph(load_spec(spec).spec)
    work = tmp / "reference"
    wanted = {stage: graph.of(stage) for stage in DATA_STAGES} | {
        "train_phase": [graph.find("train_phase", phase=0)],
        "eval_phase": [graph.find("eval_phase", phase=0)],
    }
    seconds = {}
    for nodes in wanted.values():
        for node in nodes:
            seconds[node.key] = run_to_end(node, spec, work)
    return spec, graph, work, wanted, seconds


def fresh_copy(reference_work: Path, dest: Path, node) -> Path:
    """The reference work directory without `node`'s artifact and stamps (its inputs all built)."""
    import shutil

    shutil.copytree(reference_work, dest, symlinks=True)
    shutil.rmtree(dest / "artifacts" / node.stage / node.key)
    for stamp in (dest / "done" / node.stage).glob(f"{node.key}*"):
        stamp.unlink()
    return dest


@pytest.mark.parametrize("stage", list(TRIALS))
def test_sigkill_at_random_instants_then_rerun_equals_the_uninterrupted_build(reference, tmp_path, stage):
    spec, graph, ref_work, wanted, seconds = reference
    rng = random.Random(f"{SEED}-{stage}")
    for trial in range(TRIALS[stage]):
        node = rng.choice(wanted[stage])
        expected = comparable(ref_work / "artifacts" / node.stage / node.key)
        work = fresh_copy(ref_work, tmp_path / f"trial{trial}", node)
        delay_s = rng.uniform(0.0, seconds[node.key])
        kill_at(node, spec, work, delay_s)
        run_to_end(node, spec, work)
        artifact = work / "artifacts" / node.stage / node.key
        assert comparable(artifact) == expected, f"{node.instance}, killed after {delay_s:.2f} s"
        assert verify_artifact(artifact, full=True).ok
        leftovers = [p.name for p in artifact.parent.iterdir() if p.name.startswith(".tmp-")]
        assert not leftovers, f"{node.instance}, killed after {delay_s:.2f} s: orphans {leftovers}"
        assert (work / "done" / node.stage / node.key).read_text().strip() == read_manifest(artifact).content_hash


# one file per artifact kind: the file the next stage reads
CORRUPTED_FILE = {
    "curate_shard": None,  # the largest output
    "dedup_partition": "pairs.npy",
    "curate_source": "fates.npy",
    "filter_shard": "train.jsonl",
    "train_tokenizer": "tokenizer.json",
    "tokenize": None,
    "train_phase": "final.pt",
    "eval_phase": "eval.json",
}


@pytest.mark.parametrize("how", ["flip", "truncate", "zero"])
@pytest.mark.parametrize("stage", list(CORRUPTED_FILE))
def test_corruption_of_each_artifact_kind_is_named_by_verification(reference, tmp_path, stage, how):
    import shutil

    _, _, ref_work, wanted, _ = reference
    node = wanted[stage][0]
    artifact = shutil.copytree(ref_work / "artifacts" / stage / node.key, tmp_path / node.key)
    outputs = read_manifest(artifact).outputs
    name = CORRUPTED_FILE[stage] or max(outputs, key=lambda n: outputs[n].bytes)
    path = artifact / name
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    if how == "flip":
        data[middle : middle + 64] = bytes(b ^ 0xFF for b in data[middle : middle + 64])
    elif how == "truncate":
        data = data[:middle]
    else:  # zeros over a stretch, same size
        data[middle // 2 : middle] = bytes(middle - middle // 2)
    path.write_bytes(bytes(data))
    result = verify_artifact(artifact, full=True)
    assert not result.ok and any(name in problem for problem in result.problems), result.problems
