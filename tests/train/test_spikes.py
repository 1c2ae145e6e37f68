import math

from runlib.train.loop import data_step
from runlib.train.spikes import MIN_HISTORY, SpikeDetector


def test_detector_needs_history_then_flags_outliers():
    d = SpikeDetector(zscore=3.0, window=50)
    assert not d.is_spike(100.0)  # no history yet: nothing is a spike
    for i in range(MIN_HISTORY):
        d.accept(2.0 + 0.01 * (i % 3))
    assert not d.is_spike(2.02)
    assert d.is_spike(3.0)
    assert d.is_spike(math.nan) and d.is_spike(math.inf)


def test_detector_window_is_bounded_and_restorable():
    d = SpikeDetector(zscore=3.0, window=5)
    for x in range(20):
        d.accept(float(x))
    assert list(d.losses) == [15.0, 16.0, 17.0, 18.0, 19.0]
    again = SpikeDetector(3.0, 5, list(d.losses))
    assert again.score(25.0) == d.score(25.0)


def test_data_step_steps_over_skipped_batches():
    assert [data_step(u, []) for u in range(4)] == [0, 1, 2, 3]
    assert [data_step(u, [1]) for u in range(4)] == [0, 2, 3, 4]
    assert [data_step(u, [0, 1, 3]) for u in range(3)] == [2, 4, 5]
