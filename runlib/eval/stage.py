"""The eval_phase stage: a phase's final model on every source's held-out documents and the spec's tasks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TASK_SEED = 1234  # tasks built from held-out documents are the same for every phase and run


def evaluate_phase(
    spec, phase_index: int, model_dir: Path, tokenizer_dir: Path, token_dirs: dict[str, Path], out_dir: Path
) -> dict[str, Any]:
    import torch

    from runlib.eval.heldout import heldout_metrics
    from runlib.eval.tasks import build_heldout_tasks, load_tasks, score_answer_loglik, score_multiple_choice
    from runlib.model.transformer import build_model
    from runlib.plan import derive
    from runlib.tokenizer.train import load_tokenizer
    from runlib.train import checkpoint as ckpt

    torch.set_num_threads(1)
    plan = derive(spec)
    phase = plan.phases[phase_index]
    model = build_model(spec, plan)
    model.load_state_dict(ckpt.load(Path(model_dir) / "final.pt")["model"])
    model.set_rope(phase.settings.rope_theta, phase.settings.seq_len)
    model.eval()
    tokenizer = load_tokenizer(Path(tokenizer_dir) / "tokenizer.json")
    eos = json.loads((Path(tokenizer_dir) / "manifest.json").read_text())["details"]["eos_id"]
    seq_len = phase.settings.seq_len

    heldout = {}
    for source, token_dir in sorted(token_dirs.items()):
        counts = json.loads((Path(token_dir) / "manifest.json").read_text())["counts"]
        bytes_per_token = counts["bytes_heldout"] / max(counts["tokens_heldout"], 1)
        heldout[source] = heldout_metrics(
            model, Path(token_dir), seq_len, eos, bytes_per_token, max_tokens=spec.eval.heldout_tokens
        )

    tasks = {}
    for task in spec.eval.tasks:
        if task.from_heldout is not None:
            mc, answers = build_heldout_tasks(Path(token_dirs[task.from_heldout]), tokenizer, task.examples, TASK_SEED)
            examples = mc if task.kind == "multiple_choice" else answers
        else:
            examples = load_tasks(task.path, task.kind)
        score = score_multiple_choice if task.kind == "multiple_choice" else score_answer_loglik
        tasks[task.name] = {"kind": task.kind, **score(model, tokenizer, examples, seq_len)}

    result = {
        "phase": phase.name,
        "phase_index": phase_index,
        "tokens": phase.span.end_tokens,
        "heldout": heldout,
        "tasks": tasks,
    }
    (Path(out_dir) / "eval.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    counts = {f"{s}_loss": m["loss"] for s, m in heldout.items()}
    counts.update({f"{name}_{k}": v for name, t in tasks.items() for k, v in t.items() if isinstance(v, (int, float))})
    return {"counts": counts}
