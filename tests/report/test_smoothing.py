"""The loss EMA over tokens: weights by logging interval, so a change of logging density does not change the curve."""

from __future__ import annotations

import math

import pytest

from runlib.report.smoothing import ema_over_tokens


def step_signal(t: float) -> float:
    """The per-token loss of the tests: 4 before token 500, 2 from it on."""
    return 4.0 if t <= 500 else 2.0


def records(every: list[tuple[int, int]]) -> tuple[list[float], list[float]]:
    """(tokens, value) logged at the end of each interval, the value the interval's mean of step_signal;
    `every`: (interval, until) pairs, e.g. [(10, 500), (100, 1000)]: every 10 tokens up to 500, then every 100."""
    xs, t = [], 0
    for interval, until in every:
        while t < until:
            t += interval
            xs.append(float(t))
    return xs, [step_signal(x) for x in xs]


def test_density_does_not_change_the_curve() -> None:
    dense = records([(10, 1000)])
    sparse = records([(100, 1000)])
    mixed = records([(10, 500), (50, 1000)])  # the density jumps at token 500, as at a phase line
    got = {name: ema_over_tokens(x, y, 150.0, 0.0) for name, (x, y) in (("d", dense), ("s", sparse), ("m", mixed))}
    at = {name: dict(zip(xs, got[name], strict=True)) for name, (xs, _) in (("d", dense), ("s", sparse), ("m", mixed))}
    for t in (100.0, 500.0, 600.0, 800.0, 1000.0):
        assert at["d"][t] == pytest.approx(at["s"][t], rel=1e-9) == pytest.approx(at["m"][t], rel=1e-9)
    # the exact continuous EMA of the step signal at t = 1000: 2 + 2 * 2^(-500/150) (debiased by 1 - 2^(-1000/150))
    mass = 1 - 2 ** (-1000 / 150)
    want = (4 * (2 ** (-500 / 150) - 2 ** (-1000 / 150)) + 2 * (1 - 2 ** (-500 / 150))) / mass
    assert at["d"][1000.0] == pytest.approx(want, rel=1e-9)


def test_smoothing_a_noisy_curve() -> None:
    xs = [float(10 * i) for i in range(1, 401)]
    trend = [3.0 + 0.5 * math.exp(-x / 1000) for x in xs]
    noisy = [v + (0.5 if i % 2 else -0.5) for i, v in enumerate(trend)]
    smooth = ema_over_tokens(xs, noisy, 100.0, 0.0)
    assert smooth[0] == noisy[0]  # debiased: starts at the first value, not at 0
    late = range(200, 400)
    raw_error = max(abs(noisy[i] - trend[i]) for i in late)
    smooth_error = max(abs(smooth[i] - trend[i]) for i in late)
    assert raw_error == pytest.approx(0.5) and smooth_error < 0.05
    assert all(min(noisy) <= v <= max(noisy) for v in smooth)


def test_constant_stays_constant_and_bad_input_is_refused() -> None:
    assert ema_over_tokens([5.0, 5.0, 9.0, 20.0], [1.5] * 4, 3.0, 0.0) == pytest.approx([1.5] * 4)
    assert ema_over_tokens([7.0, 7.0], [2.0, 6.0], 3.0) == [2.0, 2.0]  # an empty interval adds no weight
    assert ema_over_tokens([], [], 1.0) == []
    with pytest.raises(ValueError, match="differ in length"):
        ema_over_tokens([1.0], [], 1.0)
    with pytest.raises(ValueError, match="positive"):
        ema_over_tokens([1.0], [1.0], 0.0)


def test_a_record_covering_part_of_its_gap_weighs_only_that_part() -> None:
    # after a resume inside an interval the log's mean covers fewer tokens than the gap (interval_tokens)
    h = 100.0
    got = ema_over_tokens([100.0, 200.0], [4.0, 2.0], h, 0.0, covered_tokens=[100.0, 50.0])
    w1, w2 = (1 - 2 ** (-100 / h)) * 2 ** (-100 / h), 1 - 2 ** (-50 / h)  # the first ages by the whole gap
    assert got[1] == pytest.approx((4 * w1 + 2 * w2) / (w1 + w2), rel=1e-12)
    whole = ema_over_tokens([100.0, 200.0], [4.0, 2.0], h, 0.0)  # no interval_tokens: the gap is covered
    assert whole == ema_over_tokens([100.0, 200.0], [4.0, 2.0], h, 0.0, covered_tokens=[None, None])
    assert whole[1] < got[1]  # the shorter cover gives the new value less weight
