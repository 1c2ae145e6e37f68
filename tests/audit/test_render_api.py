"""runlib.audit.render's private names stay inside it: every other module (runlib's and the tests') uses the
public API its modules list in __all__ (documented in runlib/audit/render/__init__.py)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from tests.conftest import ROOT

RENDER = "runlib.audit.render"
MODULES = ("json_view", "plots", "report", "text")


def _private_uses(path: Path) -> list[str]:
    """`name` of each underscore-private name of runlib.audit.render that the file imports or reads."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    aliases: set[str] = set()  # local names bound to a runlib.audit.render module
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(RENDER):
            for a in node.names:
                if a.name.startswith("_"):
                    out.append(f"{node.module}.{a.name}")
                elif node.module == RENDER:
                    aliases.add(a.asname or a.name)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith(RENDER + ".") and a.asname:
                    aliases.add(a.asname)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if isinstance(node.value, ast.Name) and node.value.id in aliases:
                out.append(f"{node.value.id}.{node.attr}")
    return out


def test_no_module_outside_render_uses_its_private_names() -> None:
    files = [p for p in (ROOT / "runlib").rglob("*.py") if "audit/render" not in p.as_posix()]
    files += list((ROOT / "tests").rglob("*.py"))
    found = {str(p.relative_to(ROOT)): uses for p in files if (uses := _private_uses(p))}
    assert not found, f"private names of {RENDER} used outside it (add a public name): {found}"


@pytest.mark.parametrize("name", MODULES)
def test_render_modules_list_only_real_public_names(name: str) -> None:
    module = importlib.import_module(f"{RENDER}.{name}")
    names = module.__all__
    assert names and all(not n.startswith("_") for n in names)
    assert [n for n in names if not hasattr(module, n)] == []


def test_the_check_sees_a_private_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from runlib.audit.render import plots\nfrom runlib.audit.render.report import _md_text\nplots._finite(1)\n"
    )
    assert _private_uses(probe) == ["runlib.audit.render.report._md_text", "plots._finite"]
