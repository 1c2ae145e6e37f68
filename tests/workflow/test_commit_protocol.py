"""Issue 8, problem 4: a run killed after an artifact's commit but before Snakemake recorded the job,
then `snakemake --unlock` and `snakemake --rerun-incomplete` as Snakemake advises, keeps the finished
artifact (stamps it, does not rebuild it). The work directory has spaces in its path (problem 6: every
path in the rules' shell lines is quoted)."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runlib.graph.build import build_graph
from runlib.spec import load_spec
from runlib.store.settings import done_stamp
from tests.conftest import ROOT
from tests.workflow.conftest import SNAKEMAKE, TINY

pytestmark = pytest.mark.slow
HANG_GUARD_S = 300


@pytest.fixture
def no_slurm_probe(tmp_path) -> str:
    """A PATH whose `scontrol` fails at once. The Slurm executor plugin runs `scontrol show config` when
    Snakemake imports it (snakemake_executor_plugin_slurm/job_status_query.py, get_min_job_age, 10 s
    timeout), which waits out that timeout where Slurm is installed but not running; these local runs
    do not use Slurm."""
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "scontrol").write_text("#!/bin/sh\nexit 1\n")
    (shim / "scontrol").chmod(0o755)
    return f"{shim}:{Path(sys.executable).parent}:{os.environ['PATH']}"


def snakemake_cmd(workdir: Path, *args: str) -> list[str]:
    return [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--directory", str(workdir), "--config", f"spec={TINY}", *args]


def test_kill_after_commit_then_unlock_and_rerun_incomplete_keeps_the_artifact(tmp_path, no_slurm_probe, monkeypatch):
    workdir = tmp_path / "a work dir"
    workdir.mkdir()
    monkeypatch.setenv("RUNLIB_WORK_DIR", str(workdir / "work"))
    env = {**os.environ, "PATH": no_slurm_probe}
    env.pop("MLFLOW_TRACKING_URI", None)
    node = build_graph(load_spec(TINY).spec).find("curate_shard", source="arithmetic", shard=0)
    target = str(done_stamp(node.stage, node.key))
    first = subprocess.Popen(
        snakemake_cmd(workdir, "--cores", "1", target),
        env={**env, "RUNLIB_FAULT_PAUSE_AFTER_COMMIT_S": "600"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while not node.manifest_path.exists():  # committed: the job now sleeps before its stamp
            assert first.poll() is None, "snakemake ended before the artifact was committed"
            assert time.monotonic() < deadline, "no commit within the hang guard"
            time.sleep(0.05)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(first.pid, signal.SIGKILL)  # Snakemake, its job's shell and the stage process
        first.wait()
    built = json.loads(node.manifest_path.read_text())

    for args in (["--unlock"], ["--rerun-incomplete", "--cores", "1", target]):
        proc = subprocess.run(
            snakemake_cmd(workdir, *args), env=env, capture_output=True, text=True, timeout=HANG_GUARD_S
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(node.manifest_path.read_text()) == built  # the same commit, not a rebuild
    assert Path(target).read_text() == built["content_hash"] + "\n"
    log = (workdir / "work" / "logs" / node.stage / f"{node.key}.log").read_text()
    log = log.rsplit("== runlib ", 1)[-1]  # the rerun's attempt: the log is appended to (Workflow.command)
    assert "already built" in log and "built " + str(node.dir) not in log
    assert not list(node.dir.parent.glob(".tmp-*"))
