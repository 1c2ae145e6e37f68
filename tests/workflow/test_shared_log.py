"""Two specs built together in one work dir share the stage jobs of their common artifacts, and so their
logs: the job that waited for the build lock once truncated the builder's log (`> log`), leaving no
trace of the build. The workflow's stage command now appends, and each attempt starts
with a line naming its pid and time.

The command is the Snakefile's own (Workflow.command), run twice at once by the shell on one log, for a
spec path that does not exist: each job takes the build lock, then fails at once with its message (no
build is needed to show what the log keeps).
"""

from __future__ import annotations

import os
import subprocess
import sys

from runlib.workflow.snake import Workflow
from tests.conftest import ROOT


def test_a_second_job_on_the_same_log_keeps_the_first(tmp_path):
    key = "0123456789abcdef"
    log = tmp_path / "logs" / "tokenize" / f"{key}.log"
    log.parent.mkdir(parents=True)
    template = Workflow.command("tokenize")
    command = template.replace("{threads}", "1").replace("{wildcards.key:q}", key).replace("{log:q}", str(log))
    env = {
        **os.environ,
        "RUNLIB_PYTHON": sys.executable,
        "RUNLIB_SPEC": str(tmp_path / "gone.yaml"),
        "RUNLIB_WORK_DIR": str(tmp_path),
    }
    first = subprocess.Popen(["bash", "-c", command], cwd=ROOT, env=env)
    second = subprocess.Popen(["bash", "-c", command], cwd=ROOT, env=env)
    assert first.wait(timeout=300) == 2 and second.wait(timeout=300) == 2
    text = log.read_text()
    heads = [line for line in text.splitlines() if line.startswith(f"== runlib tokenize --key {key}: pid ")]
    assert len(heads) == 2 and heads[0] != heads[1], text
    assert text.count("gone.yaml: SPEC001 file not found") == 2, text


def test_snakemake_deleting_the_log_before_a_job_keeps_the_earlier_attempts(tmp_path):
    """Snakemake deletes a job's declared log before running it (snakemake/jobs.py,
    Job.remove_existing_output): the rerun after a killed attempt, or a second spec's job for a shared
    artifact, unlinked the earlier attempt's log (seen after kill -9 of a training process: the rerun's
    log began at its own attempt). The declared log is a link to <key>.attempts.log, so deleting it as
    Snakemake does keeps every attempt."""
    key = "0123456789abcdef"
    log = tmp_path / "logs" / "tokenize" / f"{key}.log"
    log.parent.mkdir(parents=True)
    template = Workflow.command("tokenize")
    command = template.replace("{threads}", "1").replace("{wildcards.key:q}", key).replace("{log:q}", str(log))
    env = {
        **os.environ,
        "RUNLIB_PYTHON": sys.executable,
        "RUNLIB_SPEC": str(tmp_path / "gone.yaml"),
        "RUNLIB_WORK_DIR": str(tmp_path),
    }
    for _ in range(2):
        if log.exists() or log.is_symlink():
            log.unlink()  # what Snakemake does before each job
        assert subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, timeout=300).returncode == 2
    text = log.read_text()
    heads = [line for line in text.splitlines() if line.startswith(f"== runlib tokenize --key {key}: pid ")]
    assert len(heads) == 2, text
