"""Start a training phase's processes on one machine or several: the commands, and running them.

One `accelerate launch` runs per machine; it starts `processes_per_node` worker processes there
(torchrun underneath), and machine 0 hosts the rendezvous. `launch_commands` builds the commands
(pure but for reading the Slurm node list); `run_launches` runs them as one job.

- nodes == 1: one `accelerate launch --num_machines 1` here.
- nodes > 1 inside a Slurm allocation (SLURM_JOB_ID set): one `srun` step of one task per node; each
  task runs `accelerate launch --num_machines N --machine_rank $SLURM_NODEID`, the rendezvous on the
  first host of the job's node list (`scontrol show hostnames`), reached at its Slurm NodeAddr. The
  step is `--overlap` because Snakemake's Slurm job-step executor (snakemake-executor-plugin-slurm-
  jobstep 0.6.1, `run_job`) already runs the rule's shell line as a step (`srun -n1 ...`) holding the
  job's CPUs and memory; without it the nested step would wait for them forever.
- nodes > 1 outside Slurm, accelerator cpu: N launches here on 127.0.0.1, machine ranks 0..N-1,
  one port: the local stand-in for N machines (same code path in the workers: they see
  num_machines N, a node rank and a remote rendezvous, all over loopback).
- nodes > 1 outside Slurm on a GPU: refused (UserError), nothing else can start the other machines.

No spec string reaches a shell unquoted: commands are argv lists; the one shell line (the srun
task's, which must expand the rank variable on each node) is built with shlex.join.

`slurm_resources` turns the plan's figures of a phase into the Snakemake resources of its job.
No torch import here (the workflow imports this module to build the DAG).
"""

from __future__ import annotations

import math
import os
import random
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import NoReturn, Protocol

from runlib.errors import UserError
from runlib.plan.derive import PhasePlan
from runlib.plan.memory import MemoryBreakdown
from runlib.util.lifetime import preexec_die_with_parent

ACCELERATE = ("-m", "accelerate.commands.launch")
DEFAULT_PORT = 29500  # torchrun's and Accelerate's default rendezvous port
SLURM_PORT_SPAN = 1000  # under Slurm: port DEFAULT_PORT + job id mod this, so jobs sharing a node differ
# what a nested srun may keep of its caller's SLURM_* variables: the allocation's identity. The rest
# (the enclosing step's task count, node count, CPUs, GRES) would silently constrain the new step.
# Same list as snakemake-executor-plugin-slurm-jobstep 0.6.1 (`run_job`, keep_slurm).
SLURM_IDENTITY = frozenset(
    {
        "SLURM_JOB_ID",
        "SLURM_JOBID",
        "SLURM_ARRAY_JOB_ID",
        "SLURM_ARRAY_TASK_ID",
        "SLURM_ARRAY_TASK_MIN",
        "SLURM_ARRAY_TASK_MAX",
        "SLURM_ARRAY_TASK_STEP",
        "SLURM_CLUSTER_NAME",
        "SLURM_SUBMIT_DIR",
        "SLURM_SUBMIT_HOST",
    }
)


class Parallel(Protocol):
    """What the launcher reads of a phase's ParallelConfig (runlib.train.config)."""

    @property
    def nodes(self) -> int: ...

    @property
    def processes_per_node(self) -> int: ...


@dataclass(frozen=True)
class Launch:
    """One command to start: its argv (no shell) and its complete environment."""

    argv: tuple[str, ...]
    env: Mapping[str, str]


