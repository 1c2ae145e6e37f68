"""`runlib audit` shows the held-out loss the spec's built fit_ladder artifact predicts (fit.json written
here, not trained): absent before the fit is built or when only another spec's fit is, present after."""

import json
import time
from pathlib import Path

import pytest

from runlib.audit import audit_spec_file
from runlib.audit.render import json_view, text
from runlib.spec import load_spec
from runlib.workflow.graph import build_graph
from runlib.workflow.manifest import Manifest, write_manifest
from tests.conftest import ROOT

SPEC = ROOT / "tests" / "ladder" / "ladder-tiny.yaml"
PREDICTION = {"value": 2.5, "low": 2.4, "high": 2.7, "resamples": 200}


def _write_fit(directory: Path, key: str) -> None:
    directory.mkdir(parents=True)
    (directory / "fit.json").write_text(json.dumps({"fits": {"overall": {"prediction": PREDICTION}}}))
    manifest = Manifest(
        stage="fit_ladder",
        instance="fit_ladder",
        key=key,
        config={},
        inputs={},
        counts={"predicted_loss": PREDICTION["value"]},
        details={},
        timings={"started_at": time.time(), "wall_seconds": 0.1},
        libraries={},
        outputs={},
        content_hash=f"hash-{key}",
    )
    write_manifest(directory, manifest)


def test_audit_shows_the_built_ladder_prediction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    work = tmp_path / "work"
    monkeypatch.setenv("RUNLIB_WORK_DIR", str(work))
    fits = work / "artifacts" / "fit_ladder"
    _write_fit(fits / "0000000000000000", "0000000000000000")  # another spec's (or an older) fit
    before = audit_spec_file(SPEC)
    assert before.ladder_prediction is None
    assert json_view.to_dict(before)["derived"]["ladder_prediction"] is None
    assert "  ladder      " not in text.render(before)

    (node,) = build_graph(load_spec(SPEC).spec).of("fit_ladder")
    _write_fit(node.dir, node.key)
    after = audit_spec_file(SPEC)
    expected = {"loss": 2.5, "low": 2.4, "high": 2.7, "resamples": 200, "source": f"fit_ladder {node.key}"}
    assert json.loads(json_view.render(after))["derived"]["ladder_prediction"] == expected
    assert f"  ladder      loss 2.500 [2.400, 2.700] predicted (fit_ladder {node.key})" in text.render(after)
