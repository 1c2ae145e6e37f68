"""runlib.train.launch: the launch commands for one machine or several, running them as one job, and
the Slurm resources of a training job."""

import json
import math
import os
import shlex
import shutil
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from runlib.errors import UserError
from runlib.plan.memory import GIB, MemoryBreakdown
from runlib.train.launch import (
    DEFAULT_MARGIN,
    PROCESS_HOST_BYTES,
    Launch,
    ResourceMargin,
    host_memory_bytes_per_node,
    launch_commands,
    phase_job_resources,
    run_launches,
    slurm_resources,
)

PROBE = Path(__file__).with_name("dist_probe.py")
WORKER = ["-m", "runlib.train.worker", "--config", "/w/config.json"]


def parallel(nodes: int, per_node: int) -> SimpleNamespace:
    return SimpleNamespace(nodes=nodes, processes_per_node=per_node)


def local_env(tmp_path: Path) -> dict[str, str]:
    """This process's environment outside any Slurm job, with the work directory under tmp_path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    return {**env, "RUNLIB_WORK_DIR": str(tmp_path / "work")}


def option(argv, name: str) -> str:
    return argv[argv.index(name) + 1]


# ---- the commands


def test_one_machine_on_cpu_is_one_accelerate_launch(tmp_path):
    base = local_env(tmp_path)
    base.pop("OMP_NUM_THREADS", None)
    before = dict(base)
    [launch] = launch_commands(parallel(1, 2), "cpu", WORKER, base)
    argv = list(launch.argv)
    assert argv[:3] == [sys.executable, "-m", "accelerate.commands.launch"]
    assert option(argv, "--num_machines") == "1" and option(argv, "--num_processes") == "2"
    assert option(argv, "--mixed_precision") == "no" and option(argv, "--dynamo_backend") == "no"
    assert "--multi_gpu" in argv and "--machine_rank" not in argv
    assert argv[-len(WORKER) :] == WORKER
    assert launch.env["ACCELERATE_USE_CPU"] == "true"
    assert launch.env["HF_HOME"] == str((tmp_path / "work" / "hf").resolve())
    assert launch.env["OMP_NUM_THREADS"] == str(max(1, (os.cpu_count() or 1) // 2))
    assert base == before  # the caller's environment is left alone


def test_one_process_is_not_multi_gpu_and_a_set_thread_count_is_kept(tmp_path):
    [launch] = launch_commands(parallel(1, 1), "cpu", WORKER, {**local_env(tmp_path), "OMP_NUM_THREADS": "3"})
    assert "--multi_gpu" not in launch.argv
    assert launch.env["OMP_NUM_THREADS"] == "3"


def test_gpu_machine_does_not_force_the_cpu(tmp_path):
    base = local_env(tmp_path)
    base.pop("ACCELERATE_USE_CPU", None)
    [launch] = launch_commands(parallel(1, 8), "h100-sxm", WORKER, base)
    assert option(list(launch.argv), "--num_processes") == "8" and "--multi_gpu" in launch.argv
    assert "ACCELERATE_USE_CPU" not in launch.env


def test_several_machines_on_cpu_outside_slurm_are_local_launches_on_loopback(tmp_path):
    launches = launch_commands(parallel(3, 2), "cpu", WORKER, local_env(tmp_path))
    assert len(launches) == 3
    argvs = [list(x.argv) for x in launches]
    assert [option(a, "--machine_rank") for a in argvs] == ["0", "1", "2"]
    assert {option(a, "--main_process_ip") for a in argvs} == {"127.0.0.1"}
    assert len({option(a, "--main_process_port") for a in argvs}) == 1
    assert all(option(a, "--num_machines") == "3" and option(a, "--num_processes") == "6" for a in argvs)
    assert all("--multi_gpu" in a and a[-len(WORKER) :] == WORKER for a in argvs)
    # the three launches share this machine's cores
    assert launches[0].env["OMP_NUM_THREADS"] == str(max(1, (os.cpu_count() or 1) // 3 // 2)) or (
        "OMP_NUM_THREADS" in os.environ
    )


def test_one_process_per_machine_is_still_distributed(tmp_path):
    launches = launch_commands(parallel(2, 1), "cpu", WORKER, local_env(tmp_path))
    assert all("--multi_gpu" in x.argv for x in launches)  # world 2: a process group, not a plain python


def test_several_gpu_machines_outside_slurm_are_refused(tmp_path):
    with pytest.raises(UserError, match=r"hardware\.nodes: 2") as info:
        launch_commands(parallel(2, 8), "h100-sxm", WORKER, local_env(tmp_path))
    assert "--profile cluster" in str(info.value) and "hardware.nodes: 1" in str(info.value)


def test_a_slurm_job_with_fewer_nodes_than_the_spec_is_refused(tmp_path):
    env = {**local_env(tmp_path), "SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "1", "SLURM_JOB_NODELIST": "n1"}
    with pytest.raises(UserError, match=r"hardware\.nodes: 2, but Slurm job 7 has 1 node"):
        launch_commands(parallel(2, 1), "cpu", WORKER, env)


@pytest.mark.skipif(shutil.which("scontrol") is None, reason="no scontrol here: .ci/start-slurm installs Slurm")
def test_slurm_step_runs_one_launch_per_node_and_quotes_every_argument(tmp_path):
    hostile = ["/data/my run/config.json", "$(touch pwned)", "a;b", "'quoted'", "$SLURM_NODEID"]
    env = {
        **local_env(tmp_path),
        "SLURM_JOB_ID": "1234",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_JOB_NODELIST": "gpu[07-08]",
        "SLURM_CPUS_PER_TASK": "16",
        "SLURM_NTASKS": "1",  # the enclosing step's: must not reach the new step
    }
    [launch] = launch_commands(parallel(2, 8), "h100-sxm", ["tests/x.py", *hostile], env)
    argv = list(launch.argv)
    assert argv[0] == "srun" and argv[-3:-1] == ["bash", "-c"]
    srun = argv[: argv.index("bash")]
    assert option(srun, "--nodes") == "2" and option(srun, "--ntasks") == "2"
    assert option(srun, "--ntasks-per-node") == "1" and option(srun, "--cpus-per-task") == "16"
    assert option(srun, "--nodelist") == "gpu07,gpu08"  # node 0 of the step is the rendezvous host
    assert "--overlap" in srun and "--kill-on-bad-exit=1" in srun
    assert launch.env["SLURM_JOB_ID"] == "1234" and "SLURM_NTASKS" not in launch.env
    assert launch.env["OMP_NUM_THREADS"] == "2" or "OMP_NUM_THREADS" in os.environ  # 16 cores, 8 processes
    # the task's shell sees exactly these words: only the machine rank is left for it to expand
    words = shlex.split(argv[-1])
    assert words[0] == "exec"
    accelerate = words[1:]
    assert option(accelerate, "--num_machines") == "2" and option(accelerate, "--num_processes") == "16"
    assert option(accelerate, "--machine_rank") == "$SLURM_NODEID"
    assert option(accelerate, "--main_process_ip") == "gpu07"  # first host; not a node of this Slurm
    assert option(accelerate, "--main_process_port") == str(29500 + 1234 % 1000)
    assert accelerate[-len(hostile) - 1 :] == ["tests/x.py", *hostile]
    assert '"$SLURM_NODEID"' in argv[-1] and "'$SLURM_NODEID'" in argv[-1]  # expanded once, the argument never


# ---- running them


def test_run_launches_returns_zero_when_all_succeed():
    launches = [Launch(("bash", "-c", "exit 0"), dict(os.environ)) for _ in range(3)]
    assert run_launches(launches) == 0


def test_a_failing_launch_stops_the_others_and_its_status_is_returned(tmp_path):
    # the survivors stand for machines waiting in a collective: a child that waits on a grandchild
    pids = tmp_path / "pids"
    pids.mkdir()
    waiting = f"sleep 300 & echo $! > {pids}/$$; wait"
    launches = [
        Launch(("bash", "-c", waiting), dict(os.environ)),
        Launch(("bash", "-c", "sleep 1; exit 3"), dict(os.environ)),
        Launch(("bash", "-c", waiting), dict(os.environ)),
    ]
    start = time.monotonic()
    assert run_launches(launches, grace_s=5) == 3
    assert time.monotonic() - start < 15
    sleepers = [int(p.read_text()) for p in pids.iterdir()]
    assert len(sleepers) == 2
    time.sleep(0.2)
    for pid in sleepers:  # the grandchildren went with their launch's process group
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


def test_a_launch_that_ignores_sigterm_is_killed_after_the_grace_period():
    stubborn = Launch(("bash", "-c", "trap '' TERM; sleep 300 & wait; sleep 300"), dict(os.environ))
    failing = Launch(("bash", "-c", "exit 5"), dict(os.environ))
    start = time.monotonic()
    assert run_launches([stubborn, failing], grace_s=1) == 5
    assert time.monotonic() - start < 10


# ---- several machines really train as one (gloo on this machine)


def probe(tmp_path: Path, nodes: int, per_node: int, name: str) -> tuple[dict, float]:
    out = tmp_path / f"{name} $x.json"  # a space and a dollar: argv, not a shell
    launches = launch_commands(parallel(nodes, per_node), "cpu", [str(PROBE), str(out)], local_env(tmp_path))
    start = time.monotonic()
    status = run_launches(launches, grace_s=10)
    seconds = time.monotonic() - start
    assert status == 0
    return json.loads(out.read_text()), seconds


@pytest.mark.slow
def test_two_machines_on_loopback_equal_two_processes_on_one(tmp_path):
    two_machines, t2 = probe(tmp_path, 2, 1, "machines")
    one_machine, t1 = probe(tmp_path, 1, 2, "processes")
    print(f"2 machines x 1 process: {t2:.1f} s; 1 machine x 2 processes: {t1:.1f} s")
    for result in (two_machines, one_machine):
        assert result["world"] == 2 and result["ranks"] == [0, 1] and result["allreduce"] == 3.0
    assert two_machines["machines"] == [0, 1]  # torchrun's node rank: really two machines
    assert one_machine["machines"] == [0, 0]
    assert two_machines["weights"] == one_machine["weights"]  # bitwise: a sum of two terms is commutative


# ---- Slurm resources from the plan


def test_resources_of_a_cpu_job():
    r = slurm_resources(1, 2, "cpu", 2, 3 * GIB, 0.5)
    assert r == {"nodes": 1, "tasks": 1, "cpus_per_task": 2, "mem_mb": math.ceil(3 * 1024 * 1.25), "runtime": 55}


def test_resources_of_a_multi_node_gpu_job_ask_gpus_per_node():
    r = slurm_resources(16, 8, "h100-sxm", 8, 100 * GIB, 10.0)
    assert r["nodes"] == 16 and r["tasks"] == 16 and r["cpus_per_task"] == 8
    assert r["gres"] == "gpu:8" and "gpu" not in r  # `gpu` would be --gpus, a total over the job
    assert r["tasks_per_gpu"] == 0  # else the Slurm plugin submits --ntasks-per-gpu=16
    assert r["runtime"] == 10 * 60 * 1.5 + 10
    assert r["mem_mb"] == 128000


def test_runtime_margin_floor_and_unknown_estimate():
    assert slurm_resources(1, 1, "cpu", 1, 0, 0.0)["runtime"] == DEFAULT_MARGIN.runtime_min_minutes
    assert slurm_resources(1, 1, "cpu", 1, 0, math.inf)["runtime"] == DEFAULT_MARGIN.runtime_unknown_minutes
    assert slurm_resources(1, 1, "cpu", 1, 0, 0.0)["mem_mb"] == DEFAULT_MARGIN.memory_min_mb
    tight = ResourceMargin(runtime_factor=1.0, runtime_extra_minutes=0, runtime_min_minutes=1, memory_factor=1.0)
    r = slurm_resources(1, 1, "cpu", 1, 10_000 * 2**20, 2.0, tight)
    assert r["runtime"] == 120 and r["mem_mb"] == 10_000
    assert slurm_resources(1, 1, "cpu", 1, 0, 1 / 60 / 7, tight)["runtime"] == 1  # ceil, never 0


def breakdown(**gib: float) -> MemoryBreakdown:
    fields = ("weights", "master_weights", "gradients", "optimizer_states", "activations", "logits", "buffers")
    return MemoryBreakdown(**{f: gib.get(f, 0.0) * GIB for f in fields}, runtime_overhead=gib.get("overhead", 0) * GIB)


def test_host_memory_on_cpu_is_the_whole_device_estimate_per_process():
    m = breakdown(weights=1, gradients=1, optimizer_states=2, activations=3, overhead=0.25)
    assert host_memory_bytes_per_node(m, "cpu", 2) == 2 * (7.25 * GIB + PROCESS_HOST_BYTES["cpu"])


def test_host_memory_on_gpu_is_the_checkpointed_states_per_process():
    m = breakdown(weights=2, master_weights=4, gradients=2, optimizer_states=8, activations=30, overhead=1)
    assert host_memory_bytes_per_node(m, "h100-sxm", 8) == 8 * (14 * GIB + PROCESS_HOST_BYTES["gpu"])


def test_phase_job_resources_use_the_phase_plan():
    phase = SimpleNamespace(memory=breakdown(weights=1, activations=1), hours=2.0)
    r = phase_job_resources(parallel(1, 2), "cpu", 1, phase)  # RUNLIB_PROCESSES=1 on a 2-device spec
    assert r["cpus_per_task"] == 1 and r["runtime"] == 190
    assert r["mem_mb"] == math.ceil((2 * GIB + PROCESS_HOST_BYTES["cpu"]) * 1.25 / 2**20)
