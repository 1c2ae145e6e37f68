"""Where a phase's loop stands (LoopState), and what it was given to run (PhaseRun).

LoopState is what a resumable checkpoint carries (runlib.train.engine.Engine.save_resumable stores
`saved()`, Engine.restore and Engine.rollback give back such a dict): the optimizer step, the tokens
after it, the spike detector's window of accepted losses, the skipped data steps and the rollbacks so far.
The data step is not stored: it follows from the step and the skips (`data_step`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from runlib.data.loader import PhaseLoader
from runlib.data.shards import TokenDirs
from runlib.train.config import TrainPhaseConfig


@dataclass
class PhaseRun:
    """Everything the loop needs, prepared by runlib.train.worker."""

    config: TrainPhaseConfig
    loader: PhaseLoader
    out_dir: Path  # the artifact being built (rank 0 writes final.pt, metrics.jsonl, spikes.json, run.json)
    scratch_dir: Path  # this phase's resumable checkpoints (they survive a killed job)
    init_checkpoint: Path | None  # the previous phase's final state
    heldout_dirs: Mapping[str, TokenDirs]  # source -> token directories (held-out split) for monitor.eval_every
    stop_after_steps: int | None = None  # tests: stop early, as if killed


def data_step(update: int, skipped: list[int]) -> int:
    """The data step that feeds optimizer update `update` of the phase, stepping over skipped data."""
    d = update
    for s in sorted(skipped):
        if s <= d:
            d += 1
    return d


@dataclass
class LoopState:
    step: int  # optimizer steps of the run so far (the phase starts at its span's start_step)
    tokens: int  # the run's tokens after `step`
    losses: list[float] = field(default_factory=list)  # the spike detector's window (accepted steps)
    skipped: list[int] = field(default_factory=list)  # data steps whose batches made no update
    rollbacks: int = 0  # spike rollbacks in this phase (monitor.spike.max_retries bounds them)

    def data_step(self, start_step: int) -> int:
        """The data step that feeds the next update of a phase starting at start_step."""
        return data_step(self.step - start_step, self.skipped)

    def update(self, saved: Mapping[str, Any]) -> None:
        """Take the fields a checkpoint (or a rollback) gives back; the others stay."""
        names = {f.name for f in fields(self)}
        for name, value in saved.items():
            if name in names:
                setattr(self, name, value)

    def saved(self) -> dict[str, Any]:
        """The dict a checkpoint stores (torch.load(weights_only=True) reads it back)."""
        return asdict(self)
