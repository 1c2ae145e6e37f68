"""What a phase reports while it trains: metrics.jsonl, the console line and progress.json (rank 0 writes).

Records are logged each time the run's token count crosses a multiple of monitor.log_every_tokens, one
interval shared by every phase, and at the phase's end. A record: step, tokens (after the step), loss (the
mean over the interval's steps, weighted by their scored tokens; not one step's loss), loss_by_source
(token means over the interval), interval_steps and interval_tokens (what the means cover: fewer steps at a
phase's end, or after a resume from a checkpoint inside an interval), lr and grad_norm (of the interval's
last step), tokens_per_s and mfu (the phase so far, evaluation and checkpoint time excluded);
heldout_loss_by_source at monitor.eval_every.
progress.json in the scratch directory is replaced every PROGRESS_EVERY_S seconds (step, tokens, the last
interval's loss, tokens/s, ETA): what the console view of the workflow reads (runlib.workflow.progress).
None of this touches the numerics: it only reads the step's loss.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from runlib.train.engine import Engine
from runlib.train.state import LoopState, PhaseRun
from runlib.train.step import StepResult
from runlib.util.atomic import write_text_atomic

PROGRESS_FILE = "progress.json"
PROGRESS_EVERY_S = 2.0  # wall seconds between progress.json updates (a 200-byte file: negligible)
METRICS_FILE = "metrics.jsonl"


def log_points_crossed(tokens_before: int, tokens_after: int, every_tokens: int) -> bool:
    """Whether a step from tokens_before to tokens_after crosses (or reaches) a multiple of every_tokens on
    the run's token timeline: the logging points are the same in every phase and under a batch ramp."""
    return tokens_after // every_tokens > tokens_before // every_tokens


class IntervalMeans:
    """The mean loss (overall and per source) of the steps since the last logged record."""

    def __init__(self, sources: int) -> None:
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


def write_progress(scratch: Path, progress: dict[str, Any]) -> None:
    """Replace progress.json atomically (a reader never sees half of it)."""
    write_text_atomic(scratch / PROGRESS_FILE, json.dumps(progress) + "\n")


