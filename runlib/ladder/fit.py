"""The scaling-law fit of a ladder: L(N, D) = E + A / N^alpha + B / D^beta (Hoffmann et al. 2022).

Hoffmann et al. 2022 (arXiv 2203.15556), Approach 3 (section 3.3 and appendix D.2): minimise over
(a, b, e, alpha, beta), with A = exp(a), B = exp(b), E = exp(e),

    sum_i Huber_delta( LSE(a - alpha log N_i, b - beta log D_i, e) - log L_i ),   delta = 1e-3,

with L-BFGS from a grid of initialisations (alpha, beta in {0, 0.5, ..., 2}, e in {-1, -0.5, ..., 1},
a, b in {0, 5, ..., 25}) and keep the best. Here the exponents are fitted as their logarithms
(alpha = exp(p), beta = exp(q)), so a fit cannot reach a negative exponent: on a few short CPU rungs an
unconstrained fit found alpha = -0.03 (the loss rising with N, E = 0) and extrapolated 7% off. The grid's
exponent 0 becomes 0.05 for that reason. The whole grid (5 x 5 x 5 x 6 x 6 = 4,500 points) is
evaluated at once and the minimiser starts from its best `starts` points: minimising from every grid
point finds the same optimum on ladders of a few rungs, a hundred times slower. The minimiser is
scipy's BFGS with the analytic gradient: for 5 parameters the full inverse-Hessian estimate costs
nothing, and scipy's L-BFGS-B (Fortran, BLAS on 5-vectors) measured 5x slower on 2 shared cores for
the same optimum. Besiroglu et al. 2024 (arXiv 2404.10102, section 2) found that Hoffmann et al.'s
optimiser stopped early; the tolerance here is tight (gtol 1e-12) so it runs to convergence.

A fit whose exponent ends outside [MIN_EXPONENT, MAX_EXPONENT] is not a power law the rungs determine
(an exponent near 0 is a flat term whose coefficient absorbs E; one far above the published 0.07-0.5,
Kaplan et al. 2020 section 1.2 and Besiroglu et al. 2024 table 1, is a step between two rungs): its
prediction is withheld (`law_problems`), in the report and the audit alike.

The prediction interval is a percentile bootstrap over rungs (Efron & Tibshirani 1993, ch. 13): the
rungs are resampled with replacement, each resample is refitted (from the full fit's best starting
points) and predicts; the interval is the 2.5th and 97.5th percentiles of those predictions. With a
handful of rungs it is wide, and it says nothing of the error of extrapolating the law itself: the
ladder's held-out rungs measure that.

Pure numpy/scipy: no torch, no I/O; deterministic for a given seed.
"""

from __future__ import annotations

import itertools
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

# what np.asarray(x, dtype=float) reads: a sequence of numbers, or an array (a bootstrap resample)
Floats = Sequence[float] | npt.NDArray[Any]

HUBER_DELTA = 1e-3  # Hoffmann et al. 2022, appendix D.2
GRID_ALPHA = (0.05, 0.5, 1.0, 1.5, 2.0)  # Hoffmann et al.'s 0 is log(0) here: the nearest positive start
GRID_BETA = GRID_ALPHA
GRID_E = (-1.0, -0.5, 0.0, 0.5, 1.0)
GRID_A = (0.0, 5.0, 10.0, 15.0, 20.0, 25.0)
GRID_B = GRID_A
DEFAULT_STARTS = 6
DEFAULT_BOOTSTRAP = 200
LOG_FLOAT_MAX = math.log(sys.float_info.max)  # ~709.78: exp() of more overflows
INTERVAL = (2.5, 97.5)  # percentiles of the bootstrap predictions: a 95% interval
MIN_EXPONENT = 0.01  # below: the term is flat over any ladder (a 1000x range changes it by < 7%)
MAX_EXPONENT = 2.5  # above: 5x Kaplan/Hoffmann/Besiroglu's largest published exponent, past the grid's 2


