"""Run inside a Slurm job (tests/workflow/test_multinode.py): launch tests/train/dist_probe.py as
`hardware.nodes` machines of `processes_per_node` processes through runlib.train.launch, as the
train_phase stage does, and exit with the launches' status.

Usage: python multinode_job.py NODES PROCESSES_PER_NODE OUT.json
"""

import os
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from runlib.train.launch import launch_commands, run_launches  # noqa: E402

PROBE = Path(__file__).resolve().parents[1] / "train" / "dist_probe.py"


def main(nodes: int, per_node: int, out: str) -> int:
    parallel = SimpleNamespace(nodes=nodes, processes_per_node=per_node)
    launches = launch_commands(parallel, "cpu", [str(PROBE), out], os.environ)
    for launch in launches:
        print("launch:", launch.argv, flush=True)
    return run_launches(launches)


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]))
