"""The training loop of one phase, run under `accelerate launch` (one process per device).

Readable in one screen (nanoGPT style): the arithmetic lives in accumulate.py, the data in
runlib.data.loader (a pure function of seed, phase and data step), checkpoints in checkpoint.py.
Optimizer steps and data steps differ only when monitor.spike skips a batch or rolls back: the
offending data steps are recorded and the data index steps over them.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from runlib.train import checkpoint as ckpt
from runlib.train.accumulate import accumulate, token_loss_sum
from runlib.train.spikes import SpikeDetector


@dataclass
class PhaseRun:
    """Everything the loop needs, prepared by runlib.train.worker."""

    spec: object
    plan: object
    phase_index: int
    loader: object  # runlib.data.loader.PhaseLoader
    out_dir: Path  # the artifact being built (rank 0 writes final.pt, metrics.jsonl, spikes.json)
    scratch_dir: Path  # this phase's resumable checkpoints (they survive a killed job)
    init_checkpoint: Path | None  # the previous phase's final state
    stop_after_steps: int | None = None  # tests: stop early, as if killed


def data_step(update: int, skipped: list[int]) -> int:
    """The data step that feeds optimizer update `update` of the phase, stepping over skipped data."""
    d = update
    for s in sorted(skipped):
        if s <= d:
            d += 1
    return d


def train_phase_loop(run: PhaseRun, accelerator) -> dict:
    from runlib.model.transformer import build_model, param_groups

    spec, plan, phase = run.spec, run.plan, run.plan.phases[run.phase_index]
    rank, world, micro = accelerator.process_index, accelerator.num_processes, phase.settings.micro_batch
    torch.manual_seed(spec.seed)
    model = build_model(spec, plan)
    model.set_rope(phase.settings.rope_theta, phase.settings.seq_len)
    opt = spec.optimizer
    optimizer = torch.optim.AdamW(param_groups(model, opt.weight_decay), lr=opt.lr, betas=opt.betas, eps=opt.eps)
    state = {
        "step": phase.span.start_step,
        "tokens": phase.span.start_tokens,
        "losses": [],
        "skipped": [],
        "rollbacks": 0,
    }
    resume = ckpt.latest(run.scratch_dir)
    for path in (run.init_checkpoint, resume):  # the previous phase's end, then this phase's last save
        if path is not None:
            saved = ckpt.load(path)
            model.load_state_dict(saved["model"])
            optimizer.load_state_dict(saved["optimizer"])
    metrics = run.scratch_dir / "metrics.jsonl"  # beside the checkpoints, so a resumed job keeps its history
    if resume is not None:
        state.update(saved["state"])
        ckpt.set_rng_state(saved["rng"])
        if accelerator.scaler is not None and saved.get("scaler"):  # fp16: the loss scale resumes too
            accelerator.scaler.load_state_dict(saved["scaler"])
        if rank == 0 and metrics.exists():  # drop what was logged after the checkpoint: it is replayed
            kept = [ln for ln in metrics.read_text().splitlines() if ln and json.loads(ln)["step"] <= state["step"]]
            metrics.write_text("".join(line + "\n" for line in kept))
    model, optimizer = accelerator.prepare(model, optimizer)
    spike = spec.monitor.spike
    detector = SpikeDetector(spike.zscore, spike.window, state["losses"]) if spike else None
    every = round(plan.duration_steps(spec.checkpoint.every)) if spec.checkpoint.every else 0
    log_every = max(1, phase.steps // 20)
    spikes, t0, first = [], time.time(), state["step"]
    while state["step"] < phase.span.end_step:
        update = state["step"] - phase.span.start_step
        data = data_step(update, state["skipped"])
        batch_sequences = run.loader.batch_size(data)  # a batch ramp may change it within the phase
        accum = batch_sequences // (micro * world)  # micro-steps per update on this rank
        tokens_per_step = batch_sequences * phase.settings.seq_len
        # the one schedule, in tokens, across phases; at the step's end so the first update's LR is not 0
        lr = plan.schedule.lr_at(state["tokens"] + tokens_per_step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        batches = [run.loader.micro_batch(data, m, rank, world, micro) for m in range(accum)]
        local = torch.tensor([float(sum(b.scored_tokens for b in batches))])
        total_scored = int(accelerator.reduce(local, reduction="sum").item())
        by_source = torch.zeros(2, len(run.loader.source_names))  # [loss sum, scored tokens] per source

        def loss_sum(b, stats=by_source):
            logits = model(b.input_ids, b.position_ids, b.doc_ids)
            with torch.no_grad():
                tok = torch.nn.functional.cross_entropy(
                    logits.transpose(1, 2), b.targets, ignore_index=-100, reduction="none"
                )
                stats[0].index_add_(0, b.source_index, tok.sum(1))
                stats[1].index_add_(0, b.source_index, (b.targets != -100).sum(1).float())
            return token_loss_sum(logits, b.targets, opt.z_loss)

        model.train()
        syncs = [accelerator.no_sync(model) if m < accum - 1 else contextlib.nullcontext() for m in range(accum)]
        local_loss = accumulate(
            batches, loss_sum, lambda b: b.scored_tokens, total_scored, world, accelerator.backward, syncs
        )
        loss = float(accelerator.reduce(torch.tensor([local_loss]), reduction="sum").item())
        by_source = accelerator.reduce(by_source, reduction="sum")
        grad_norm = float(accelerator.clip_grad_norm_(model.parameters(), opt.grad_clip or math.inf))

        if detector is not None and (detector.is_spike(loss) or not math.isfinite(grad_norm)):
            spikes.append(
                {"step": state["step"], "data_step": data, "loss": loss, "grad_norm": grad_norm, "action": spike.action}
            )
            if spike.action != "log":
                optimizer.zero_grad(set_to_none=True)  # this batch makes no update
                state["skipped"].append(data)
                if spike.action == "rollback":
                    rollback(run, model, optimizer, state, spike.max_retries)
                continue
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if detector is not None:
            detector.accept(loss)
            state["losses"] = list(detector.losses)
        state["step"] += 1
        state["tokens"] += tokens_per_step
        if rank == 0 and (state["step"] % log_every == 0 or state["step"] == phase.span.end_step):
            seconds = time.time() - t0
            tokens_per_s = (state["step"] - first) * tokens_per_step / max(seconds, 1e-9)
            record = {
                "step": state["step"],
                "tokens": state["tokens"],
                "loss": loss,
                "lr": lr,
                "grad_norm": grad_norm,
                "tokens_per_s": tokens_per_s,
                "mfu": tokens_per_s * phase.flops_per_token / (plan.peak_flops() * world),
                "loss_by_source": {
                    s: float(by_source[0, j] / by_source[1, j])
                    for j, s in enumerate(run.loader.source_names)
                    if by_source[1, j] > 0
                },
            }
            metrics.parent.mkdir(parents=True, exist_ok=True)
            with metrics.open("a") as f:
                f.write(json.dumps(record) + "\n")
            eta = (phase.span.end_step - state["step"]) * tokens_per_step / max(tokens_per_s, 1e-9)
            print(
                f"[{phase.name}] step {state['step']}/{phase.span.end_step} loss {loss:.4f} lr {lr:.2e} "
                f"{tokens_per_s:,.0f} tok/s ETA {eta:,.0f} s",
                flush=True,
            )
        if every and state["step"] % every == 0 and state["step"] < phase.span.end_step:
            save_state(
                run.scratch_dir / f"step-{state['step']}.pt", model, optimizer, state, accelerator, spec.checkpoint.keep
            )
        if run.stop_after_steps is not None and state["step"] - first >= run.stop_after_steps:
            save_state(run.scratch_dir / f"step-{state['step']}.pt", model, optimizer, state, accelerator)
            return state  # tests: stop here, with the state saved like a regular checkpoint
    save_state(run.out_dir / "final.pt", model, optimizer, state, accelerator)
    if rank == 0:
        (run.out_dir / "metrics.jsonl").write_text(metrics.read_text() if metrics.exists() else "")
        (run.out_dir / "spikes.json").write_text(
            json.dumps({"spikes": spikes, "skipped_data_steps": state["skipped"]}, indent=2)
        )
    return state


def save_state(path: Path, model, optimizer, state: dict, accelerator, keep: int = 0) -> None:
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        payload = {
            "model": accelerator.unwrap_model(model).state_dict(),
            "optimizer": optimizer.state_dict(),
            "state": dict(state),
            "rng": ckpt.rng_state(),
            "scaler": accelerator.scaler.state_dict() if accelerator.scaler is not None else {},
        }
        ckpt.save(path, payload)
        if keep:
            ckpt.prune(path.parent, keep)
    accelerator.wait_for_everyone()


def rollback(run: PhaseRun, model, optimizer, state: dict, max_retries: int) -> None:
    """Back to the last checkpoint, keeping the offending data steps skipped from now on."""
    path = ckpt.latest(run.scratch_dir)
    state["rollbacks"] += 1
    if state["rollbacks"] > max_retries:
        raise RuntimeError(f"loss spikes persisted after {max_retries} rollbacks (monitor.spike.max_retries)")
    if path is None:
        return  # nothing saved yet in this phase: the skip alone applies
    saved = ckpt.load(path)
    model_to_load = model.module if hasattr(model, "module") else model
    model_to_load.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    skipped, rollbacks = state["skipped"], state["rollbacks"]
    state.update(saved["state"])
    state["skipped"], state["rollbacks"] = sorted(set(skipped)), rollbacks
