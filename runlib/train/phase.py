"""The train_phase stage: launch the phase's processes (`accelerate launch`, one per device, under `srun`
on several nodes), then commit.

The stage receives its TrainPhaseConfig and its inputs' artifact directories, never the spec: the workers
read the config from a JSON file beside the phase's checkpoints. Checkpoints inside a phase go to a
scratch directory keyed like the artifact, so a killed job resumes where its last checkpoint left off;
the artifact (final.pt, metrics.jsonl, spikes.json, run.json) appears only when the phase is complete.
When the spike bound stops the phase, the stage fails with the loop's evidence (a UserError: exit 2, no
traceback) and the checkpoints stay.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from runlib.errors import UserError
from runlib.plan.enact import train_config_refusals
from runlib.store.settings import work_dir
from runlib.train.config import TrainPhaseConfig
from runlib.train.launch import launch_commands, run_launches
from runlib.train.spikes import SPIKES_EVIDENCE


def scratch_dir(key: str) -> Path:
    return work_dir() / "scratch" / "train_phase" / key


def processes_per_node(config: TrainPhaseConfig) -> int:
    """RUNLIB_PROCESSES (machine-local, one node only), else the spec's devices per node."""
    override = os.environ.get("RUNLIB_PROCESSES")
    if not override:
        return config.parallel.processes_per_node
    if not override.isdigit() or int(override) < 1:
        raise UserError(f"RUNLIB_PROCESSES={override!r}: give a whole number of processes >= 1, or unset it")
    return int(override)


def worker_argv(
    config_file: Path, inputs: dict[str, Path], out_dir: Path, scratch: Path, stop_after: int | None = None
) -> list[str]:
    argv = ["-m", "runlib.train.worker", "--config", str(config_file), "--out", str(out_dir), "--scratch", str(scratch)]
    for role, directory in sorted(inputs.items()):
        argv += ["--input", f"{role}={directory}"]
    if stop_after is not None:
        argv += ["--stop-after", str(stop_after)]
    return argv


def launch_phase(
    config: TrainPhaseConfig,
    inputs: dict[str, Path],
    out_dir: Path,
    scratch: Path,
    stop_after: int | None = None,
    processes: int | None = None,
    env: dict[str, str] | None = None,
) -> int:
    """Write the config beside the checkpoints and run the phase's launches; returns the exit status."""
    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / SPIKES_EVIDENCE).unlink(missing_ok=True)  # a previous attempt's stop: this one decides anew
    config_file = scratch / "config.json"
    config_file.write_text(config.model_dump_json(indent=2) + "\n")
    parallel = config.parallel
    per_node = processes or processes_per_node(config)
    if per_node != parallel.processes_per_node:
        parallel = parallel.model_copy(update={"processes_per_node": per_node})
    base_env = dict(os.environ if env is None else env)
    launches = launch_commands(
        parallel, config.accelerator, worker_argv(config_file, inputs, out_dir, scratch, stop_after), base_env
    )
    return run_launches(launches)


def spike_stop(scratch: Path) -> str | None:
    """The message of the spike bound's stop (runlib.train.spikes.SpikePolicy.stop) if it ended the launch."""
    try:
        message = json.loads((scratch / SPIKES_EVIDENCE).read_text())["stopped"]["message"]
        return message if isinstance(message, str) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def train_phase(config: TrainPhaseConfig, inputs: dict[str, Path], out_dir: Path, key: str) -> dict[str, Any]:
    refused = train_config_refusals(config)  # the gate refuses these first; this guards a stage run by hand
    if refused:
        raise UserError(
            f"train_phase {config.phase_name}: the trainer cannot run this as written:\n"
            + "\n".join(f"  {r.describe()}" for r in refused)
        )
    scratch = scratch_dir(key)
    status = launch_phase(config, inputs, out_dir, scratch)
    if status != 0:
        stopped = spike_stop(scratch)
        if stopped is not None:
            raise UserError(stopped)
        raise RuntimeError(
            f"train_phase {config.phase_name}: training processes failed (exit {status}); "
            f"checkpoints kept in {scratch} for the next attempt"
        )
    records = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    spikes = json.loads((out_dir / "spikes.json").read_text())
    measured = json.loads((out_dir / "run.json").read_text())
    last: dict[str, Any] = next((r for r in reversed(records) if "loss" in r), {})
    shutil.rmtree(scratch, ignore_errors=True)
    print(f"train_phase {config.phase_name}: {measured['tokens_per_s']:,.0f} tokens/s", file=sys.stderr)
    return {
        "counts": {
            "steps": last.get("step", 0),
            "tokens": last.get("tokens", 0),
            "final_loss": last.get("loss"),
            "tokens_per_s": measured["tokens_per_s"],
            "mfu": measured["mfu"],
            "spikes": len(spikes["spikes"]),
            "processes": measured["world"],
        },
        "loss_by_source": last.get("loss_by_source", {}),
        "mesh": measured["mesh"],
        "memory": {
            "estimate_bytes_per_device": config.estimates.memory_bytes_per_device,
            "measured_peak_bytes_per_rank": measured["peak_memory_bytes"],
            "measured_kind": measured["memory_kind"],
            "estimate_over_measured": (
                config.estimates.memory_bytes_per_device / max(measured["peak_memory_bytes"])
                if measured["peak_memory_bytes"]
                else None
            ),
        },
    }
