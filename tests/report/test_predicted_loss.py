"""The refit's loss prediction: shown only inside the range it was fitted on, never at or above ln(vocabulary)."""

from __future__ import annotations

import math

import pytest

from runlib.audit import audit_loaded
from runlib.audit.render.json_view import to_dict
from runlib.audit.render.report import build_blocks, render_markdown
from runlib.plan.scaling import FIT_PARAMS_RANGE, FIT_TOKENS_RANGE, predict_loss, refit_loss
from runlib.spec import load_spec


def test_inside_the_fitted_range_it_is_shown() -> None:
    got = predict_loss(1e9, 20e9, 32_000)
    assert got.value == got.formula == pytest.approx(refit_loss(1e9, 20e9))
    assert 1.8172 < got.value < math.log(32_000)
    assert "Chinchilla's data" in got.note
    for n, d in ((FIT_PARAMS_RANGE[0], FIT_TOKENS_RANGE[0]), (FIT_PARAMS_RANGE[1], FIT_TOKENS_RANGE[1])):
        assert predict_loss(n, d, 32_000).value is not None  # the box's corners are inside


@pytest.mark.parametrize(
    ("params", "tokens", "named"),
    [
        (1.3e6, 2.048e6, ["1.3M parameters (fitted 70M-16B)", "2.05M tokens (fitted 5B-500B)"]),
        (7e9, 2e12, ["2T tokens (fitted 5B-500B)"]),  # Llama 2 7B: beyond the tokens the fit saw
        (70e9, 100e9, ["70B parameters (fitted 70M-16B)"]),
    ],
)
def test_outside_the_fitted_range_it_says_why(params: float, tokens: float, named: list[str]) -> None:
    got = predict_loss(params, tokens, 32_000)
    assert got.value is None and got.note.startswith("not shown: this run is outside the range the fit saw")
    for text in named:
        assert text in got.note
    if got.formula < math.log(32_000):
        assert f"{got.formula:.2f}" not in got.note  # an extrapolation below ln(vocab) is not quoted


def test_never_at_or_above_the_uniform_guess() -> None:
    inside = refit_loss(1e9, 20e9)  # ~2.53 nats
    small_vocab = 12  # ln(12) = 2.48: a uniform guess beats the formula
    got = predict_loss(1e9, 20e9, small_vocab)
    assert math.log(small_vocab) < inside and got.value is None
    assert f"ln({small_vocab}) = {math.log(small_vocab):.2f}" in got.note and "uniform guess" in got.note


def test_the_demo_shows_no_prediction_and_says_why() -> None:
    result = audit_loaded(load_spec("specs/demo.yaml"))
    refs = to_dict(result)["derived"]["references"]
    assert refs["predicted_loss"] is None
    assert refs["predicted_loss_note"].startswith("not shown: this run is outside the range the fit saw")
    assert "ln(4096) = 8.32" in refs["predicted_loss_note"]  # the formula's 15.7 is above a uniform guess
    assert result.plan.references.extrapolated_loss > math.log(4096)
    md = render_markdown(build_blocks(result))
    row = next(line for line in md.splitlines() if line.startswith("| Predicted loss (refit)"))
    assert row.startswith("| Predicted loss (refit) | n/a (not shown: this run is outside the range the fit saw")
