"""What a piece of runlib imports: the commands that plan and audit must not pay for torch and friends
(`runlib audit` and `runlib plan` run before any compute and on machines without them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT
from tests.limits import HANG_GUARD_S

HEAVY = ("torch", "accelerate", "mlflow", "matplotlib", "snakemake")


def heavy_imports(code: str, tmp_path: Path, env: dict[str, str] | None = None) -> list[str]:
    """Run `code` in a fresh interpreter in the repository root (RUNLIB_WORK_DIR under tmp_path) and
    return the HEAVY modules it imported; the code itself must succeed."""
    trailer = f"\nimport json as _j, sys as _s; print(_j.dumps([m for m in {HEAVY!r} if m in _s.modules]))"
    env = {**os.environ, "RUNLIB_WORK_DIR": str(tmp_path / "work"), **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-c", code + trailer], capture_output=True, text=True, cwd=ROOT, env=env, timeout=HANG_GUARD_S
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])
