"""`runlib audit` shows the held-out loss the spec's built fit_ladder artifact predicts (fit.json written
here, not trained): absent before the fit is built or when only another spec's fit is, present after."""

import json
from pathlib import Path

from runlib.audit.render import json_view, text
from runlib.graph.build import build_graph
from runlib.graph.measured import audit_spec_file
from runlib.spec import load_spec
from tests.conftest import ROOT
from tests.helpers import write_fake_manifest

SPEC = ROOT / "tests" / "ladder" / "ladder-tiny.yaml"
PREDICTION = {"value": 2.5, "low": 2.4, "high": 2.7, "resamples": 200}


def _write_fit(directory: Path, key: str, problems: list[str] | None = None) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    overall = {"prediction": PREDICTION, **({"problems": problems} if problems is not None else {})}
    (directory / "fit.json").write_text(json.dumps({"fits": {"overall": overall}}))
    counts = {"predicted_loss": PREDICTION["value"]}
    write_fake_manifest(directory, stage="fit_ladder", instance="fit_ladder", key=key, counts=counts)


def test_audit_shows_the_built_ladder_prediction(work: Path):
    fits = work / "artifacts" / "fit_ladder"
    _write_fit(fits / "0000000000000000", "0000000000000000")  # another spec's (or an older) fit
    before = audit_spec_file(SPEC)
    assert before.ladder_prediction is None
    assert json_view.to_dict(before)["derived"]["ladder_prediction"] is None
    assert "  ladder      " not in text.render(before)

    (node,) = build_graph(load_spec(SPEC).spec).of("fit_ladder")
    _write_fit(node.dir, node.key)
    after = audit_spec_file(SPEC)
    expected = {
        "loss": 2.5,
        "low": 2.4,
        "high": 2.7,
        "resamples": 200,
        "source": f"fit_ladder {node.key}",
        "withheld": None,
    }
    assert json.loads(json_view.render(after))["derived"]["ladder_prediction"] == expected
    assert f"  ladder      loss 2.500 [2.400, 2.700] predicted (fit_ladder {node.key})" in text.render(after)

    # a fit whose law the rungs do not determine (runlib.ladder.fit.law_problems): no loss is shown
    why = "alpha = 4.04 > 2.5: a step between rungs, not a power law in N (more rungs along it are needed)"
    _write_fit(node.dir, node.key, [why])
    withheld = audit_spec_file(SPEC)
    assert json.loads(json_view.render(withheld))["derived"]["ladder_prediction"]["withheld"] == why
    rendered = text.render(withheld)
    assert f"  ladder      no prediction: the fit's law is not determined by the rungs ({why})" in rendered
    assert "2.500" not in rendered
