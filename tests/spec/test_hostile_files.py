"""A spec or config that is a FIFO, a device or a kernel file: refused with exit 2 naming
it, never waited on. Before, `open()` of a FIFO blocked until a writer came, so audit, diff, shrink,
import and the Snakemake gate all hung forever.

The commands run in-process (runlib.cli.main, and the Workflow class the Snakefile builds) under a hang
guard: SIGALRM far above the milliseconds each refusal takes interrupts a blocked open() (PEP 475: a
handler that raises ends the retried system call), so a hang on the old code fails the test.
"""

from __future__ import annotations

import os

import pytest

from tests.conftest import ROOT
from tests.helpers import cli_refused

BASE = ROOT / "runlib" / "audit" / "cases_base.yaml"


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "spec.yaml"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("command", ["audit", "diff", "shrink", "import", "audit /dev/zero"])
def test_fifo_or_device_exits_2_naming_it(command, fifo, tmp_path, capsys):
    argv = {
        "audit": ["audit", str(fifo)],
        "diff": ["diff", str(BASE), str(fifo)],
        "shrink": ["shrink", str(fifo), "-o", str(tmp_path / "small.yaml")],
        "import": ["import", str(fifo), "--format", "nanogpt", "-o", str(tmp_path / "imported.yaml")],
        "audit /dev/zero": ["audit", "/dev/zero"],
    }[command]
    named = "/dev/zero" if command.endswith("/dev/zero") else str(fifo)
    cli_refused(argv, capsys, named, "not a regular file")
    assert not (tmp_path / "small.yaml").exists() and not (tmp_path / "imported.yaml").exists()


def test_snakemake_gate_refuses_a_fifo_spec(fifo, work, hang_guard, capsys):
    from runlib.workflow.snake import GateRefused, Workflow

    with pytest.raises(GateRefused, match="does not load"):
        Workflow(str(fifo))  # what the Snakefile builds from --config spec=...
    assert f"{fifo}: SPEC001" in capsys.readouterr().err
