"""Loss-spike detection (monitor.spike): a step whose loss sits `zscore` standard deviations above
the mean of the last `window` accepted steps is a spike. Pure: the window is part of the checkpoint.

The bound (monitor.spike.max_skips_per_window): a batch skipped (action skip, or the offending batch of a
rollback) is recorded by its data step; more than `max_skips_per_window` of them within any `window`
consecutive data steps stops the phase (SpikeLimitExceeded). A persistent loss shift (bad data from some
step on, a learning rate that diverges) makes every batch a spike, since a skipped batch never enters the
running statistics: without the bound, skipping never ends.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_left, bisect_right
from collections import deque
from pathlib import Path
from typing import Any, NoReturn

from runlib.errors import UserError
from runlib.train.config import SpikeConfig
from runlib.util.atomic import write_text_atomic

MIN_HISTORY = 10  # too few losses give no meaningful spread
SPIKES_EVIDENCE = "spikes.json"  # in the scratch directory when the bound stops the phase
EVIDENCE_SPIKES = 5  # spikes quoted in the stop message (spikes.json holds the recent ones)


class SpikeDetector:
    def __init__(self, zscore: float, window: int, history: list[float] | None = None):
        self.zscore = zscore
        self.losses: deque[float] = deque(history or [], maxlen=window)

    def mean(self) -> float | None:
        """Mean of the recent accepted losses (None before any)."""
        return sum(self.losses) / len(self.losses) if self.losses else None

    def score(self, loss: float) -> float:
        """How many standard deviations above the recent mean this loss is (0 when unknown)."""
        if len(self.losses) < MIN_HISTORY:
            return 0.0
        mean = sum(self.losses) / len(self.losses)
        var = sum((x - mean) ** 2 for x in self.losses) / (len(self.losses) - 1)
        std = math.sqrt(var)
        if not math.isfinite(loss):
            return math.inf
        return (loss - mean) / std if std > 0 else (math.inf if loss > mean * 1.5 else 0.0)

    def is_spike(self, loss: float) -> bool:
        return self.score(loss) > self.zscore

    def accept(self, loss: float) -> None:
        self.losses.append(loss)


def most_skips_in_a_window(skipped: list[int], data_step: int, window_steps: int) -> tuple[int, int]:
    """The largest number of skipped data steps inside any `window_steps` consecutive data steps that contain
    `data_step` (the newest skip), and the first data step of such a window.

    Looks only at skips within window_steps - 1 of data_step; the caller stops the phase as soon as one
    window holds more than the bound, so that neighbourhood holds at most about twice the bound."""
    ordered = sorted(set(skipped))
    lo = bisect_left(ordered, data_step - window_steps + 1)
    hi = bisect_right(ordered, data_step + window_steps - 1)
    near = ordered[lo:hi]
    best, best_start = 0, data_step
    for i, start in enumerate(near):
        if start > data_step:
            break
        if start + window_steps - 1 < data_step:
            continue
        count = bisect_right(near, start + window_steps - 1) - i
        if count > best:
            best, best_start = count, start
    return best, best_start


class SpikeLimitExceeded(UserError):
    """Loss spikes beyond monitor.spike's bound: the phase stops with the evidence, keeping its checkpoints."""


def stop_message(phase: str, reason: str, spikes: list[dict[str, Any]], evidence_file: str, scratch: str) -> str:
    lines = [f"train_phase {phase}: stopped: {reason}. The last spikes:"]
    for s in spikes[-EVIDENCE_SPIKES:]:
        mean = "unknown" if s.get("recent_mean") is None else f"{s['recent_mean']:.4f}"
        lines.append(
            f"  step {s['step']} (data step {s['data_step']}): loss {s['loss']:.4f}, recent mean {mean} "
            f"(z {s.get('zscore', math.nan):.1f}), grad norm {s['grad_norm']:.4g}, {s['action']}"
        )
    lines.append(
        f"Every spike is in {evidence_file}; checkpoints kept in {scratch}. A loss that stays above the recent "
        "mean (bad data from some step on, a learning rate too high) makes every batch a spike: fix the cause, "
        "or raise monitor.spike.zscore, window or max_skips_per_window (a new key: the phase starts over)."
    )
    return "\n".join(lines)


