"""Bodies stay short enough to read: no function over MAX_FUNCTION_LINES without a one-line reason in its
docstring ("Over 80 lines: ..."), no module over MAX_MODULE_LINES. The scan is a pure function of source
text, so the failing cases below are data."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 700
REASON = "Over 80 lines:"


def oversized(source: str, name: str) -> list[str]:
    """What in one module's source breaks the size rules, as 'name:line what' strings."""
    problems = []
    lines = source.count("\n")
    if lines > MAX_MODULE_LINES:
        problems.append(f"{name}: {lines} lines (at most {MAX_MODULE_LINES})")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FUNCTION_LINES and REASON not in (ast.get_docstring(node) or ""):
                problems.append(f"{name}:{node.lineno} {node.name}: {length} lines and no '{REASON}' reason")
    return problems


def _function(body_lines: int, docstring: str = "") -> str:
    doc = f'    """{docstring}"""\n' if docstring else ""
    return "def f():\n" + doc + "    x = 1\n" * body_lines


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (_function(79), 0),
        (_function(80), 1),  # the def line makes 81
        (_function(120, "Over 80 lines: one table, read top to bottom."), 0),
        (_function(120, "Long, sorry."), 1),
        ("x = 1\n" * 700, 0),
        ("x = 1\n" * 701, 1),
    ],
)
def test_the_scan_flags_what_it_should(source, expected):
    assert len(oversized(source, "m.py")) == expected


@pytest.mark.parametrize("package", ["runlib", "tests", "rules"])
def test_no_oversized_bodies(package):
    problems = [
        problem
        for path in sorted((ROOT / package).rglob("*.py"))
        for problem in oversized(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert not problems, "\n".join(problems)