class PhaseLog:
    """The phase's records and its clock: training seconds exclude what runs under `paused()`."""

    def __init__(self, run: PhaseRun, engine: Engine, state: LoopState) -> None:
        self.run, self.engine, self.cfg = run, engine, run.config
        self.main = engine.rank == 0
        self.metrics = run.scratch_dir / METRICS_FILE  # beside the checkpoints: a resumed job keeps its history
        self.first_step, self.first_tokens = state.step, state.tokens
        self.t0, self.paused_s, self.progress_at = time.time(), 0.0, 0.0
        self.interval = IntervalMeans(len(run.loader.source_names))
        span = self.cfg.span
        self.progress: dict[str, Any] = {
            "phase": self.cfg.phase_name,
            "phase_index": self.cfg.phase_index,
            "start_step": span.start_step,
            "end_step": span.end_step,
            "start_tokens": span.start_tokens,
            "end_tokens": span.end_tokens,
            "resumed_at_step": state.step if state.step > span.start_step else None,
            "loss": None,
        }

    def announce(self) -> None:
        """The layout that really runs and where a rerun picked up (the tests and the log read these lines);
        records logged after the checkpoint resumed from are dropped: they are replayed."""
        if not self.main:
            return
        print(f"runlib worker: mesh {json.dumps(self.engine.mesh_dims())}", flush=True)
        if self.first_step > self.cfg.span.start_step:
            print(
                f"runlib worker: resumed at step {self.first_step} ({self.first_tokens:,} tokens) from a checkpoint",
                flush=True,
            )
        if self.metrics.exists():
            lines = self.metrics.read_text().splitlines()
            kept = [ln for ln in lines if ln and json.loads(ln)["step"] <= self.first_step]
            write_text_atomic(self.metrics, "".join(line + "\n" for line in kept))

    def seconds(self) -> float:
        """Training seconds of this attempt (held-out evaluation and checkpoints excluded)."""
        return time.time() - self.t0 - self.paused_s

    @contextmanager
    def paused(self) -> Iterator[None]:
        started = time.time()
        try:
            yield
        finally:
            self.paused_s += time.time() - started

    def after_step(self, state: LoopState, result: StepResult, done: bool) -> None:
        """Add the step to the interval; log a record at a log point, evaluate at monitor.eval_every."""
        mon = self.cfg.monitor
        self.interval.add(result.loss, result.scored_tokens, result.by_source, result.tokens)
        tokens_per_s = (state.tokens - self.first_tokens) / max(self.seconds(), 1e-9)
        record: dict[str, Any] | None = None
        if log_points_crossed(state.tokens - result.tokens, state.tokens, mon.log_every_tokens) or done:
            record = self._interval_record(state, result, tokens_per_s)
        if mon.eval_every_steps and (state.step % mon.eval_every_steps == 0 or done):
            with self.paused():
                heldout = self.engine.heldout_losses(self.run.heldout_dirs, self.run.loader.eos_id, mon.eval_tokens)
            record = (record or {"step": state.step, "tokens": state.tokens}) | {"heldout_loss_by_source": heldout}
        if self.main and record is not None:
            self._append(record, state, result.lr)
        if self.main and (record is not None or time.time() - self.progress_at >= PROGRESS_EVERY_S):
            self._update_progress(state, record, tokens_per_s)

    def _interval_record(self, state: LoopState, result: StepResult, tokens_per_s: float) -> dict[str, Any]:
        estimates = self.cfg.estimates
        record = {
            "step": state.step,
            "tokens": state.tokens,
            "loss": self.interval.loss(),
            "interval_steps": self.interval.steps,
            "interval_tokens": self.interval.tokens,
            "lr": result.lr,
            "grad_norm": result.grad_norm,
            "tokens_per_s": tokens_per_s,
            "mfu": tokens_per_s * estimates.flops_per_token / (estimates.peak_flops_per_device * self.engine.world),
            "loss_by_source": self.interval.loss_by_source(self.run.loader.source_names),
        }
        if self.engine.expert_load:  # each MoE layer's share of the interval's assignments per expert
            record["expert_load"] = self.engine.expert_load.interval_record()
        self.interval.reset()
        return record

    def _append(self, record: dict[str, Any], state: LoopState, lr: float) -> None:
        self.metrics.parent.mkdir(parents=True, exist_ok=True)
        with self.metrics.open("a") as f:
            f.write(json.dumps(record) + "\n")
        if "loss" in record:
            span = self.cfg.span
            eta = (span.end_tokens - state.tokens) / max(record["tokens_per_s"], 1e-9)
            print(
                f"[{self.cfg.phase_name}] step {state.step}/{span.end_step} tokens {state.tokens:,} "
                f"loss {record['loss']:.4f} (mean of {record['interval_steps']} steps) lr {lr:.2e} "
                f"{record['tokens_per_s']:,.0f} tok/s ETA {eta:,.0f} s",
                flush=True,
            )

    def _update_progress(self, state: LoopState, record: dict[str, Any] | None, tokens_per_s: float) -> None:
        if record is not None and "loss" in record:
            self.progress["loss"] = record["loss"]
        self.progress.update(
            step=state.step,
            tokens=state.tokens,
            tokens_per_s=tokens_per_s,
            eta_s=(self.cfg.span.end_tokens - state.tokens) / max(tokens_per_s, 1e-9),
            updated_unix=time.time(),
        )
        write_progress(self.run.scratch_dir, self.progress)
        self.progress_at = time.time()

    def write_outputs(self, spikes: list[dict[str, Any]], state: LoopState, measured: dict[str, Any]) -> None:
        """The artifact's metrics.jsonl, spikes.json and run.json (rank 0)."""
        if not self.main:
            return
        out = self.run.out_dir
        (out / METRICS_FILE).write_text(self.metrics.read_text() if self.metrics.exists() else "")
        (out / "spikes.json").write_text(json.dumps({"spikes": spikes, "skipped_data_steps": state.skipped}, indent=2))
        (out / "run.json").write_text(json.dumps(measured, indent=2, sort_keys=True) + "\n")
