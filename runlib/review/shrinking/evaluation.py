"""`runlib shrink`'s evaluation and cadence: the checkpoint and monitor cadence in steps of the shrunk run,
the evaluation tasks that run offline on this machine (the others replaced by runlib's shipped held-out
tasks), and a scaling ladder at the shrunk scale."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runlib.errors import UserError
from runlib.export.hf import hf_architecture
from runlib.ladder.rungs import ladder_rungs
from runlib.plan import Plan, derive
from runlib.review.shrinking.timeline import MIN_PHASE_STEPS
from runlib.spec import RunSpec, validate_data
from runlib.spec.models import EvalTaskSpec, ModelSpec

EVAL_TOKENS = 8192  # held-out tokens of each evaluation, during training and after each phase


def checkpoint_section(spec: RunSpec, total_steps: int) -> dict[str, Any]:
    """At most 2 checkpoints kept, the published state, one every quarter of the run if the run saves."""
    ck = spec.checkpoint
    checkpoint: dict[str, Any] = {"keep": min(ck.keep, 2), "state": list(ck.state)}
    if ck.every is not None:
        checkpoint["every"] = f"{max(MIN_PHASE_STEPS, total_steps // 4)} steps"
    return checkpoint


def monitor_section(spec: RunSpec, total_steps: int) -> dict[str, Any]:
    m = spec.monitor
    # the held-out loss during training at the size of the evaluation after each phase (eval_section)
    out: dict[str, Any] = {"eval_tokens": EVAL_TOKENS}
    if m.eval_every is not None:
        out["eval_every"] = f"{max(MIN_PHASE_STEPS, total_steps // 4)} steps"
    if m.spike is not None:
        spike = m.spike.model_dump(mode="json", exclude_none=True)
        spike["window"] = min(m.spike.window, 50)
        spike["max_skips_per_window"] = min(m.spike.max_skips_per_window, spike["window"])
        if m.spike.rollback is not None:
            spike["rollback"] = "2 steps"
        out["spike"] = spike
    return out


def exportable(model: dict[str, Any]) -> str | None:
    """None if lm-eval can score the shrunk model (exported as a Hugging Face checkpoint), else why not."""
    try:
        hf_architecture(ModelSpec.model_validate(model))
    except UserError as exc:
        return str(exc).removeprefix("runlib export: ")
    return None


def eval_section(spec: RunSpec, heldout_docs: int, model: dict[str, Any]) -> tuple[dict[str, Any], dict[int, str]]:
    """The evaluation at the shrunk scale, and a comment for each task replaced by a stand-in.

    Tasks that run offline on this machine are kept: runlib's own tasks from held-out documents, task files
    that are here, and the lm-eval tasks runlib ships (runlib.eval.harness.taskfiles: runlib_arith_*,
    runlib_heldout_*). An lm-eval task that downloads its data from the Hugging Face Hub, or whose task file
    is not here, becomes the shipped runlib_heldout_mc on the first used source's held-out documents; when
    lm-eval cannot score the shrunk model at all (no Hugging Face architecture computes its block:
    runlib.export.hf.hf_architecture), every lm-eval task becomes runlib's own multiple_choice on them."""
    e = spec.eval
    out: dict[str, Any] = {"after_each_phase": e.after_each_phase, "heldout_tokens": EVAL_TOKENS}
    first = spec.phases[0].mixture
    source = next((name for name, w in first.items() if w > 0), next(iter(first)))
    unexportable = exportable(model) if any(t.kind == "lm_eval" for t in e.tasks) else None
    tasks: list[dict[str, Any]] = []
    notes: dict[int, str] = {}
    for task in e.tasks:
        if task.kind == "lm_eval":
            t, note = lm_eval_task(task, source, unexportable)
        else:
            t, note = runlib_task(task, source)
        if note is not None:
            notes[len(tasks)] = note
        t["examples"] = max(1, min(task.examples, heldout_docs))
        tasks.append(t)
    if tasks:
        out["tasks"] = tasks
    return out, notes


