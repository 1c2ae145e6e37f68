"""The layers of runlib (pyproject.toml [tool.importlinter]) hold, and the contract can fail: an upward import
planted in a copy of the tree, at module level or inside a function, breaks it."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_layers_hold():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.fixture
def tree_copy(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "runlib", tmp_path / "runlib", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


@pytest.mark.parametrize(
    ("module", "planted", "broken"),
    [
        # the store reaching up into the graph: at module level
        ("store/keys.py", "from runlib.graph import build  # noqa\n", "layers"),
        # the spec reaching up into the plan inside a function (a cycle broken by a local import)
        ("spec/units.py", "def _planted():\n    from runlib.plan import derive  # noqa\n", "layers"),
        # a stage package reaching up into the Snakemake adapter
        ("train/optim.py", "def _planted():\n    import runlib.workflow.snake  # noqa\n", "layers"),
        # the audit importing torch, even lazily
        ("audit/registry.py", "def _planted():\n    import torch  # noqa\n", "never import torch"),
    ],
)
def test_an_upward_import_breaks_the_contract(tree_copy: Path, module: str, planted: str, broken: str):
    path = tree_copy / "runlib" / module
    path.write_text(path.read_text() + "\n\n" + planted)
    result = lint_imports(tree_copy)
    assert result.returncode != 0, result.stdout
    contract = next(line for line in result.stdout.splitlines() if "BROKEN" in line)
    assert broken in contract, result.stdout