def write_evidence(
    path: Path, spikes: list[dict[str, Any]], step: int, skipped: list[int], message: str, reason: str
) -> None:
    record = {
        "stopped": {"reason": reason, "step": step, "message": message},
        "spikes": spikes,
        "skipped_data_steps": sorted(set(skipped)),
    }
    write_text_atomic(path, json.dumps(record, indent=2) + "\n")


class SpikePolicy:
    """monitor.spike applied to each step's loss: the detector over the accepted losses, the spikes seen,
    and the two bounds that stop the phase (every rank decides alike: the loss is all-reduced).

    When the bound stops the phase, rank 0 writes spikes.json into the scratch directory, beside the
    checkpoints, which stay for a later attempt."""

    def __init__(self, spike: SpikeConfig | None, losses: list[float], phase: str, scratch: Path, rank: int) -> None:
        self.spike, self.phase, self.scratch, self.rank = spike, phase, scratch, rank
        self.detector = SpikeDetector(spike.zscore, spike.window, losses) if spike else None
        self.spikes: list[dict[str, Any]] = []

    def drops(self, step: int, data: int, loss: float, grad_norm: float) -> bool:
        """Whether this step's batch makes no update (action skip or rollback on a spike); a spike under
        action log is recorded and the step goes on."""
        if self.spike is None or self.detector is None:
            return False
        if not (self.detector.is_spike(loss) or not math.isfinite(grad_norm)):
            return False
        self.spikes.append(
            {
                "step": step,
                "data_step": data,
                "loss": loss,
                "recent_mean": self.detector.mean(),
                "zscore": self.detector.score(loss),
                "grad_norm": grad_norm,
                "action": self.spike.action,
            }
        )
        return self.spike.action != "log"

    def accept(self, loss: float) -> list[float]:
        """The detector's window after an accepted step (what a checkpoint stores)."""
        if self.detector is None:
            return []
        self.detector.accept(loss)
        return list(self.detector.losses)

    def restart(self, losses: list[float]) -> None:
        """The running statistics as of the checkpoint rolled back to, as a resume from it would have them."""
        if self.spike is not None:
            self.detector = SpikeDetector(self.spike.zscore, self.spike.window, losses)

    def check_skips(self, step: int, data: int, skipped: list[int]) -> None:
        """Stop when more batches than max_skips_per_window were skipped within one window of data steps."""
        assert self.spike is not None
        skips, start = most_skips_in_a_window(skipped, data, self.spike.window)
        if skips > self.spike.max_skips_per_window:
            self.stop(
                step,
                skipped,
                f"{skips} batches skipped within the {self.spike.window} data steps from {start} "
                f"(monitor.spike.window), more than monitor.spike.max_skips_per_window = "
                f"{self.spike.max_skips_per_window}",
            )

    def check_rollbacks(self, step: int, rollbacks: int, skipped: list[int]) -> None:
        """Stop when the rollbacks so far reach max_retries."""
        assert self.spike is not None
        if rollbacks >= self.spike.max_retries:
            self.stop(
                step,
                skipped,
                f"loss spikes persisted after {self.spike.max_retries} rollbacks (monitor.spike.max_retries)",
            )

    def stop(self, step: int, skipped: list[int], reason: str) -> NoReturn:
        evidence = self.scratch / SPIKES_EVIDENCE
        message = stop_message(self.phase, reason, self.spikes, str(evidence), str(self.scratch))
        if self.rank == 0:
            write_evidence(evidence, self.spikes, step, skipped, message, reason)
        raise SpikeLimitExceeded(message)