def launch_commands(
    parallel: Parallel,
    accelerator: str,
    worker_argv: Sequence[str],
    base_env: Mapping[str, str],
    *,
    port: int | None = None,
) -> list[Launch]:
    """The commands that start the phase's `nodes * processes_per_node` worker processes.

    worker_argv: what `accelerate launch` runs in each process, after its own options, e.g.
      ["-m", "runlib.train.worker", "--config", path, ...] or [script.py, args...].
    base_env: the environment to start from (usually os.environ); it is copied, never changed.
      RUNLIB_WORK_DIR in it places HF_HOME (default ./work, as runlib.store.settings).
    port: the rendezvous port (default: a free one here; under Slurm 29500 + job id mod 1000).
    """
    nodes, per_node = int(parallel.nodes), int(parallel.processes_per_node)
    if nodes < 1 or per_node < 1:
        raise UserError(f"hardware: nodes ({nodes}) and processes per node ({per_node}) must be at least 1")
    env = dict(base_env)
    if accelerator == "cpu":
        env["ACCELERATE_USE_CPU"] = "true"  # without it, --multi_gpu on CPU silently runs world-1 processes
    # no stray ~/.cache/huggingface/accelerate/default_config.yaml changes what accelerate launch does
    env["HF_HOME"] = str((Path(env.get("RUNLIB_WORK_DIR", "work")) / "hf").resolve())
    if nodes == 1:
        env["OMP_NUM_THREADS"] = str(_threads(env, per_node, 1))
        return [Launch(tuple(_accelerate(1, per_node, port or free_port()) + list(worker_argv)), env)]
    if env.get("SLURM_JOB_ID"):
        return [_slurm_launch(nodes, per_node, accelerator, worker_argv, env, port)]
    if accelerator != "cpu":
        raise UserError(
            f"hardware.nodes: {nodes} needs {nodes} machines started together, and outside a Slurm job "
            f"nothing starts them. Run the workflow on the cluster (`snakemake --profile cluster`: each "
            f"train_phase job asks Slurm for {nodes} nodes and launches one `accelerate launch` per node), "
            "or set hardware.nodes: 1 to train on this machine only."
        )
    # local stand-in for several machines: every "machine" is a launch here, talking over loopback
    env["OMP_NUM_THREADS"] = str(_threads(env, per_node, nodes))
    port = port or free_port()
    return [
        Launch(tuple(_accelerate(nodes, per_node, port, rank=r, host="127.0.0.1") + list(worker_argv)), env)
        for r in range(nodes)
    ]


def _accelerate(
    nodes: int, per_node: int, port: int, rank: int | str | None = None, host: str | None = None
) -> list[str]:
    world = nodes * per_node
    argv = [sys.executable, *ACCELERATE, "--num_machines", str(nodes), "--num_processes", str(world)]
    argv += ["--mixed_precision", "no", "--dynamo_backend", "no"]
    if world > 1:
        argv.append("--multi_gpu")  # with ACCELERATE_USE_CPU this is gloo across CPU processes
    if rank is not None:
        argv += ["--machine_rank", str(rank), "--main_process_ip", str(host)]
    return argv + ["--main_process_port", str(port)]


