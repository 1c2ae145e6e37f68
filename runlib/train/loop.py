"""The training loop of one phase, run under `accelerate launch` (one process per device).

Readable in one screen (nanoGPT style): the arithmetic lives in accumulate.py, the data in
runlib.data.loader (a pure function of seed, phase and data step), the mesh, tensor parallelism, FSDP2
and activation checkpointing in runlib.model.parallelize, the optimizers in optim.py, checkpoints in
checkpoint.py (the consolidated end-of-phase state) and dist_checkpoint.py (sharded, resumable).
Optimizer steps and data steps differ only when monitor.spike skips a batch or rolls back: the
offending data steps are recorded and the data index steps over them. More skips than
monitor.spike.max_skips_per_window within any `window` data steps (or more rollbacks than max_retries)
stop the phase: SpikeLimitExceeded, with the evidence in the scratch directory's spikes.json.

Training metrics (metrics.jsonl, one JSON object per line) are logged each time the run's token count
crosses a multiple of monitor.log_every_tokens, one interval shared by every phase, and at the phase's end.
A record: step, tokens (after the step), loss (the mean over the interval's steps, weighted by their
scored tokens; not one step's loss), loss_by_source (token means over the interval), interval_steps and
interval_tokens (what the means cover: fewer steps at a phase's end, or after a resume from a checkpoint
inside an interval), lr and grad_norm (of the interval's last step), tokens_per_s and mfu (the phase so far,
evaluation and checkpoint time excluded); heldout_loss_by_source at monitor.eval_every.
Rank 0 also replaces progress.json in the scratch directory every PROGRESS_EVERY_S seconds (step, tokens,
the last interval's loss, tokens/s, ETA): what the console view of the workflow reads
(runlib.workflow.progress). None of this touches the numerics: it only reads the step's loss.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from runlib.train.accumulate import accumulate, token_losses
from runlib.train.engine import Engine
from runlib.train.spikes import (
    SPIKES_EVIDENCE,
    SpikeDetector,
    SpikeLimitExceeded,
    most_skips_in_a_window,
    stop_message,
)


@dataclass
class PhaseRun:
    """Everything the loop needs, prepared by runlib.train.worker."""

    config: object  # runlib.train.config.TrainPhaseConfig
    loader: object  # runlib.data.loader.PhaseLoader
    out_dir: Path  # the artifact being built (rank 0 writes final.pt, metrics.jsonl, spikes.json, run.json)
    scratch_dir: Path  # this phase's resumable checkpoints (they survive a killed job)
    init_checkpoint: Path | None  # the previous phase's final state
    heldout_dirs: dict  # source -> token directory (held-out split) for monitor.eval_every
    stop_after_steps: int | None = None  # tests: stop early, as if killed


PROGRESS_FILE = "progress.json"
PROGRESS_EVERY_S = 2.0  # wall seconds between progress.json updates (a 200-byte file: negligible)


def log_points_crossed(tokens_before: int, tokens_after: int, every_tokens: int) -> bool:
    """Whether a step from tokens_before to tokens_after crosses (or reaches) a multiple of every_tokens on
    the run's token timeline: the logging points are the same in every phase and under a batch ramp."""
    return tokens_after // every_tokens > tokens_before // every_tokens


class IntervalMeans:
    """The mean loss (overall and per source) of the steps since the last logged record."""

    def __init__(self, sources: int):
        self.sources = sources
        self.reset()

    def reset(self) -> None:
        self.loss_sum, self.weight, self.steps, self.tokens = 0.0, 0.0, 0, 0
        self.by_source = torch.zeros(2, self.sources, dtype=torch.float64)

    def add(self, loss: float, scored_tokens: float, by_source: torch.Tensor, tokens: int) -> None:
        weight = max(float(scored_tokens), 1.0)
        self.loss_sum += loss * weight
        self.weight += weight
        self.steps += 1
        self.tokens += tokens
        self.by_source += by_source.to(torch.float64)

    def loss(self) -> float:
        return self.loss_sum / self.weight if self.weight else float("nan")

    def loss_by_source(self, names: list[str]) -> dict[str, float]:
        return {
            s: float(self.by_source[0, j] / self.by_source[1, j])
            for j, s in enumerate(names)
            if self.by_source[1, j] > 0
        }


def write_progress(scratch: Path, progress: dict) -> None:
    """Replace progress.json atomically (a reader never sees half of it)."""
    scratch.mkdir(parents=True, exist_ok=True)
    tmp = scratch / f".{PROGRESS_FILE}.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(progress) + "\n")
    os.replace(tmp, scratch / PROGRESS_FILE)


def data_step(update: int, skipped: list[int]) -> int:
    """The data step that feeds optimizer update `update` of the phase, stepping over skipped data."""
    d = update
    for s in sorted(skipped):
        if s <= d:
            d += 1
    return d


