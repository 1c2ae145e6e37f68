"""What of a spec's lm-eval tasks cannot run on this machine: refused at the workflow's gate, before any job.

    harness_refusals(tasks, model, where="eval.tasks") -> [HarnessRefusal(field, problem, fix)]

The spec's own consistency (a task name, from_heldout only with runlib's held-out tasks, a task runlib does
not ship needs `path` or `download: true`) is checked when the spec loads (EvalTaskSpec). Here, what depends
on the machine and the files: lm-eval and transformers installed (found without importing them), the model
exportable as a Hugging Face checkpoint (runlib.export.hf.hf_architecture: lm-eval's `hf` model loads that
export), a task file or folder that exists and names the task, and `download: true` on a machine whose
Hugging Face libraries are set offline (HF_HUB_OFFLINE or HF_DATASETS_OFFLINE). Nothing here imports
lm_eval, transformers or torch.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from runlib.errors import UserError
from runlib.export.hf import hf_architecture
from runlib.spec.models import EvalTaskSpec, ModelSpec

LM_EVAL_PIN = "lm-eval==0.4.13"  # the version whose scoring tests/eval/test_lm_eval.py checks against runlib's
MAX_TASK_FILES = 2_000  # YAML files scanned in a task folder for the task's name (lm-eval's own tree has ~10,000)
OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")


@dataclass(frozen=True, slots=True)
class HarnessRefusal:
    field: str  # "eval.tasks[2].task"
    problem: str
    fix: str

    def describe(self) -> str:
        return f"{self.field}: {self.problem}; fix: {self.fix}"


def _offline_variable() -> str | None:
    for name in OFFLINE_VARIABLES:
        if os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on"):
            return name
    return None


def task_files(path: Path) -> list[Path]:
    """The YAML files lm-eval's --include_path would index at path (a file, or a folder walked), bounded."""
    if path.is_file():
        return [path]
    found: list[Path] = []
    for root, _dirs, files in os.walk(path):
        for name in sorted(files):
            if name.endswith((".yaml", ".yml")):
                found.append(Path(root) / name)
                if len(found) >= MAX_TASK_FILES:
                    return found
    return found


def defines(files: Sequence[Path], task: str) -> bool:
    """Whether a task file names `task` as its task, group or tag (a `task:`/`group:`/`tag:` value or an
    item of such a list); read as text (lm-eval's YAML has `!function` tags a plain YAML loader refuses)."""
    name = re.escape(task)
    scalar = re.compile(rf"^\s*(task|group|tag)\s*:\s*['\"]?{name}['\"]?\s*(#.*)?$", re.MULTILINE)
    item = re.compile(rf"^\s*-\s*['\"]?{name}['\"]?\s*(#.*)?$", re.MULTILINE)
    inline = re.compile(rf"^\s*(task|tag)\s*:\s*\[[^\]]*['\"]?\b{name}\b['\"]?[^\]]*\]", re.MULTILINE)
    for file in files:
        try:
            text = file.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if scalar.search(text) or item.search(text) or inline.search(text):
            return True
    return False


def harness_refusals(
    tasks: Sequence[EvalTaskSpec], model: ModelSpec, where: str = "eval.tasks"
) -> list[HarnessRefusal]:
    """The lm_eval tasks among `tasks` that cannot run here, each with the fix (empty: all can)."""
    lm_tasks = [(i, t) for i, t in enumerate(tasks) if t.kind == "lm_eval"]
    if not lm_tasks:
        return []
    out: list[HarnessRefusal] = []
    missing = [m for m in ("lm_eval", "transformers") if importlib.util.find_spec(m) is None]
    if missing:
        out.append(
            HarnessRefusal(
                f"{where}[{lm_tasks[0][0]}]",
                f"kind: lm_eval tasks run lm-evaluation-harness, and {' and '.join(missing)} "
                f"{'is' if len(missing) == 1 else 'are'} not installed in this Python ({sys.executable})",
                f"pip install '{LM_EVAL_PIN}' transformers (both are in runlib's test extra: pip install -e '.[test]')",
            )
        )
    try:
        hf_architecture(model)
    except UserError as exc:
        out.append(
            HarnessRefusal(
                f"{where}[{lm_tasks[0][0]}]",
                "lm-eval scores the phase exported as a Hugging Face checkpoint, and "
                + str(exc).removeprefix("runlib export: "),
                "use kind: multiple_choice or answer_loglik tasks (runlib scores those itself) for this model",
            )
        )
    offline = _offline_variable()
    for i, task in lm_tasks:
        field = f"{where}[{i}]"
        if task.path is not None:
            path = Path(task.path)
            if not path.exists():
                out.append(
                    HarnessRefusal(
                        f"{field}.path",
                        f"{task.path!r} does not exist (relative paths are read from {Path.cwd()}, where the workflow runs)",
                        "give an lm-eval YAML task file, or a folder of them, that defines task " + repr(task.task),
                    )
                )
                continue
            files = task_files(path)
            if not files:
                out.append(
                    HarnessRefusal(f"{field}.path", f"{task.path!r} holds no .yaml task file", "as for a missing path")
                )
            elif not defines(files, task.task or ""):
                out.append(
                    HarnessRefusal(
                        f"{field}.task",
                        f"no task file under {task.path!r} names {task.task!r} (a `task:`, `group:` or `tag:` line)",
                        "correct the task name, or the path",
                    )
                )
        if task.download and offline:
            out.append(
                HarnessRefusal(
                    f"{field}.download",
                    f"lm-eval task {task.task!r} downloads its data from the Hugging Face Hub, and this machine is "
                    f"set offline ({offline}={os.environ[offline]})",
                    f"run where the Hub can be reached (unset {offline}), or give path: a local task file with its data",
                )
            )
    return out
