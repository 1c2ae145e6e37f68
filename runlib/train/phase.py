"""The train_phase stage: launch one process per device with `accelerate launch`, then commit.

Checkpoints inside a phase go to a scratch directory keyed like the artifact, so a killed job
resumes where its last checkpoint left off; the artifact (final.pt, metrics.jsonl, spikes.json)
appears only when the phase is complete.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from runlib.workflow.settings import work_dir


def scratch_dir(key: str) -> Path:
    return work_dir() / "scratch" / "train_phase" / key


def process_count(spec) -> int:
    """Processes to launch: RUNLIB_PROCESSES (machine-local), else the spec's devices on one node."""
    override = os.environ.get("RUNLIB_PROCESSES")
    return int(override) if override else spec.hardware.nodes * spec.hardware.devices_per_node


def launch_command(
    spec,
    spec_path: str,
    key: str,
    out_dir: Path,
    processes: int,
    stop_after: int | None = None,
    scratch: Path | None = None,
) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--num_machines",
        "1",
        "--num_processes",
        str(processes),
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
    ]
    if processes > 1:
        cmd.append("--multi_gpu")  # with ACCELERATE_USE_CPU this is gloo DDP across CPU processes
    cmd += [
        "-m",
        "runlib.train.worker",
        "--spec",
        spec_path,
        "--key",
        key,
        "--out",
        str(out_dir),
        "--scratch",
        str(scratch or scratch_dir(key)),
    ]
    if stop_after is not None:
        cmd += ["--stop-after", str(stop_after)]
    return cmd


def launch_env(spec, processes: int) -> dict[str, str]:
    env = dict(os.environ)
    if spec.hardware.accelerator == "cpu":
        env["ACCELERATE_USE_CPU"] = "true"  # without it, --multi_gpu on CPU silently runs world-1 processes
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // processes)))
    env["HF_HOME"] = str(work_dir() / "hf")  # no stray ~/.cache/huggingface/accelerate/default_config.yaml
    return env


def train_phase(spec, spec_path: str, node, out_dir: Path) -> dict[str, Any]:
    processes = process_count(spec)
    proc = subprocess.run(
        launch_command(spec, spec_path, node.key, out_dir, processes), env=launch_env(spec, processes)
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"{node.instance}: training processes failed (exit {proc.returncode}); "
            f"checkpoints kept in {scratch_dir(node.key)} for the next attempt"
        )
    records = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    spikes = json.loads((out_dir / "spikes.json").read_text())
    last = records[-1] if records else {}
    shutil.rmtree(scratch_dir(node.key), ignore_errors=True)
    return {
        "counts": {
            "steps": last.get("step", 0),
            "tokens": last.get("tokens", 0),
            "final_loss": last.get("loss"),
            "tokens_per_s": last.get("tokens_per_s"),
            "spikes": len(spikes["spikes"]),
            "processes": processes,
        },
        "loss_by_source": last.get("loss_by_source", {}),
    }
