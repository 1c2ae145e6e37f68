"""Run one training phase exactly as the train_phase stage launches it (runlib.train.phase.launch_phase),
from a config file: inside a Slurm job for hardware.nodes > 1 (one accelerate launch per node under
srun), or on this machine (nodes > 1 on cpu: one launch per node on 127.0.0.1).

Usage: python phase_job.py CONFIG.json INPUTS.json OUT_DIR SCRATCH_DIR STOP_AFTER
INPUTS.json maps each input role (tokenizer, tokens:<source>, previous) to its artifact directory.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from runlib.train.config import TrainPhaseConfig  # noqa: E402
from runlib.train.phase import launch_phase  # noqa: E402


def main(config: str, inputs: str, out: str, scratch: str, stop_after: str) -> int:
    cfg = TrainPhaseConfig.model_validate_json(Path(config).read_text())
    dirs = {role: Path(d) for role, d in json.loads(Path(inputs).read_text()).items()}
    Path(out).mkdir(parents=True, exist_ok=True)
    return launch_phase(cfg, dirs, Path(out), Path(scratch), stop_after=int(stop_after))


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:6]))