def _threads(env: Mapping[str, str], per_node: int, launches_here: int) -> int:
    """OpenMP threads per process: the CPUs of this machine's share, split among its processes. The
    share: OMP_NUM_THREADS as the caller set it (Snakemake sets it to the job's `threads`), else
    Slurm's cpus-per-task, else this host's cores; over the launches that share this machine. More
    threads than cores makes every process spin-wait on the others."""
    budget = int(env.get("OMP_NUM_THREADS") or 0) or int(env.get("SLURM_CPUS_PER_TASK") or 0) or (os.cpu_count() or 1)
    return max(1, budget // launches_here // per_node)


def _slurm_launch(
    nodes: int, per_node: int, accelerator: str, worker_argv: Sequence[str], env: dict[str, str], port: int | None
) -> Launch:
    job_nodes = int(env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES") or 1)
    if job_nodes < nodes:
        raise UserError(
            f"hardware.nodes: {nodes}, but Slurm job {env['SLURM_JOB_ID']} has {job_nodes} node(s). "
            f"Submit it with --nodes {nodes} (`snakemake --profile cluster` does), or set hardware.nodes: "
            f"{job_nodes}."
        )
    hosts = slurm_hostnames(env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or "")
    cpus = env.get("SLURM_CPUS_PER_TASK")  # srun 22.05 no longer reads it from the environment: pass it on
    env["OMP_NUM_THREADS"] = str(_threads(env, per_node, 1))
    port = port or DEFAULT_PORT + int(env["SLURM_JOB_ID"]) % SLURM_PORT_SPAN
    head = _accelerate(nodes, per_node, port)
    # the machine rank differs per task: the task's shell expands it; everything else is quoted
    line = f'exec {shlex.join(head)} --machine_rank "$SLURM_NODEID" --main_process_ip {shlex.quote(node_address(hosts[0]))} '
    line += shlex.join(list(worker_argv))
    # the step's node 0 (machine rank 0) must be the rendezvous host: name the step's nodes, in order
    srun = ["srun", "--nodes", str(nodes), "--ntasks", str(nodes), "--ntasks-per-node", "1"]
    srun += ["--nodelist", ",".join(hosts[:nodes])]
    srun += ["--kill-on-bad-exit=1", "--overlap", "--export=ALL"]
    if cpus:
        srun += ["--cpus-per-task", cpus]
    step_env = {k: v for k, v in env.items() if not k.startswith(("SLURM_", "SRUN_", "SBATCH_")) or k in SLURM_IDENTITY}
    return Launch(tuple(srun + ["bash", "-c", line]), step_env)


def slurm_hostnames(nodelist: str) -> list[str]:
    """The hosts of a Slurm node list ("gpu[01-03],login1"), in order, as `scontrol show hostnames`."""
    if not nodelist:
        raise UserError("inside a Slurm job without SLURM_JOB_NODELIST: cannot find the rendezvous host")
    out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True)
    hosts = out.stdout.split()
    if not hosts:
        raise UserError(f"`scontrol show hostnames {nodelist}` printed no host")
    return hosts


def node_address(node: str) -> str:
    """The address Slurm reaches a node at (its NodeAddr; the node name when scontrol does not say)."""
    out = subprocess.run(["scontrol", "show", "node", "-o", node], capture_output=True, text=True)
    for field in out.stdout.split():
        if field.startswith("NodeAddr="):
            return field.removeprefix("NodeAddr=") or node
    return node


def free_port() -> int:
    """A TCP port free on this machine now, below the kernel's ephemeral range (where outgoing
    connections take their source ports): there, a worker retrying to reach the rendezvous before it
    listens could connect to itself (TCP simultaneous open) or a connection elsewhere could take it."""
    low = 32768
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    rng = random.Random()
    for _ in range(100):
        port = rng.randrange(20000, max(20001, low))
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # a crowded range: let the OS choose
        s.bind(("", 0))
        return int(s.getsockname()[1])


def run_launches(launches: Sequence[Launch], *, grace_s: float = 30.0, poll_s: float = 0.2) -> int:
    """Start every launch, wait for all; 0 when all succeed, else the first non-zero exit seen.

    When one fails, the others would wait in a collective until the gloo/NCCL timeout (30 min by
    default): they are stopped at once (SIGTERM to each launch's process group, SIGKILL after
    grace_s). The same happens when this process is interrupted or terminated.
    """
    procs: list[subprocess.Popen[bytes]] = []
    previous = None
    if threading.current_thread() is threading.main_thread():
        # a cancelled Slurm job or Snakemake stopping a job sends SIGTERM: stop the launches too
        previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        for launch in launches:
            # its own process group: the launch's whole tree (torchrun, workers) can be signalled at once
            # and it dies with this process, even by SIGKILL (runlib.util.lifetime)
            procs.append(
                subprocess.Popen(
                    list(launch.argv), env=dict(launch.env), start_new_session=True, preexec_fn=preexec_die_with_parent
                )
            )
        first = 0
        running = set(range(len(procs)))
        while running:
            for i in sorted(running):
                code = procs[i].poll()
                if code is None:
                    continue
                running.discard(i)
                if code != 0 and first == 0:
                    first = code
                    _stop([procs[j] for j in running], grace_s)
            if running:
                time.sleep(poll_s)
        return first
    finally:
        _stop([p for p in procs if p.poll() is None], grace_s)
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


class _Terminated(SystemExit):
    pass


def _raise_terminated(signum: int, frame: FrameType | None) -> NoReturn:
    raise _Terminated(128 + signum)


def _stop(procs: Sequence[subprocess.Popen[bytes]], grace_s: float) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + grace_s
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.05)
        if all(p.poll() is not None for p in procs):
            return


# ---------------------------------------------------------------------------------------------
# Slurm resources of a training job, from the plan


@dataclass(frozen=True)
class ResourceMargin:
    """How much more than the plan's estimate a job asks for. The estimates assume the spec's MFU
    and the plan's memory model; a job that outlives its time limit is killed and resumes from its
    last checkpoint on the retry (cluster/config.yaml: retries), so the margin trades queue time
    against lost work, not correctness."""

    runtime_factor: float = 1.5
    """Runtime = estimated wall time x this + runtime_extra_minutes."""
    runtime_extra_minutes: float = 10.0
    """Start-up (imports, process group, data loading) and the final checkpoint."""
    runtime_min_minutes: int = 15
    """Floor of the time limit."""
    runtime_unknown_minutes: int = 24 * 60
    """Time limit when the plan cannot estimate the wall time (no peak FLOP/s known)."""
    memory_factor: float = 1.25
    """Host memory = the estimate per node x this."""
    memory_min_mb: int = 2000
    """Floor of the host memory per node."""