@dataclass(frozen=True)
class LawFit:
    """L(N, D) = E + A / N^alpha + B / D^beta, fitted to `points` (N, D, loss)."""

    E: float
    A: float
    B: float
    alpha: float
    beta: float
    objective: float  # the summed Huber loss at the optimum
    points: int

    def loss(self, params: float, tokens: float) -> float:
        """L(N, D); inf where a term overflows (a degenerate bootstrap fit far from its points)."""

        def log(x: float) -> float:
            return math.log(x) if x > 0 else -math.inf  # exp(e) underflows to 0 for a very negative e

        logs = (
            log(self.A) - self.alpha * math.log(params),
            log(self.B) - self.beta * math.log(tokens),
            log(self.E),
        )
        if max(logs) > 700:  # exp(709) is the largest finite double
            return math.inf
        return sum(math.exp(x) for x in logs)

    def optimum(self, compute_flops: float) -> tuple[float, float]:
        """(N_opt, D_opt) under C = 6 N D (Hoffmann et al. 2022, appendix D.2, eq. 4)."""
        alpha, beta = max(self.alpha, 1e-9), max(self.beta, 1e-9)
        g = (alpha * self.A / (beta * self.B)) ** (1.0 / (alpha + beta))
        return g * (compute_flops / 6.0) ** (beta / (alpha + beta)), (compute_flops / 6.0) ** (
            alpha / (alpha + beta)
        ) / g

    def frontier(self, compute_flops: float) -> float:
        """The lowest loss at compute C = 6 N D: L(N_opt(C), D_opt(C))."""
        n, d = self.optimum(compute_flops)
        return self.loss(n, d)

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def law_problems(fit: LawFit) -> list[str]:
    """Why a fit's law is not determined by its rungs (empty: usable): an exponent outside
    [MIN_EXPONENT, MAX_EXPONENT]."""
    out = []
    for name, value, axis in (("alpha", fit.alpha, "N"), ("beta", fit.beta, "D")):
        if value < MIN_EXPONENT:
            out.append(f"{name} = {value:.3g} < {MIN_EXPONENT}: the loss does not fall with {axis} on these rungs")
        elif value > MAX_EXPONENT:
            out.append(
                f"{name} = {value:.3g} > {MAX_EXPONENT}: a step between rungs, not a power law in {axis} "
                "(more rungs along it are needed)"
            )
    return out


def _as_theta(fit: LawFit) -> np.ndarray:
    logs = np.log(np.maximum([fit.A, fit.B, fit.E, fit.alpha, fit.beta], 1e-300))
    return np.array(logs)


def _objective(theta: np.ndarray, log_n: np.ndarray, log_d: np.ndarray, log_l: np.ndarray) -> tuple[float, np.ndarray]:
    """Summed Huber loss of the log-loss residuals and its gradient in (a, b, e, p, q), alpha = exp(p),
    beta = exp(q)."""
    a, b, e, p, q = theta
    alpha, beta = math.exp(min(p, LOG_FLOAT_MAX)), math.exp(min(q, LOG_FLOAT_MAX))
    u = np.stack([a - alpha * log_n, b - beta * log_d, np.full_like(log_n, e)])
    top = u.max(axis=0)
    w = np.exp(u - top)
    total = w.sum(axis=0)
    lse = top + np.log(total)
    w /= total
    r = lse - log_l
    small = np.abs(r) <= HUBER_DELTA
    value = np.where(small, 0.5 * r * r, HUBER_DELTA * (np.abs(r) - 0.5 * HUBER_DELTA)).sum()
    h = np.clip(r, -HUBER_DELTA, HUBER_DELTA)  # dHuber/dr
    grad = np.array(
        [
            (h * w[0]).sum(),
            (h * w[1]).sum(),
            (h * w[2]).sum(),
            -(h * w[0] * log_n).sum() * alpha,  # d/dp = d/dalpha * alpha
            -(h * w[1] * log_d).sum() * beta,
        ]
    )
    return float(value), grad


def _grid() -> np.ndarray:
    """Hoffmann et al.'s initialisation grid as rows of (a, b, e, log alpha, log beta)."""
    rows = itertools.product(GRID_A, GRID_B, GRID_E, np.log(GRID_ALPHA), np.log(GRID_BETA))
    return np.array(list(rows), dtype=float)


def _grid_objectives(grid: np.ndarray, log_n: np.ndarray, log_d: np.ndarray, log_l: np.ndarray) -> np.ndarray:
    """The Huber objective at every grid row at once (rows x points)."""
    a, b, e, p, q = (grid[:, i : i + 1] for i in range(5))
    alpha, beta = np.exp(p), np.exp(q)
    u1 = a - alpha * log_n[None, :]
    u2 = b - beta * log_d[None, :]
    u3 = np.broadcast_to(e, u1.shape)
    lse = np.logaddexp(np.logaddexp(u1, u2), u3)
    r = np.abs(lse - log_l[None, :])
    values: np.ndarray = np.where(r <= HUBER_DELTA, 0.5 * r * r, HUBER_DELTA * (r - 0.5 * HUBER_DELTA)).sum(axis=1)
    return values


