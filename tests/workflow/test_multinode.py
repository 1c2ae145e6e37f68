"""hardware.nodes: 2 under Slurm: a job of 2 nodes runs one `accelerate launch` per node through
runlib.train.launch, and trains exactly as 2 processes on one machine.

The CI's Slurm (.ci/start-slurm) runs two slurmd on one host as nodes n1 and n2, so the job really
has 2 nodes (SLURM_NODEID 0 and 1) and the rendezvous goes to n1's NodeAddr. The job is submitted
the way snakemake-executor-plugin-slurm does for a train_phase job with nodes: 2, tasks: 2,
cpus_per_task: 1, and its job-step plugin runs the rule's command inside it as `srun -n1 ...`, so
the launcher's own srun step is nested in that one, as in a real workflow run.
"""

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from types import SimpleNamespace

import pytest

from runlib.train.launch import launch_commands, run_launches
from tests.conftest import ROOT
from tests.limits import HANG_GUARD_S

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("sinfo") is None, reason="no Slurm here: .ci/start-slurm installs and starts one"),
]
JOB = ROOT / "tests" / "workflow" / "multinode_job.py"
PROBE = ROOT / "tests" / "train" / "dist_probe.py"


def usable_nodes() -> int:
    """Nodes that are up (busy ones too: the job then waits for them)."""
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True)
    states = [line.split()[-1] for line in out.stdout.splitlines()]
    return sum(1 for s in states if s in ("idle", "mixed", "allocated", "completing"))


def test_two_slurm_nodes_train_as_two_processes_on_one_machine(tmp_path):
    assert usable_nodes() >= 2, "Slurm is not up with 2 nodes (n1, n2): run .ci/start-slurm (as root)"
    out = tmp_path / "out dir $x" / "result.json"  # the path travels through srun and bash -c unharmed
    out.parent.mkdir()
    name = f"runlib-multinode-{uuid.uuid4().hex[:8]}"
    step = f"{sys.executable} {JOB} 2 1 '{out}'"
    submit = ["sbatch", "--wait", "--parsable", "--job-name", name, "--output", str(tmp_path / "job.log")]
    submit += ["--nodes=2", "--ntasks=2", "--cpus-per-task=1", "--mem=3000", "-t", "15", "-D", str(ROOT)]
    submit += ["--wrap", f"srun -n1 --cpus-per-task=1 --nodes=2 {step}"]  # as the Snakemake job-step plugin
    start = time.monotonic()
    try:
        job = subprocess.run(submit, capture_output=True, text=True, timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired:
        subprocess.run(["scancel", "--name", name])
        raise
    seconds = time.monotonic() - start
    log = (tmp_path / "job.log").read_text() if (tmp_path / "job.log").exists() else ""
    assert job.returncode == 0, f"{job.stdout}{job.stderr}\n{log[-6000:]}"
    assert "'--nodes', '2', '--ntasks', '2', '--ntasks-per-node', '1'" in log, log
    two_nodes = json.loads(out.read_text())

    reference = tmp_path / "one machine.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["RUNLIB_WORK_DIR"] = str(tmp_path / "work")
    one = SimpleNamespace(nodes=1, processes_per_node=2)
    assert run_launches(launch_commands(one, "cpu", [str(PROBE), str(reference)], env)) == 0
    one_machine = json.loads(reference.read_text())

    print(f"Slurm job of 2 nodes: {seconds:.1f} s (submit to end)")
    assert two_nodes["world"] == 2 and two_nodes["ranks"] == [0, 1] and two_nodes["allreduce"] == 3.0
    assert two_nodes["machines"] == [0, 1]  # machine ranks from SLURM_NODEID: one per node
    assert one_machine["machines"] == [0, 0]
    assert two_nodes["weights"] == one_machine["weights"]
