"""Loss-spike detection (monitor.spike): a step whose loss sits `zscore` standard deviations above
the mean of the last `window` accepted steps is a spike. Pure: the window is part of the checkpoint."""

from __future__ import annotations

import math
from collections import deque

MIN_HISTORY = 10  # too few losses give no meaningful spread


class SpikeDetector:
    def __init__(self, zscore: float, window: int, history: list[float] | None = None):
        self.zscore = zscore
        self.losses: deque[float] = deque(history or [], maxlen=window)

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
