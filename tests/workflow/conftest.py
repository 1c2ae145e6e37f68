import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.limits import HANG_GUARD_S

SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
TINY = ROOT / "tests" / "fixtures" / "tiny.yaml"


def snakemake(workdir: Path, spec: Path, *args: str, timeout: float = HANG_GUARD_S) -> subprocess.CompletedProcess:
    """Run the project's Snakefile on `spec` with `workdir` as the working and work directory."""
    env = {
        **os.environ,
        "RUNLIB_WORK_DIR": str(workdir / "work"),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    env.pop("MLFLOW_TRACKING_URI", None)
    cmd = [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--directory", str(workdir), "--config", f"spec={spec}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)


@pytest.fixture
def workdir(work: Path) -> Path:
    """The folder that holds the `work` fixture's work directory: snakemake()'s working directory."""
    return work.parent