def stop_on_spikes(run: PhaseRun, rank: int, spikes: list[dict], state: dict, reason: str) -> None:
    """Stop the phase (every rank decides alike: the loss is all-reduced) with the evidence: rank 0 writes
    spikes.json into the scratch directory, beside the checkpoints, which stay for a later attempt."""
    evidence = run.scratch_dir / SPIKES_EVIDENCE
    message = stop_message(run.config.phase_name, reason, spikes, str(evidence), str(run.scratch_dir))
    if rank == 0:
        record = {
            "stopped": {"reason": reason, "step": state["step"], "message": message},
            "spikes": spikes,
            "skipped_data_steps": sorted(set(state["skipped"])),
        }
        run.scratch_dir.mkdir(parents=True, exist_ok=True)
        tmp = evidence.with_name(f".{evidence.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(record, indent=2) + "\n")
        os.replace(tmp, evidence)
    raise SpikeLimitExceeded(message)


def train_phase_loop(run: PhaseRun, accelerator) -> dict:
    cfg, span = run.config, run.config.span
    engine = Engine(cfg, accelerator)  # model, mesh, optimizer, checkpoints as the config says
    state = {"step": span.start_step, "tokens": span.start_tokens, "losses": [], "skipped": [], "rollbacks": 0}
    state.update(engine.restore(run.init_checkpoint, run.scratch_dir))
    model, optimizer, dp_rank, dp_size = engine.model, engine.optimizer, engine.dp_rank, engine.dp_size
    if engine.rank == 0:  # the tests and the log read this line: the layout that really runs
        print(f"runlib worker: mesh {json.dumps(engine.mesh_dims())}", flush=True)
        if state["step"] > span.start_step:  # the log says where a rerun picked up, not only the step lines
            print(f"runlib worker: resumed at step {state['step']} ({state['tokens']:,} tokens) from a checkpoint", flush=True)
    metrics = run.scratch_dir / "metrics.jsonl"  # beside the checkpoints, so a resumed job keeps its history
    if engine.rank == 0 and metrics.exists():  # drop what was logged after the checkpoint: it is replayed
        kept = [ln for ln in metrics.read_text().splitlines() if ln and json.loads(ln)["step"] <= state["step"]]
        metrics.write_text("".join(line + "\n" for line in kept))
    spike, mon = cfg.monitor.spike, cfg.monitor
    detector = SpikeDetector(spike.zscore, spike.window, state["losses"]) if spike else None
    spikes, t0, first, first_tokens = [], time.time(), state["step"], state["tokens"]
    paused = 0.0  # seconds in held-out evaluation and checkpoints: not training throughput
    interval = IntervalMeans(len(run.loader.source_names))
    progress = {
        "phase": cfg.phase_name,
        "phase_index": cfg.phase_index,
        "start_step": span.start_step,
        "end_step": span.end_step,
        "start_tokens": span.start_tokens,
        "end_tokens": span.end_tokens,
        "resumed_at_step": first if first > span.start_step else None,
        "loss": None,
    }
    progress_at = 0.0
    while state["step"] < span.end_step:
        update = state["step"] - span.start_step
        data = data_step(update, state["skipped"])
        batch_sequences = run.loader.batch_size(data)  # a batch ramp may change it within the phase
        accum = batch_sequences // (cfg.micro_batch * dp_size)  # micro-steps per update on this rank
        tokens_per_step = batch_sequences * cfg.seq_len
        # the one schedule, in tokens, across phases; at the step's end so the first update's LR is not 0
        lr = cfg.schedule.lr_at(state["tokens"] + tokens_per_step)
        for group in optimizer.param_groups:
            group["lr"] = lr * group.get("lr_scale", 1.0)
        batches = [run.loader.micro_batch(data, m, dp_rank, dp_size, cfg.micro_batch) for m in range(accum)]
        by_source = torch.zeros(2, len(run.loader.source_names))  # [loss sum, scored tokens] per source

        def loss_sum(b, stats=by_source):
            # one pass over the logits: the loss (CE + z-loss) and the CE per source (accumulate.py)
            loss, cross_entropy = token_losses(engine.forward(b), b.targets, cfg.optimizer.z_loss)
            stats[0].index_add_(0, b.source_index, cross_entropy.sum(1))
            stats[1].index_add_(0, b.source_index, (b.targets != -100).sum(1, dtype=torch.float32))
            return loss.sum()

        model.train()
        # global_tokens: one token mean over the whole step on all ranks; micro_batch_mean: mean of means
        total_scored = int(engine.dp_sum(torch.tensor([float(sum(b.scored_tokens for b in batches))])).item())
        local_loss = accumulate(
            batches,
            loss_sum,
            lambda b: b.scored_tokens,
            total_scored,
            dp_size,
            engine.backward,
            engine.sync_contexts(accum),
            cfg.loss_normalization,
        )
        # one all-reduce for the step's loss and the per-source sums
        summed = engine.dp_sum(torch.cat([torch.tensor([local_loss]), by_source.flatten()]))
        loss, by_source = float(summed[0]), summed[1:].view_as(by_source)
        if cfg.loss_normalization == "micro_batch_mean":
            loss /= dp_size  # the mean over ranks of each rank's mean of micro-batch means
        grad_norm = engine.clip_gradients(cfg.optimizer.grad_clip)

        if detector is not None and (detector.is_spike(loss) or not math.isfinite(grad_norm)):
            spikes.append(
                {
                    "step": state["step"],
                    "data_step": data,
                    "loss": loss,
                    "recent_mean": detector.mean(),
                    "zscore": detector.score(loss),
                    "grad_norm": grad_norm,
                    "action": spike.action,
                }
            )
            if spike.action != "log":
                optimizer.zero_grad(set_to_none=True)  # this batch makes no update
                state["skipped"].append(data)
                skips, start = most_skips_in_a_window(state["skipped"], data, spike.window)
                if skips > spike.max_skips_per_window:
                    stop_on_spikes(
                        run,
                        engine.rank,
                        spikes,
                        state,
                        f"{skips} batches skipped within the {spike.window} data steps from {start} "
                        f"(monitor.spike.window), more than monitor.spike.max_skips_per_window = "
                        f"{spike.max_skips_per_window}",
                    )
                if spike.action == "rollback":
                    if state["rollbacks"] >= spike.max_retries:
                        stop_on_spikes(
                            run,
                            engine.rank,
                            spikes,
                            state,
                            f"loss spikes persisted after {spike.max_retries} rollbacks (monitor.spike.max_retries)",
                        )
                    state.update(engine.rollback(run.scratch_dir, state, spike.rollback_steps))
                    # the running statistics as of the checkpoint rolled back to, as a resume from it would
                    detector = SpikeDetector(spike.zscore, spike.window, state["losses"])
                continue
        engine.step()
        if detector is not None:
            detector.accept(loss)
            state["losses"] = list(detector.losses)
        state["step"] += 1
        state["tokens"] += tokens_per_step
        interval.add(loss, total_scored, by_source, tokens_per_step)
        done = state["step"] == span.end_step
        record = None
        seconds = time.time() - t0 - paused
        tokens_per_s = (state["tokens"] - first_tokens) / max(seconds, 1e-9)
        if log_points_crossed(state["tokens"] - tokens_per_step, state["tokens"], mon.log_every_tokens) or done:
            record = {
                "step": state["step"],
                "tokens": state["tokens"],
                "loss": interval.loss(),
                "interval_steps": interval.steps,
                "interval_tokens": interval.tokens,
                "lr": lr,
                "grad_norm": grad_norm,
                "tokens_per_s": tokens_per_s,
                "mfu": tokens_per_s
                * cfg.estimates.flops_per_token
                / (cfg.estimates.peak_flops_per_device * engine.world),
                "loss_by_source": interval.loss_by_source(run.loader.source_names),
            }
            interval.reset()
        if mon.eval_every_steps and (state["step"] % mon.eval_every_steps == 0 or done):
            started = time.time()
            record = (record or {"step": state["step"], "tokens": state["tokens"]}) | {
                "heldout_loss_by_source": engine.heldout_losses(run.heldout_dirs, run.loader.eos_id, mon.eval_tokens)
            }
            paused += time.time() - started
        if record is not None and engine.rank == 0:
            metrics.parent.mkdir(parents=True, exist_ok=True)
            with metrics.open("a") as f:
                f.write(json.dumps(record) + "\n")
            if "loss" in record:
                eta = (span.end_tokens - state["tokens"]) / max(record["tokens_per_s"], 1e-9)
                print(
                    f"[{cfg.phase_name}] step {state['step']}/{span.end_step} tokens {state['tokens']:,} "
                    f"loss {record['loss']:.4f} (mean of {record['interval_steps']} steps) lr {lr:.2e} "
                    f"{record['tokens_per_s']:,.0f} tok/s ETA {eta:,.0f} s",
                    flush=True,
                )
        if engine.rank == 0 and (record is not None or time.time() - progress_at >= PROGRESS_EVERY_S):
            if record is not None and "loss" in record:
                progress["loss"] = record["loss"]
            progress.update(
                step=state["step"],
                tokens=state["tokens"],
                tokens_per_s=tokens_per_s,
                eta_s=(span.end_tokens - state["tokens"]) / max(tokens_per_s, 1e-9),
                updated_unix=time.time(),
            )
            write_progress(run.scratch_dir, progress)
            progress_at = time.time()
        every = cfg.checkpoint.every_steps
        stop = run.stop_after_steps is not None and state["step"] - first >= run.stop_after_steps
        if (every and state["step"] % every == 0 and not done) or stop:
            started = time.time()
            engine.save_resumable(run.scratch_dir, state)
            paused += time.time() - started
        if stop:
            return state  # tests: stop here, with the state saved like a regular checkpoint
    seconds = time.time() - t0 - paused
    engine.save_final(run.out_dir / "final.pt", state)
    measured = engine.measurements(seconds, state["tokens"] - first_tokens, cfg)
    if engine.rank == 0:
        (run.out_dir / "metrics.jsonl").write_text(metrics.read_text() if metrics.exists() else "")
        (run.out_dir / "spikes.json").write_text(
            json.dumps({"spikes": spikes, "skipped_data_steps": state["skipped"]}, indent=2)
        )
        (run.out_dir / "run.json").write_text(json.dumps(measured, indent=2, sort_keys=True) + "\n")
    return state
