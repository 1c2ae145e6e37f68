"""lm-eval on an exported phase: the eval stage's edge (imports lm_eval, transformers and torch when called).

    harness_model(export_dir, max_length) -> lm_eval's HFLM (the `hf` model type, pretrained=export_dir)
    evaluate_task(lm, task, include, limit) -> {"n", the task's metrics, "chance_acc" for multiple choice,
                                                "loglik_mean" for log-likelihood, "lm_eval_version"}
    run_lm_eval_tasks(config, state, ...) -> {spec task name: eval.json entry}      (the eval stage's part)

lm-eval loads the export as any Hugging Face checkpoint (AutoModelForCausalLM + AutoTokenizer from the
folder), float32 on the CPU (or the first GPU when there is one), batch size 16, with max_length the
phase's context so it truncates exactly where runlib does (a GPT-2 export's position table can be longer
than the phase). Local tasks (runlib's and a spec's YAML files) are indexed alone (TaskManager with
include_defaults off: indexing lm-eval's thousands of built-in YAML files takes seconds); a standard
task indexes the built-in ones too. Standard errors: lm-eval's bootstrap over BOOTSTRAP_ITERS resamples.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from runlib.data.shards import TokenDirs
from runlib.errors import UserError
from runlib.eval.config import EvalConfig
from runlib.eval.harness.gate import harness_refusals
from runlib.eval.harness.taskfiles import arithmetic_items, write_task
from runlib.eval.tasks import AnswerExample, MultipleChoice, heldout_tasks
from runlib.export.hf import ExportShape, write_export
from runlib.spec.models import EvalTaskSpec
from runlib.store.manifest import read_manifest
from runlib.tokenizer.special import PAD

if TYPE_CHECKING:
    import torch
    from lm_eval.models.huggingface import HFLM
    from tokenizers import Tokenizer

BATCH_SIZE = 16
SEEDS = (0, 1234, 1234, 1234)  # lm_eval.simple_evaluate's random, numpy, torch and few-shot seeds (v0.4.13)
BOOTSTRAP_ITERS = 1000  # lm-eval's default is 100,000: minutes for a perplexity on CPU, for a third digit


def harness_model(export_dir: Path, max_length: int, batch_size: int = BATCH_SIZE) -> HFLM:
    """lm-eval's `hf` model over the export (what `lm_eval --model hf --model_args pretrained=DIR` builds)."""
    import torch
    from lm_eval.models.huggingface import HFLM

    device = "cuda" if torch.cuda.is_available() else "cpu"
    return HFLM(
        pretrained=str(export_dir), dtype="float32", device=device, batch_size=batch_size, max_length=max_length
    )


def _results(lm: HFLM, task: str, include: Sequence[Path], limit: int | None) -> dict[str, Any]:
    """lm-eval's results for one task: what lm_eval.simple_evaluate does for an LM object (load the task,
    zero-shot unless its file sets num_fewshot, its seeds), less the environment report it appends
    (add_env_info runs `pip list` in subprocesses: seconds per task, and nothing runlib records)."""
    import torch
    from lm_eval.evaluator import evaluate
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=[str(p) for p in include] or None, include_defaults=not include)
    if task not in manager.all_tasks:
        known = ", ".join(sorted(manager.all_tasks)[:8])
        where = ", ".join(str(p) for p in include) if include else "lm-eval's built-in tasks"
        raise UserError(f"lm-eval task {task!r} is not defined in {where} (tasks there: {known}, ...)")
    random.seed(SEEDS[0])  # simple_evaluate's defaults (random_seed, numpy_random_seed, torch_random_seed)
    np.random.seed(SEEDS[1])
    torch.manual_seed(SEEDS[2])
    loaded = manager.load([task])
    for obj in loaded["tasks"].values():
        if obj.get_config("num_fewshot") is None:
            obj.set_config(key="num_fewshot", value=0)
        obj.set_fewshot_seed(seed=SEEDS[3])
    out = evaluate(
        lm=lm,
        task_dict=loaded,
        limit=limit,
        bootstrap_iters=BOOTSTRAP_ITERS,
        log_samples=True,  # the options of each item: chance_acc
        verbosity="ERROR",
    )
    if out is None:  # another rank of a distributed run
        raise UserError(f"lm-eval returned no results for {task!r}")
    results: dict[str, Any] = out
    return results


