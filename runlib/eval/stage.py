"""The eval_phase stage: a phase's final model on every source's held-out documents and the spec's tasks.

    evaluate_phase(config, model_dir, tokenizer_dir, token_dirs, out_dir) -> summary; writes out_dir/eval.json

eval.json: {"phase", "phase_index", "tokens", "heldout": {source: heldout_metrics}, "tasks": {name:
{"kind", "n", the scores (acc, acc_norm, chance_acc | loglik_mean, loglik_per_token), and for a task
built from_heldout "examples_requested" and "examples_cap" (why n is below the request, or null)}}}. A kind: lm_eval task (runlib.eval.harness) has
{"kind": "lm_eval", "task", "n", lm-eval's metrics by name (acc, acc_norm, acc_bytes, perplexity, their
_stderr), "chance_acc" (multiple choice), "loglik_mean" (log-likelihood tasks), "lm_eval_version",
"examples_requested", "examples_cap"}: lm-eval scores the phase exported as a Hugging Face checkpoint.

`config` is a runlib.eval.config.EvalConfig (built by runlib.graph.configs); the inputs are the
train_phase artifact (final.pt), the tokenizer artifact and each source's tokenize artifact, whose
manifests give the end-of-document id and the held-out bytes per token.
"""

from __future__ import annotations

import glob
import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runlib.curate.inputs import check_unchanged
from runlib.data.shards import TokenDirs
from runlib.eval.config import EvalConfig
from runlib.eval.harness.run import run_lm_eval_tasks
from runlib.eval.tasks import heldout_tasks, load_tasks, score_answer_loglik, score_multiple_choice
from runlib.spec.models import EvalTaskSpec
from runlib.store.manifest import read_manifest
from runlib.tokenizer.train import load_tokenizer

if TYPE_CHECKING:
    import torch
    from tokenizers import Tokenizer

TASK_SEED = 1234  # tasks built from held-out documents are the same for every phase and run
LM_EVAL_WORK = ".lm-eval-work"  # the export lm-eval loads and its task files, removed before the stage ends
# eval.json fields that describe a task rather than measure the model: not in the manifest's counts
# (which MLflow logs as metrics)
NOT_COUNTED = frozenset({"chance_acc", "examples_requested"})


def evaluate_phase(
    config: EvalConfig, model_dir: Path, tokenizer_dir: Path, token_dirs: dict[str, TokenDirs], out_dir: Path
) -> dict[str, Any]:
    # the task files must be what the key was computed from: checked before anything loads
    for name, files in config.task_files.items():
        field = f"eval.tasks ({name}).path"
        for file in files:
            check_unchanged(glob.escape(file.path), [file], field)

    # torch, and the runlib modules that import it, load once the task files are checked
    import torch

    from runlib.model.transformer import Transformer
    from runlib.train import checkpoint as ckpt
    from runlib.train.heldout import heldout_metrics

    torch.set_num_threads(1)
    shape = config.model
    model = Transformer(shape.spec, shape.vocab_rows, shape.position_rows)
    state = ckpt.load(Path(model_dir) / "final.pt")["model"]
    model.load_state_dict(state)
    if shape.spec.position == "rope":
        assert config.rope_theta is not None  # runlib.graph.configs sets it for a RoPE model
        model.set_rope(config.rope_theta, config.seq_len, config.rope_scaling)
    model.eval()
    tokenizer = load_tokenizer(Path(tokenizer_dir) / "tokenizer.json")
    eos = read_manifest(tokenizer_dir).details["eos_id"]
    seq_len = config.seq_len

    heldout = {}
    for source, token_dir in sorted(token_dirs.items()):
        parts = [token_dir] if isinstance(token_dir, (str, Path)) else list(token_dir)
        manifests = [read_manifest(part).counts for part in parts]
        nbytes, ntokens = (sum(c[k] for c in manifests) for k in ("bytes_heldout", "tokens_heldout"))
        heldout[source] = heldout_metrics(
            model, token_dir, seq_len, eos, nbytes / max(ntokens, 1), max_tokens=config.heldout_tokens
        )

    harness: dict[str, dict[str, Any]] = {}
    if any(t.kind == "lm_eval" for t in config.tasks):
        work = Path(out_dir) / LM_EVAL_WORK
        try:
            harness = run_lm_eval_tasks(config, state, tokenizer, tokenizer_dir, token_dirs, work, TASK_SEED)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    tasks = {}
    for task in config.tasks:
        if task.kind == "lm_eval":
            tasks[task.name] = harness[task.name]
        else:
            tasks[task.name] = _score_task(task, model, tokenizer, token_dirs, seq_len)

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


def _score_task(
    task: EvalTaskSpec, model: torch.nn.Module, tokenizer: Tokenizer, token_dirs: dict[str, TokenDirs], seq_len: int
) -> dict[str, Any]:
    """eval.json's entry of a multiple_choice or answer_loglik task: its items from its file, or built from a
    source's held-out documents (with the examples asked for and why fewer were made)."""
    extra: dict[str, Any] = {}
    if task.from_heldout is not None:
        built = heldout_tasks(token_dirs[task.from_heldout], tokenizer, task.examples, TASK_SEED)
        extra = {"examples_requested": task.examples, "examples_cap": built.cap_note}
        choices, answers = built.multiple_choice, built.answers
    else:
        path = task.path
        assert path is not None  # the spec gives such a task a path or from_heldout
        choices = load_tasks(path, "multiple_choice") if task.kind == "multiple_choice" else []
        answers = load_tasks(path, "answer_loglik") if task.kind == "answer_loglik" else []
    if task.kind == "multiple_choice":
        scores = score_multiple_choice(model, tokenizer, choices, seq_len)
    else:
        scores = score_answer_loglik(model, tokenizer, answers, seq_len)
    return {"kind": task.kind, **scores, **extra}
