"""The fit_ladder stage: the rungs' held-out losses -> L(N, D) per source and overall -> the target's loss.

    fit_ladder(config, eval_dirs, out_dir) -> summary; writes out_dir/fit.json

fit.json: {"fits": {series: {"law": {E, A, B, alpha, beta, objective, points}, "problems": [why the law is
not determined by the rungs; a prediction is withheld when there is one], "prediction": {value, low, high,
resamples}, "rungs": [{name, params, tokens, flops, measured, predicted, held_out}]}}, "target":
{...}, "interval_percentiles", "huber_delta", "skipped"}. A series is a source's held-out loss, or
"overall": the held-out loss pooled over every source's held-out tokens (total nats / total tokens).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from runlib.ladder.config import FitLadderConfig

OVERALL = "overall"


def rung_losses(eval_data: dict[str, Any]) -> dict[str, float]:
    """Series -> held-out loss of one rung's eval.json (the pooled "overall" included)."""
    heldout = eval_data.get("heldout") or {}
    out = {s: float(m["loss"]) for s, m in heldout.items() if math.isfinite(float(m.get("loss", math.nan)))}
    nats = sum(float(m["loss"]) * m["tokens"] for s, m in heldout.items() if s in out)
    tokens = sum(m["tokens"] for s, m in heldout.items() if s in out)
    if tokens:
        out[OVERALL] = nats / tokens
    return out


def fit_series(config: FitLadderConfig, losses: dict[str, dict[str, float]], series: str) -> dict[str, Any]:
    """One series' fit on the fitted rungs, its prediction at the target and at every rung."""
    # numpy: `runlib audit` reads OVERALL from this module (runlib.graph.measured) without it
    from runlib.ladder.fit import bootstrap_predictions, fit_law, law_problems

    fitted = [r for r in config.rungs if not r.held_out and series in losses.get(r.name, {})]
    n = [r.params for r in fitted]
    d = [r.tokens for r in fitted]
    y = [losses[r.name][series] for r in fitted]
    best, others = fit_law(n, d, y)
    target = config.target
    (prediction,) = bootstrap_predictions(
        n, d, y, [(target.params, target.tokens)], best, others, resamples=config.bootstrap, seed=config.seed
    )
    rungs = []
    for r in config.rungs:
        measured = losses.get(r.name, {}).get(series)
        rungs.append(
            {
                "name": r.name,
                "params": r.params,
                "tokens": r.tokens,
                "flops": r.flops,
                "held_out": r.held_out,
                "measured": measured,
                "predicted": best.loss(r.params, r.tokens),
            }
        )
    return {"law": best.as_dict(), "problems": law_problems(best), "prediction": prediction.__dict__, "rungs": rungs}


def fit_ladder(config: FitLadderConfig, eval_dirs: dict[str, Path], out_dir: Path) -> dict[str, Any]:
    """Fit every series on the rungs' held-out losses (fit_series), write fit.json; the manifest's counts."""
    from runlib.ladder.fit import HUBER_DELTA, INTERVAL  # numpy: as in fit_series

    losses = {}
    for name, directory in eval_dirs.items():
        losses[name] = rung_losses(json.loads((Path(directory) / "eval.json").read_text()))
    fits = {series: fit_series(config, losses, series) for series in [*config.sources, OVERALL]}
    result = {
        "fits": fits,
        "target": config.target.model_dump(),
        "interval_percentiles": list(INTERVAL),
        "huber_delta": HUBER_DELTA,
        "skipped": config.skipped,
    }
    (Path(out_dir) / "fit.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    overall = fits[OVERALL]
    counts: dict[str, Any] = {"rungs": len(config.rungs)}
    if not overall["problems"]:  # a law the rungs do not determine predicts nothing (runlib.ladder.fit)
        counts["predicted_loss"] = overall["prediction"]["value"]
    counts.update(
        {f"{s}_predicted_loss": f["prediction"]["value"] for s, f in fits.items() if s != OVERALL and not f["problems"]}
    )
    for r in overall["rungs"]:
        if r["held_out"] and r["measured"] is not None:
            counts[f"heldout_rung_{r['name']}_error"] = r["predicted"] - r["measured"]
    return {"counts": counts}