def _minimise(
    starts: np.ndarray, log_n: np.ndarray, log_d: np.ndarray, log_l: np.ndarray
) -> list[tuple[float, np.ndarray]]:
    """BFGS from each start; (objective, theta) of each, best first."""
    from scipy.optimize import minimize

    out = []
    for start in starts:
        res = minimize(
            _objective,
            start,
            args=(log_n, log_d, log_l),
            jac=True,
            method="BFGS",
            options={"gtol": 1e-12, "maxiter": 2000},
        )
        # a, b, e past log(float max) ~709.78 have no double A, B, E: BFGS runs off along the ridge b, beta
        # -> inf (B / D^beta a step in D) on series a few rungs barely constrain (specs/demo-ladder.yaml's
        # arithmetic reached b = 7,621); such a start is dropped like a non-finite one.
        if np.all(np.isfinite(res.x)) and np.all(res.x[:3] < LOG_FLOAT_MAX) and np.all(res.x[3:] < LOG_FLOAT_MAX):
            out.append((float(res.fun), res.x))
    out.sort(key=lambda item: item[0])
    return out


def _law(theta: np.ndarray, objective: float, points: int) -> LawFit:
    a, b, e, p, q = (float(x) for x in theta)
    return LawFit(
        E=math.exp(e),
        A=math.exp(a),
        B=math.exp(b),
        alpha=math.exp(p),
        beta=math.exp(q),
        objective=objective,
        points=points,
    )


def _logs(params: Floats, tokens: Floats, losses: Floats) -> tuple[np.ndarray, ...]:
    n = np.asarray(params, dtype=float)
    d = np.asarray(tokens, dtype=float)
    loss = np.asarray(losses, dtype=float)
    if not (len(n) == len(d) == len(loss)) or len(n) == 0:
        raise ValueError("fit_law: params, tokens and losses must be non-empty and of the same length")
    if np.any(n <= 0) or np.any(d <= 0) or np.any(~np.isfinite(loss)) or np.any(loss <= 0):
        raise ValueError("fit_law: every parameter count, token count and loss must be positive and finite")
    return np.log(n), np.log(d), np.log(loss)


def fit_law(
    params: Floats,
    tokens: Floats,
    losses: Floats,
    starts: int = DEFAULT_STARTS,
    initial: Sequence[LawFit] = (),
) -> tuple[LawFit, list[LawFit]]:
    """The best fit and the next best local optima (distinct starting points for refits).

    `initial`: fits to start from instead of the grid (the bootstrap refits start from the full fit's)."""
    log_n, log_d, log_l = _logs(params, tokens, losses)
    if initial:
        chosen = np.array([_as_theta(f) for f in initial])
    else:
        grid = _grid()
        values = _grid_objectives(grid, log_n, log_d, log_l)
        chosen = grid[np.argsort(values, kind="stable")[:starts]]
    results = _minimise(chosen, log_n, log_d, log_l)
    if not results:
        raise ValueError("fit_law: no initialisation converged to finite parameters")
    fits = [_law(theta, value, len(log_n)) for value, theta in results]
    return fits[0], fits[1:]


@dataclass(frozen=True)
class Prediction:
    value: float
    low: float  # the bootstrap interval (INTERVAL percentiles)
    high: float
    resamples: int


def bootstrap_predictions(
    params: Floats,
    tokens: Floats,
    losses: Floats,
    targets: Sequence[tuple[float, float]],
    best: LawFit,
    others: Sequence[LawFit] = (),
    resamples: int = DEFAULT_BOOTSTRAP,
    seed: int = 0,
) -> list[Prediction]:
    """The fit's prediction at each (N, D) of `targets`, with a percentile bootstrap interval over rungs."""
    n = np.asarray(params, dtype=float)
    d = np.asarray(tokens, dtype=float)
    loss = np.asarray(losses, dtype=float)
    rng = np.random.default_rng(seed)
    starts = [best]  # a resample's optimum lies near the full fit's: one start (each costs ~0.1 s)
    samples: list[list[float]] = [[] for _ in targets]
    for _ in range(resamples):
        pick = rng.integers(0, len(n), size=len(n))
        try:
            fit, _ = fit_law(n[pick], d[pick], loss[pick], initial=starts)
        except ValueError:
            continue
        for i, (tn, td) in enumerate(targets):
            value = fit.loss(tn, td)
            if math.isfinite(value):
                samples[i].append(value)
    out = []
    for (tn, td), values in zip(targets, samples, strict=True):
        centre = best.loss(tn, td)
        if values:
            low, high = (float(x) for x in np.percentile(values, INTERVAL))
        else:
            low = high = math.nan
        out.append(Prediction(centre, low, high, len(values)))
    return out
