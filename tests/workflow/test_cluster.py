"""`snakemake --profile cluster` against a real single-node Slurm (.ci/start-slurm starts one)."""

import shutil
import subprocess

import pytest

from runlib.graph.build import build_graph
from runlib.spec import load_spec
from tests.conftest import ROOT
from tests.workflow.conftest import TINY, snakemake

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("sinfo") is None, reason="no Slurm here: .ci/start-slurm installs and starts one"),
]


def test_data_stages_run_as_slurm_jobs(workdir):
    idle = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True)
    assert idle.stdout.strip() in ("idle", "mixed"), f"Slurm is not up: {idle.stdout!r} {idle.stderr!r}"
    graph = build_graph(load_spec(TINY).spec)
    targets = [str(n.done_path) for n in graph.of("tokenize")]
    proc = snakemake(workdir, TINY, "--profile", str(ROOT / "cluster"), "--jobs", "4", *targets)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "SLURM jobid" in log  # the jobs really went through sbatch
    assert all(n.manifest_path.exists() for n in graph.of("tokenize"))