DEFAULT_MARGIN = ResourceMargin()
# host memory of one training process besides its model states: the interpreter with torch and
# accelerate, the data loader, allocator slack. CPU: 0.31 GiB peak RSS measured for torch 2.13 +
# accelerate + a gloo process group (tests/train/dist_probe.py), 1 GiB allowed for model code and data.
# GPU: the CUDA context, NCCL and pinned staging buffers on the host side; 4 GiB allowed (not measured)
PROCESS_HOST_BYTES = {"cpu": 1 * 2**30, "gpu": 4 * 2**30}


def host_memory_bytes_per_node(memory: MemoryBreakdown, accelerator: str, processes_per_node: int) -> float:
    """Host (CPU) memory one node's training processes need, from the plan's per-device breakdown
    (runlib.plan.memory.MemoryBreakdown):
    - cpu: the device is the host, so each process holds its whole per-device estimate (memory.total);
    - GPU: each process keeps its shard of weights, master weights and optimizer states on the host
      once, when a checkpoint is staged for writing (torch.distributed.checkpoint copies device tensors
      to CPU before the file write).
    Plus PROCESS_HOST_BYTES per process."""
    if accelerator == "cpu":
        per_process = memory.total + PROCESS_HOST_BYTES["cpu"]
    else:
        per_process = memory.weights + memory.master_weights + memory.optimizer_states + PROCESS_HOST_BYTES["gpu"]
    return processes_per_node * per_process


def slurm_resources(
    nodes: int,
    devices_per_node: int,
    accelerator: str,
    processes_per_node: int,
    host_memory_bytes_estimate: float,
    estimated_hours: float,
    margin: ResourceMargin = DEFAULT_MARGIN,
) -> dict[str, int | str]:
    """Snakemake resources of one train_phase job (snakemake-executor-plugin-slurm 2.x names):

    nodes = hardware.nodes; tasks = nodes (one `accelerate launch` per node, which starts the node's
    processes itself); cpus_per_task = processes_per_node (a core per process);
    mem_mb (per node, sbatch --mem) = ceil(host_memory_bytes_estimate x memory_factor / 2^20), at least
    memory_min_mb; runtime (minutes) = ceil(estimated_hours x 60 x runtime_factor + runtime_extra_minutes),
    at least runtime_min_minutes (runtime_unknown_minutes when the estimate is not finite).
    GPUs: gres "gpu:<devices_per_node>", which Slurm counts per node (the plugin's `gpu` resource is
    --gpus, a total over the job). tasks_per_gpu 0 stops the plugin from turning `tasks` into
    --ntasks-per-gpu for a GPU job (submit_string.py); sbatch then places one task per node.
    """
    if estimated_hours is not None and math.isfinite(estimated_hours):
        minutes = estimated_hours * 60 * margin.runtime_factor + margin.runtime_extra_minutes
        runtime = max(margin.runtime_min_minutes, math.ceil(minutes))
    else:
        runtime = margin.runtime_unknown_minutes
    mem_mb = max(margin.memory_min_mb, math.ceil(host_memory_bytes_estimate * margin.memory_factor / 2**20))
    resources: dict[str, int | str] = {
        "nodes": nodes,
        "tasks": nodes,
        "cpus_per_task": processes_per_node,
        "mem_mb": mem_mb,
        "runtime": runtime,
    }
    if accelerator != "cpu":
        resources["gres"] = f"gpu:{devices_per_node}"
        resources["tasks_per_gpu"] = 0
    return resources


def phase_job_resources(
    parallel: Parallel,
    accelerator: str,
    processes_per_node: int,
    phase: PhasePlan,
    margin: ResourceMargin = DEFAULT_MARGIN,
) -> dict[str, int | str]:
    """slurm_resources of one phase's job: `phase` is its runlib.plan.derive.PhasePlan (memory, hours);
    processes_per_node may differ from the devices (RUNLIB_PROCESSES on a CPU machine)."""
    host = host_memory_bytes_per_node(phase.memory, accelerator, processes_per_node)
    return slurm_resources(
        parallel.nodes, parallel.processes_per_node, accelerator, processes_per_node, host, phase.hours, margin
    )