def evaluate_task(
    lm: HFLM, task: str, include: Sequence[Path], limit: int | None, item_logliks: bool = False
) -> dict[str, Any]:
    """One lm-eval task (or group) scored on the model: its metrics by name ("acc", "acc_norm",
    "perplexity", their "_stderr"), "n" the items scored, "chance_acc" (multiple choice: the mean of
    1 / options over the items), "loglik_mean" for a log-likelihood task (-ln of lm-eval's perplexity,
    runlib's answer_loglik measure); item_logliks: also "item_logliks", the log-likelihood lm-eval
    computed for each option of each item, in the items' order."""
    import lm_eval

    out = _results(lm, task, include, limit)
    metrics = out["results"].get(task, {})
    scores: dict[str, Any] = {}
    for key, value in metrics.items():
        name, _, filt = key.partition(",")
        if name == "sample_len":  # lm-eval's count of items, given as "n" below
            continue
        if filt in ("none", "") and isinstance(value, (int, float)) and not isinstance(value, bool):
            scores[name] = float(value)
    samples = out.get("samples", {})
    n_samples = out.get("n-samples", {})
    scores["n"] = int(sum(v.get("effective", 0) for v in n_samples.values())) if n_samples else 0
    options = [len(s["resps"]) for items in samples.values() for s in items if s.get("resps")]
    output_types = {cfg.get("output_type") for cfg in out.get("configs", {}).values()}
    if output_types == {"multiple_choice"} and options:
        scores["chance_acc"] = sum(1.0 / k for k in options) / len(options)
    if output_types == {"loglikelihood"} and "perplexity" in scores and scores["perplexity"] > 0:
        scores["loglik_mean"] = -math.log(scores["perplexity"])
    scores["lm_eval_version"] = getattr(lm_eval, "__version__", None)
    if item_logliks:
        items = sorted(samples.get(task, []), key=lambda s: s["doc_id"])
        scores["item_logliks"] = [[float(r[0][0]) for r in s["resps"]] for s in items]
    return scores


def run_lm_eval_tasks(
    config: EvalConfig,
    state: dict[str, torch.Tensor],
    tokenizer: Tokenizer,
    tokenizer_dir: Path,
    token_dirs: dict[str, TokenDirs],
    work: Path,
    seed: int,
) -> dict[str, dict[str, Any]]:
    """The eval stage's kind: lm_eval tasks of `config` (an EvalConfig): the phase's weights `state` exported
    into work/hf (runlib.export.hf.write_export, as `runlib export` writes it), runlib's own tasks written
    into work/tasks/<name>/ (the held-out ones from the same items as runlib's, by `seed`), each task scored
    by lm-eval on the export. UserError, with the fix, for what cannot run here (runlib.eval.harness.gate).
    With no `download: true` task, the Hugging Face libraries are set offline for this process first, so a
    task file that names a remote dataset fails at once instead of waiting on the network."""
    tasks = [t for t in config.tasks if t.kind == "lm_eval"]
    refusals = harness_refusals(tasks, config.model.spec)
    if refusals:
        raise UserError("the eval stage cannot run its lm-eval tasks: " + "; ".join(r.describe() for r in refusals))
    if not any(t.download for t in tasks):
        for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
            os.environ.setdefault(name, "1")

    details = read_manifest(tokenizer_dir).details
    special_ids = {str(k): int(v) for k, v in details.get("special_ids", {"<|endoftext|>": details["eos_id"]}).items()}
    shape = config.model
    export = ExportShape(
        model=shape.spec,
        vocab_rows=shape.vocab_rows,
        position_rows=shape.position_rows,
        seq_len=config.seq_len,
        rope_theta=config.rope_theta if config.rope_theta is not None else shape.spec.rope_theta,
        eos_id=int(details["eos_id"]),
        pad_id=special_ids.get(PAD),
    )
    tokenizer_json = (Path(tokenizer_dir) / "tokenizer.json").read_text(encoding="utf-8")
    provenance = {"phase": config.phase, "written_by": "eval_phase (lm-eval)"}
    export_dir = write_export(state, export, tokenizer_json, special_ids, Path(work) / "hf", provenance)
    lm = harness_model(export_dir, max_length=config.seq_len)

    cache = Path(work) / "datasets-cache"
    return {task.name: _lm_eval_task(lm, task, tokenizer, token_dirs, Path(work), cache, seed) for task in tasks}


def _lm_eval_task(
    lm: HFLM,
    task: EvalTaskSpec,
    tokenizer: Tokenizer,
    token_dirs: dict[str, TokenDirs],
    work: Path,
    cache: Path,
    seed: int,
) -> dict[str, Any]:
    """eval.json's entry of one lm_eval task: runlib's own tasks written into work/tasks/<name>/ first."""
    name = task.task
    assert name is not None  # a kind: lm_eval task names its lm-eval task (EvalTaskSpec)
    own = task.RUNLIB_LM_EVAL_TASKS.get(name)
    cap_note = None
    include: list[Path] = []
    if own is not None:
        kind = "multiple_choice" if name.endswith("_mc") else "answer_loglik"
        if own == "heldout":
            source = task.from_heldout
            assert source is not None  # runlib's held-out tasks name their source (EvalTaskSpec)
            built = heldout_tasks(token_dirs[source], tokenizer, task.examples, seed)
            items: Sequence[MultipleChoice | AnswerExample] = (
                built.multiple_choice if kind == "multiple_choice" else built.answers
            )
            cap_note = built.cap_note
        else:
            mc, answers = arithmetic_items()
            items = mc if kind == "multiple_choice" else answers
        folder = work / "tasks" / task.name
        write_task(folder, name, kind, items, cache_dir=cache)
        include = [folder]
    elif task.path is not None:
        include = [Path(task.path)]
    scores = evaluate_task(lm, name, include, limit=task.examples)
    if cap_note is None and scores.get("n", 0) < task.examples:
        cap_note = (
            f"{scores.get('n', 0)} of {task.examples} examples: lm-eval task {name!r} has "
            f"{scores.get('n', 0)} items (set the task's examples to {scores.get('n', 0)})"
        )
    return {
        "kind": "lm_eval",
        "task": name,
        **scores,
        "examples_requested": task.examples,
        "examples_cap": cap_note,
    }
