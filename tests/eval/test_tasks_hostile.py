"""Hostile task files: deep nesting and 5,000-digit integers are refused at
file:line (they were a RecursionError and a ValueError traceback), non-UTF-8 too."""

from __future__ import annotations

import pytest

from runlib.errors import UserError
from runlib.eval.tasks import load_tasks

GOOD = '{"context": "2 + 2 =", "choices": [" 4", " 5"], "answer": 0}\n'


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ('{"context": "x", "deep": ' + "[" * 100_000 + "]" * 100_000 + "}\n", "JSON nested too deeply"),
        ('{"context": "x", "answer": ' + "9" * 5000 + "}\n", "a JSON value Python cannot read"),
        (b'{"context": "\xff"}\n', "not UTF-8"),
    ],
    ids=["deep", "int_5000_digits", "not_utf8"],
)
def test_hostile_task_line_is_refused_at_its_line(tmp_path, line, needle):
    path = tmp_path / "task.jsonl"
    path.write_bytes(GOOD.encode() + (line if isinstance(line, bytes) else line.encode()))
    with pytest.raises(UserError, match=rf"task\.jsonl:2: {needle}"):
        load_tasks(path, "multiple_choice")
