"""runlib.ladder.fit: the Hoffmann et al. 2022 Approach 3 fit recovers a known law."""

import math

import numpy as np
import pytest

from runlib.ladder.fit import MAX_EXPONENT, MIN_EXPONENT, LawFit, bootstrap_predictions, fit_law, law_problems

# Besiroglu et al. 2024's refit of Chinchilla (arXiv 2404.10102): a law with published magnitudes
TRUE = LawFit(E=1.8172, A=482.01, B=2085.43, alpha=0.3478, beta=0.3658, objective=0.0, points=0)
SIZES = [2e7, 6e7, 2e8, 6e8, 2e9]
TOKENS_PER_PARAM = [5, 20, 80]


def _ladder(noise: float = 0.0, seed: int = 0):
    rng = np.random.default_rng(seed)
    n, d, loss = [], [], []
    for size in SIZES:
        for k in TOKENS_PER_PARAM:
            n.append(size)
            d.append(k * size)
            loss.append(TRUE.loss(size, k * size) * math.exp(rng.normal(0.0, noise)))
    return n, d, loss


def test_recovers_known_law_from_exact_losses():
    n, d, loss = _ladder()
    best, _ = fit_law(n, d, loss)
    assert best.E == pytest.approx(TRUE.E, rel=1e-4)
    assert best.A == pytest.approx(TRUE.A, rel=1e-3)
    assert best.B == pytest.approx(TRUE.B, rel=1e-3)
    assert best.alpha == pytest.approx(TRUE.alpha, abs=1e-4)
    assert best.beta == pytest.approx(TRUE.beta, abs=1e-4)
    # the compute-optimal split follows: N_opt(C) as the law's own closed form gives it
    n_opt, d_opt = best.optimum(1e21)
    assert 6 * n_opt * d_opt == pytest.approx(1e21, rel=1e-9)
    assert best.frontier(1e21) <= min(best.loss(n_opt * f, 1e21 / 6 / (n_opt * f)) for f in (0.5, 2.0))


def test_prediction_interval_covers_the_truth_with_noisy_losses():
    n, d, loss = _ladder(noise=0.005, seed=3)
    best, others = fit_law(n, d, loss)
    target = (7e9, 1.4e11)  # beyond the ladder: 3.5x its largest size
    (p,) = bootstrap_predictions(n, d, loss, [target], best, others, resamples=20, seed=0)
    truth = TRUE.loss(*target)
    assert p.resamples == 20
    assert p.low <= p.value <= p.high
    assert p.low <= truth <= p.high
    assert abs(p.value - truth) / truth < 0.02


def test_bootstrap_is_deterministic():
    n, d, loss = _ladder(noise=0.005, seed=1)
    best, others = fit_law(n, d, loss)
    a = bootstrap_predictions(n, d, loss, [(1e9, 2e10)], best, others, resamples=8, seed=5)
    b = bootstrap_predictions(n, d, loss, [(1e9, 2e10)], best, others, resamples=8, seed=5)
    assert a == b


def test_refuses_bad_points():
    with pytest.raises(ValueError, match="positive and finite"):
        fit_law([1e6, 2e6], [1e7, 0], [3.0, 2.9])


def test_degenerate_law_evaluates_without_overflow():
    law = LawFit(E=0.0, A=1e300, B=1.0, alpha=-2.0, beta=0.5, objective=0.0, points=0)
    assert law.loss(1e9, 1e9) == math.inf


def test_starts_that_run_off_past_float_range_are_dropped():
    # specs/demo-ladder.yaml's arithmetic held-out losses (5 fitted rungs): one of the grid's best starts
    # runs off along b, beta -> inf to b ~ 7,600, where exp(b) overflowed and the fit_ladder stage failed
    params = [12384, 12384, 54000, 54000, 98624]
    tokens = [49152, 100352, 215040, 432128, 393216]
    losses = [4.5400, 3.2499, 2.7307, 2.6994, 2.3789]
    best, others = fit_law(params, tokens, losses)
    for fit in (best, *others):
        assert all(math.isfinite(x) for x in (fit.A, fit.B, fit.E))
    assert abs(best.loss(54000, 215040) - 2.7307) < 0.05


# the overall held-out losses of the session-4 demo ladder (5 fitted rungs, widths 32/48/64 x 4 and 8
# tokens per parameter less w64 x 8): an unconstrained fit gave alpha = -0.031 (E = 0) and predicted the
# held-out rung 6.8% high
SHORT_LADDER = (
    [12384, 12384, 54000, 54000, 98624],
    [49152, 100352, 215040, 432128, 393216],
    [6.4563, 5.9944, 5.7827, 5.4788, 5.3951],
)


def test_exponents_stay_positive_and_an_undetermined_law_is_flagged():
    best, others = fit_law(*SHORT_LADDER)
    assert all(f.alpha > 0 and f.beta > 0 for f in (best, *others))
    problems = law_problems(best)  # 5 points for 5 parameters: a step, not a law
    assert problems and any("alpha" in p or "beta" in p for p in problems)
    assert law_problems(TRUE) == []


@pytest.mark.parametrize(
    ("alpha", "beta", "flag"),
    [
        (0.35, 0.37, None),
        (MIN_EXPONENT / 2, 0.37, "alpha"),
        (0.35, MAX_EXPONENT * 2, "beta"),
        (MIN_EXPONENT, MAX_EXPONENT, None),  # the bounds themselves are usable
    ],
)
def test_law_problems_bounds(alpha, beta, flag):
    law = LawFit(E=1.8, A=482.0, B=2085.0, alpha=alpha, beta=beta, objective=0.0, points=0)
    problems = law_problems(law)
    if flag is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problems[0].startswith(flag)
