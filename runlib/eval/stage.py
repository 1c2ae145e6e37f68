"""The eval_phase stage: a phase's final model on every source's held-out documents and the spec's tasks.

    evaluate_phase(config, model_dir, tokenizer_dir, token_dirs, out_dir) -> summary; writes out_dir/eval.json

eval.json: {"phase", "phase_index", "tokens", "heldout": {source: heldout_metrics}, "tasks": {name:
{"kind", "n", the scores (acc, acc_norm, chance_acc | loglik_mean, loglik_per_token), and for a task
built from_heldout "examples_requested" and "examples_cap" (why n is below the request, or null)}}}. A kind: lm_eval task (runlib.eval.harness) has
{"kind": "lm_eval", "task", "n", lm-eval's metrics by name (acc, acc_norm, acc_bytes, perplexity, their
_stderr), "chance_acc" (multiple choice), "loglik_mean" (log-likelihood tasks), "lm_eval_version",
"examples_requested", "examples_cap"}: lm-eval scores the phase exported as a Hugging Face checkpoint.

`config` is a runlib.eval.config.EvalConfig (built by runlib.workflow.configs); the inputs are the
train_phase artifact (final.pt), the tokenizer artifact and each source's tokenize artifact, whose
manifests give the end-of-document id and the held-out bytes per token.
"""

from __future__ import annotations

import glob
import json
import shutil
from pathlib import Path
from typing import Any

from runlib.curate.inputs import check_unchanged
from runlib.eval.config import EvalConfig

TASK_SEED = 1234  # tasks built from held-out documents are the same for every phase and run
LM_EVAL_WORK = ".lm-eval-work"  # the export lm-eval loads and its task files, removed before the stage ends
# eval.json fields that describe a task rather than measure the model: not in the manifest's counts
# (which MLflow logs as metrics)
NOT_COUNTED = frozenset({"chance_acc", "examples_requested"})


def evaluate_phase(
    config: EvalConfig, model_dir: Path, tokenizer_dir: Path, token_dirs: dict[str, Path], out_dir: Path
) -> dict[str, Any]:
    # the task files must be what the key was computed from: checked before anything loads
    for name, files in config.task_files.items():
        field = f"eval.tasks ({name}).path"
        for file in files:
            check_unchanged(glob.escape(file.path), [file], field)

    import torch

    from runlib.eval.heldout import heldout_metrics
    from runlib.eval.tasks import heldout_tasks, load_tasks, score_answer_loglik, score_multiple_choice
    from runlib.model.transformer import Transformer
    from runlib.tokenizer.train import load_tokenizer
    from runlib.train import checkpoint as ckpt
    from runlib.workflow.manifest import read_manifest

    torch.set_num_threads(1)
    shape = config.model
    model = Transformer(shape.spec, shape.vocab_rows, shape.position_rows)
    state = ckpt.load(Path(model_dir) / "final.pt")["model"]
    model.load_state_dict(state)
    if shape.spec.position == "rope":
        model.set_rope(config.rope_theta, config.seq_len)
    model.eval()
    tokenizer = load_tokenizer(Path(tokenizer_dir) / "tokenizer.json")
    eos = read_manifest(tokenizer_dir).details["eos_id"]
    seq_len = config.seq_len

    heldout = {}
    for source, token_dir in sorted(token_dirs.items()):
        counts = read_manifest(token_dir).counts
        bytes_per_token = counts["bytes_heldout"] / max(counts["tokens_heldout"], 1)
        heldout[source] = heldout_metrics(
            model, Path(token_dir), seq_len, eos, bytes_per_token, max_tokens=config.heldout_tokens
        )

    harness: dict[str, dict[str, Any]] = {}
    if any(t.kind == "lm_eval" for t in config.tasks):
        from runlib.eval.harness.run import run_lm_eval_tasks

        work = Path(out_dir) / LM_EVAL_WORK
        try:
            harness = run_lm_eval_tasks(config, state, tokenizer, tokenizer_dir, token_dirs, work, TASK_SEED)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    tasks = {}
    for task in config.tasks:
        if task.kind == "lm_eval":
            tasks[task.name] = harness[task.name]
            continue
        extra: dict[str, Any] = {}
        if task.from_heldout is not None:
            built = heldout_tasks(Path(token_dirs[task.from_heldout]), tokenizer, task.examples, TASK_SEED)
            examples = built.multiple_choice if task.kind == "multiple_choice" else built.answers
            extra = {"examples_requested": task.examples, "examples_cap": built.cap_note}
        else:
            examples = load_tasks(task.path, task.kind)
        score = score_multiple_choice if task.kind == "multiple_choice" else score_answer_loglik
        tasks[task.name] = {"kind": task.kind, **score(model, tokenizer, examples, seq_len), **extra}

    result = {
        "phase": config.phase,
        "phase_index": config.phase_index,
        "tokens": config.end_tokens,
        "heldout": heldout,
        "tasks": tasks,
    }
    (Path(out_dir) / "eval.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    counts = {f"{s}_loss": m["loss"] for s, m in heldout.items()}
    counts.update(
        {
            f"{name}_{k}": v
            for name, t in tasks.items()
            for k, v in t.items()
            if isinstance(v, (int, float)) and k not in NOT_COUNTED
        }
    )
    return {"counts": counts}