def lm_eval_task(task: EvalTaskSpec, source: str, unexportable: str | None) -> tuple[dict[str, Any], str | None]:
    """An lm-eval task kept if it runs offline, else a stand-in on `source`'s held-out documents (and why)."""
    shipped = EvalTaskSpec.RUNLIB_LM_EVAL_TASKS
    t: dict[str, Any] = {"name": task.name, "kind": task.kind}
    local = task.path is not None and Path(task.path).exists()
    if unexportable:
        t = {"name": task.name, "kind": "multiple_choice", "from_heldout": source}
        return t, (
            f"stand-in: lm-eval task {task.task} -> runlib's multiple_choice on {source}'s held-out "
            f"documents: lm-eval scores a Hugging Face export, and {unexportable}"
        )
    if shipped.get(task.task or "") == "heldout":
        t.update(task=task.task, from_heldout=task.from_heldout)
        return t, None
    if shipped.get(task.task or "") == "arithmetic" or (local and not task.download):
        t["task"] = task.task
        if local:
            t["path"] = task.path
        return t, None
    t.update(task="runlib_heldout_mc", from_heldout=source)
    why = (
        "it downloads its data from the Hugging Face Hub, and the shrunk run runs offline"
        if task.download
        else f"its task file {task.path!r} is not here"
    )
    return t, (
        f"stand-in: lm-eval task {task.task} -> runlib_heldout_mc (shipped with runlib) on {source}'s "
        f"held-out documents, scored by lm-eval too: {why}"
    )


def runlib_task(task: EvalTaskSpec, source: str) -> tuple[dict[str, Any], str | None]:
    """One of runlib's own tasks: from held-out documents, from its task file if here, else from `source`'s."""
    t: dict[str, Any] = {"name": task.name, "kind": task.kind}
    if task.from_heldout is not None:
        t["from_heldout"] = task.from_heldout
    elif task.path and Path(task.path).is_file():
        t["path"] = task.path
    else:  # a task file that is not here: the same kind built from the first source's held-out documents
        t["from_heldout"] = source
        return t, f"stand-in: task file {task.path!r} is not here; built from {source}'s held-out documents"
    return t, None


def ladder_section(spec: RunSpec, plan: Plan, data: dict[str, Any]) -> tuple[dict[str, Any] | None, list[str]]:
    """The scaling ladder at the shrunk scale: each rung width in the published ratio to the target's d_model,
    on whole heads of the shrunk model (runlib.ladder.rungs.rung_model keeps the target's head_dim), at least
    two distinct widths; tokens per parameter as published, compute budgets scaled with the run's FLOPs;
    min_steps no more than 2 x MIN_PHASE_STEPS (a shrunk rung trains a few dozen steps)."""
    lad = spec.ladder
    assert lad is not None
    m = data["model"]
    head = m["d_model"] // m["heads"]
    scale = m["d_model"] / spec.model.d_model
    widths = sorted({min(m["d_model"], max(head, round(w * scale / head) * head)) for w in lad.widths})
    wanted = len(set(lad.widths))  # as many sizes as published: the fit needs them (runlib.ladder.rungs)
    for w in range(head, m["d_model"] + 1, head):  # widths that met on one multiple: the next free multiples
        if len(widths) >= wanted:
            break
        widths = sorted(set(widths) | {w})
    if len(widths) < min(wanted, 2):
        return None, [f"ladder: dropped (the shrunk d_model {m['d_model']} holds one head of {head}: no two widths)"]
    out = lad.model_dump(mode="json", exclude_none=True)
    out["widths"] = widths
    out["min_steps"] = min(lad.min_steps, 2 * MIN_PHASE_STEPS)
    if lad.compute_flops is not None:
        shrunk = derive(validate_data(data).spec)
        out["compute_flops"] = [float(f"{c * shrunk.flops_total / plan.flops_total:.3g}") for c in lad.compute_flops]
    try:  # the fit's needs (fitted rungs over sizes and multipliers), as the workflow's graph checks them
        ladder_rungs(validate_data({**data, "ladder": out}).spec)
    except UserError as exc:
        return None, [f"ladder: dropped (at the shrunk scale: {exc})"]
    note = (
        f"ladder: widths {list(lad.widths)} -> {widths} (the same ratio to d_model, whole heads of {head}); "
        f"min_steps {lad.min_steps} -> {out['min_steps']}"
    )
    return out, [note]
