"""lm-eval task files (YAML + JSONL) written from runlib's own items, so lm-eval scores exactly them.

    arithmetic_items(n, seed) -> (multiple_choice, answers)          synthetic two-digit additions
    write_task(out_dir, task, kind, examples) -> the YAML file        one lm-eval task over the examples
    write_builtin_tasks(out_dir) -> {task: YAML file}                 runlib's arithmetic tasks

The YAML follows lm-eval's task format (lm-evaluation-harness docs/task_guide.md, v0.4.13):
`dataset_path: json` with `dataset_kwargs.data_files` (datasets' packaged JSON builder: no download),
`test_split: test`, and the fields of runlib's JSONL rows read by name (`doc_to_text: context`,
`doc_to_choice: choices`, `doc_to_target: answer`: a field name is looked up in the row as is, not
rendered as a Jinja template, so no whitespace is touched). `target_delimiter: ""` because runlib's
choices and answers carry their own leading space: lm-eval then asks for the log-likelihood of exactly
the string runlib scores, and its acc_norm divides by len(choice) in characters, runlib's definition
(runlib.eval.tasks). The data file's path is written absolute: datasets resolves a relative one against
the working directory, not the YAML's folder.

Kinds: multiple_choice -> `output_type: multiple_choice` with acc and acc_norm (acc_bytes too: the
log-likelihood per UTF-8 byte); answer_loglik -> `output_type: loglikelihood` with perplexity
(exp of minus the mean log-likelihood of the answers: runlib's loglik_mean is -ln of it) and acc
(the fraction of answers greedy decoding would produce).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from runlib.eval.tasks import AnswerExample, MultipleChoice

ARITH_SEED = 20240611
ARITH_EXAMPLES = 200
# runlib's built-in lm-eval tasks: name -> (runlib kind, where the items come from)
BUILTIN_TASKS: dict[str, tuple[str, str]] = {
    "runlib_arith_mc": ("multiple_choice", "arithmetic"),
    "runlib_arith_loglik": ("answer_loglik", "arithmetic"),
    "runlib_heldout_mc": ("multiple_choice", "heldout"),
    "runlib_heldout_loglik": ("answer_loglik", "heldout"),
}
OUTPUT_TYPES = {"multiple_choice": "multiple_choice", "answer_loglik": "loglikelihood"}
METRICS = {
    "multiple_choice": ("acc", "acc_norm", "acc_bytes"),
    "answer_loglik": ("perplexity", "acc"),
}
TASK_VERSION = 1  # lm-eval's metadata.version of the task files written here: bump when their items change


def arithmetic_items(
    n: int = ARITH_EXAMPLES, seed: int = ARITH_SEED
) -> tuple[list[MultipleChoice], list[AnswerExample]]:
    """n two-digit additions ("23 + 45 =" -> " 68"), the same for every run: as multiple choice (the sum
    and three near misses: off by one, by ten, and by one in the other direction or by eleven) and as the
    gold answers alone."""
    rng = random.Random(seed)
    mc, answers = [], []
    for _ in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        total = a + b
        context, truth = f"{a} + {b} =", f" {total}"
        wrong: list[int] = []
        for delta in rng.sample([1, -1, 10, -10, 11, -11], 6):
            if len(wrong) < 3 and total + delta > 0 and total + delta not in wrong:
                wrong.append(total + delta)
        position = rng.randrange(len(wrong) + 1)
        choices = [f" {w}" for w in wrong[:position]] + [truth] + [f" {w}" for w in wrong[position:]]
        mc.append(MultipleChoice(context, tuple(choices), position))
        answers.append(AnswerExample(context, truth))
    return mc, answers


def _rows(kind: str, examples: Sequence[MultipleChoice | AnswerExample]) -> list[dict[str, Any]]:
    if kind == "multiple_choice":
        return [_choice_row(e) for e in examples]
    return [{"context": e.context, "answer": e.answer} for e in examples]


def _choice_row(example: MultipleChoice | AnswerExample) -> dict[str, Any]:
    if not isinstance(example, MultipleChoice):
        raise TypeError(f"a multiple_choice task's items are MultipleChoice, not {type(example).__name__}")
    return {"context": example.context, "choices": list(example.choices), "answer": example.answer}


def task_yaml(task: str, kind: str, data_file: Path, cache_dir: Path | None = None) -> str:
    """The lm-eval YAML of one task over a JSONL file of runlib rows (JSON strings are valid YAML scalars);
    cache_dir: where datasets caches the table (default: its own, ~/.cache/huggingface/datasets)."""
    q = json.dumps
    lines = [
        f"task: {q(task)}",
        "dataset_path: json",
        "dataset_kwargs:",
        "  data_files:",
        f"    test: {q(str(Path(data_file).resolve()))}",
    ]
    if cache_dir is not None:
        lines.append(f"  cache_dir: {q(str(Path(cache_dir).resolve()))}")
    lines += [
        "test_split: test",
        f"output_type: {OUTPUT_TYPES[kind]}",
        "doc_to_text: context",
        "doc_to_target: answer",
    ]
    if kind == "multiple_choice":
        lines.append("doc_to_choice: choices")
    lines += ['target_delimiter: ""', "metric_list:"]
    for metric in METRICS[kind]:
        aggregation = "perplexity" if metric == "perplexity" else "mean"
        lines += [
            f"  - metric: {metric}",
            f"    aggregation: {aggregation}",
            "    higher_is_better: " + ("false" if metric == "perplexity" else "true"),
        ]
    lines += ["metadata:", f"  version: {TASK_VERSION}"]
    return "\n".join(lines) + "\n"


def write_task(
    out_dir: Path,
    task: str,
    kind: str,
    examples: Sequence[MultipleChoice | AnswerExample],
    cache_dir: Path | None = None,
) -> Path:
    """Write out_dir/<task>.yaml and out_dir/<task>.jsonl; the YAML's path (lm-eval's --include_path takes
    the folder)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    data = out_dir / f"{task}.jsonl"
    with open(data, "w", encoding="utf-8") as f:
        for row in _rows(kind, examples):
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    path = out_dir / f"{task}.yaml"
    path.write_text(task_yaml(task, kind, data, cache_dir), encoding="utf-8")
    return path


def write_builtin_tasks(out_dir: Path) -> dict[str, Path]:
    """runlib's arithmetic tasks as lm-eval task files in out_dir (the held-out ones need a source: the
    eval stage writes those)."""
    mc, answers = arithmetic_items()
    return {
        "runlib_arith_mc": write_task(out_dir, "runlib_arith_mc", "multiple_choice", mc),
        "runlib_arith_loglik": write_task(out_dir, "runlib_arith_loglik", "answer_loglik", answers),
    }
