"""Two specs built together in one work dir share the stage jobs of their common artifacts, and so their
logs: the job that waited for the build lock once truncated the builder's log (`> log`), leaving no
trace of the build (issue 28 item 15). The workflow's stage command now appends, and each attempt starts
with a line naming its pid and time.

The command is the Snakefile's own (Workflow.command), run twice by the shell on one log: a tokenize job
whose inputs are not built, which fails at once with its message (no build needed to show the log).
"""

from __future__ import annotations

import os
import subprocess
import sys

from runlib.spec import load_spec
from runlib.workflow.graph import build_graph
from runlib.workflow.snake import Workflow
from tests.conftest import ROOT

TINY = ROOT / "tests" / "fixtures" / "tiny.yaml"


def test_a_second_job_on_the_same_log_keeps_the_first(tmp_path):
    key = build_graph(load_spec(TINY).spec).of("tokenize")[0].key
    log = tmp_path / "logs" / "tokenize" / f"{key}.log"
    log.parent.mkdir(parents=True)
    template = Workflow.command("tokenize")
    command = template.replace("{threads}", "1").replace("{wildcards.key:q}", key).replace("{log:q}", str(log))
    env = {**os.environ, "RUNLIB_PYTHON": sys.executable, "RUNLIB_SPEC": str(TINY), "RUNLIB_WORK_DIR": str(tmp_path)}
    first = subprocess.Popen(["bash", "-c", command], cwd=ROOT, env=env)
    second = subprocess.Popen(["bash", "-c", command], cwd=ROOT, env=env)
    assert first.wait(timeout=300) == 2 and second.wait(timeout=300) == 2
    text = log.read_text()
    heads = [line for line in text.splitlines() if line.startswith(f"== runlib tokenize --key {key}: pid ")]
    assert len(heads) == 2 and heads[0] != heads[1], text
    assert text.count("inputs not built yet") == 2, text
