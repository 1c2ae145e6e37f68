"""The Snakemake command runlib prints (shrink's "run it:", export's and verify's fixes): one that runs where
the user is, not only in the repository.

Two Snakemake facts it follows (Snakemake 9, snakemake/cli.py):
- Without `-s/--snakefile` Snakemake looks for ./Snakefile (or workflow/Snakefile) in the working directory
  only, so from anywhere else it stops with "No Snakefile found". runlib's Snakefile lies at the root of the
  repository that holds this package; its `include:`s are resolved relative to the Snakefile itself. The
  spec, RUNLIB_WORK_DIR (default ./work), reports/ and exports/ stay relative to the directory the command
  runs in, as do the relative paths a spec names (SRC001): so no `--directory`.
- `--config` takes every following word that is not an option (nargs="*"), so a target after
  `--config spec=X` is read as a malformed config item: targets go before `--config`, and `--config` last.
"""

from __future__ import annotations

import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

import runlib

SNAKEFILE = Path(runlib.__file__).resolve().parent.parent / "Snakefile"


def executable(name: str) -> str:
    """`name` when the one on PATH is this environment's; else the one beside this Python (a virtual
    environment that is not activated), so the command runs the one that has runlib installed."""
    beside = Path(sys.executable).parent / name
    found = shutil.which(name)
    if found and (not beside.exists() or Path(found).resolve() == beside.resolve()):
        return name
    return str(beside) if beside.exists() else name


def snakemake_executable() -> str:
    """This environment's snakemake (see executable)."""
    return executable("snakemake")


def snakemake_command(spec: str | Path, targets: Sequence[str] = (), cores: str = "2") -> str:
    """A shell command that runs runlib's workflow on `spec` from the current directory: the Snakefile by
    its absolute path (when this package sits in its repository), the targets, then `--config spec=...`."""
    words = [snakemake_executable()]
    if SNAKEFILE.is_file():
        words += ["-s", str(SNAKEFILE)]
    words += ["--cores", cores, *targets, "--config", f"spec={spec}"]
    return shlex.join(words)
