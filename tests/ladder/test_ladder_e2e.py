"""A scaling ladder end to end through Snakemake: 6 tiny rungs trained, evaluated and fitted, the report
shows the prediction and the held-out rung (tests/ladder/ladder-tiny.yaml)."""

import json
import math
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.workflow.conftest import snakemake

SPEC = ROOT / "tests" / "ladder" / "ladder-tiny.yaml"


@pytest.mark.slow
def test_ladder_trains_rungs_fits_and_reports(tmp_path: Path):
    result = snakemake(tmp_path, SPEC, "--cores", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    (fit_dir,) = (tmp_path / "work" / "artifacts" / "fit_ladder").iterdir()
    fit = json.loads((fit_dir / "fit.json").read_text())
    assert set(fit["fits"]) == {"docs", "code", "arithmetic", "overall"}
    overall = fit["fits"]["overall"]
    assert [r["name"] for r in overall["rungs"] if r["held_out"]] == ["w32-tpp16"]
    measured = {r["name"]: r["measured"] for r in overall["rungs"]}
    assert all(0 < m < math.log(1024) for m in measured.values())  # trained: below a uniform guess
    assert measured["w32-tpp16"] < measured["w16-tpp4"]  # more parameters and tokens: lower loss
    prediction = overall["prediction"]
    assert prediction["low"] <= prediction["value"] <= prediction["high"]
    # no train_phase of the target itself (ladder.train_target: false): only the rungs' six
    assert len(list((tmp_path / "work" / "artifacts" / "train_phase").iterdir())) == 6
    report = (tmp_path / "reports" / "ladder-tiny" / "run" / "report.md").read_text()
    assert "## Scaling ladder" in report
    assert "Held-out rung w32-tpp16 (not seen by the fit): predicted" in report
    assert (tmp_path / "reports" / "ladder-tiny" / "run" / "ladder.png").stat().st_size > 10_000
