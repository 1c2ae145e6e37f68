"""A spec or config that is a FIFO, a device or a kernel file (issue 28 item 13): refused with exit 2 naming
it, never waited on. Before, `open()` of a FIFO blocked until a writer came, so audit, diff, shrink,
import and the Snakemake gate all hung forever.

Each command runs in a subprocess under a generous bound (HANG_S: ~10x the slowest start seen on two busy
cores, where a run takes a few seconds); a hang on the old code fails the test at the bound, it is not a
timing assertion.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT

HANG_S = 120
BASE = ROOT / "runlib" / "audit" / "cases_base.yaml"


def _commands(fifo: str, tmp) -> dict[str, list[str]]:
    runlib = [sys.executable, "-m", "runlib"]
    commands = {
        "audit": [*runlib, "audit", fifo],
        "diff": [*runlib, "diff", str(BASE), fifo],
        "shrink": [*runlib, "shrink", fifo, "-o", str(tmp / "small.yaml")],
        "import": [*runlib, "import", fifo, "--format", "nanogpt", "-o", str(tmp / "imported.yaml")],
        "audit_dev_zero": [*runlib, "audit", "/dev/zero"],
    }
    snakemake = shutil.which("snakemake", path=os.path.dirname(sys.executable))
    if snakemake:
        commands["snakemake"] = [snakemake, "-n", "--cores", "1", "--config", f"spec={fifo}"]
    return commands


def test_fifo_spec_and_config_exit_2_naming_it(tmp_path):
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    env = {**os.environ, "RUNLIB_WORK_DIR": str(tmp_path / "work")}
    procs = {
        name: subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name, cmd in _commands(str(fifo), tmp_path).items()
    }
    try:
        for name, proc in procs.items():
            try:
                out, err = proc.communicate(timeout=HANG_S)
            except subprocess.TimeoutExpired:
                pytest.fail(f"`{name}` on a FIFO still waiting after {HANG_S} s (it reads the FIFO)")
            text = out + err
            assert "Traceback" not in text, (name, text[-2000:])
            assert "not a regular file" in text, (name, text[-2000:])
            if name == "snakemake":  # Snakemake's own status for an error in the Snakefile
                assert proc.returncode != 0, (name, text[-2000:])
                continue
            assert proc.returncode == 2, (name, proc.returncode, text[-2000:])
            assert ("/dev/zero" if name == "audit_dev_zero" else str(fifo)) in text, (name, text[-2000:])
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert not (tmp_path / "small.yaml").exists() and not (tmp_path / "imported.yaml").exists()
