"""Two spec files of one run name (a variant beside its baseline) keep their own run reports, each linking the
other's; the run report's directory follows the audit report's rule (runlib.util.report_dirs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runlib.audit.render.report import default_report_dir
from runlib.graph.measured import audit_spec_file
from runlib.report.collect import collect_run
from runlib.report.run_report import default_run_report_dir, write_report_of, write_run_report
from runlib.util.report_dirs import SPEC_PATH_FILE
from tests.report.test_run_report import build_fake_run, read_both, write_spec

RUN = "case-base"


@pytest.fixture
def specs(tmp_path: Path, work: Path) -> tuple[Path, Path]:
    """The baseline (case-base.yaml, named after its run) and a variant (variant.yaml, the same run name, a
    lower LR: its training stages differ, the data stages are shared), both built (fake artifacts)."""
    baseline = write_spec(tmp_path / f"{RUN}.yaml")
    variant = write_spec(tmp_path / "variant.yaml", {"optimizer.lr": 1.0e-3})
    build_fake_run(baseline)
    build_fake_run(variant)
    return baseline, variant


def test_a_variant_does_not_overwrite_its_baselines_report_and_each_links_the_other(specs) -> None:
    baseline, variant = specs
    a = write_run_report(str(baseline))
    a_md, a_html = read_both(a)
    b = write_run_report(str(variant))
    assert (a, b) == (Path("reports") / RUN / "run", Path("reports") / RUN / "run-variant")
    assert read_both(a) == (a_md, a_html)  # the baseline's report is still the baseline's
    assert (a / SPEC_PATH_FILE).read_text().strip() == str(baseline.resolve())
    assert (b / SPEC_PATH_FILE).read_text().strip() == str(variant.resolve())
    assert "Other reports" not in a_md  # written first: no other report beside it yet

    b_md, b_html = read_both(b)
    summary_a = json.loads((a / "summary.json").read_text())
    assert summary_a["spec_path"] == str(baseline.resolve()) and summary_a["stages_built"] == summary_a["stages"]
    for text in (b_md, b_html):
        assert f"Other reports of run {RUN}" in text
        assert str(baseline.resolve()) in text and str(variant.resolve()) in text
        assert f"{summary_a['final_loss']:.4f}" in text  # the baseline's numbers beside the variant's
    assert "[run](../run/report.md)" in b_md and '<a href="../run/report.html">run</a>' in b_html

    a = write_report_of(collect_run(baseline))  # rewritten (the workflow does at each change): links B now
    a_md, a_html = read_both(a)
    assert "[run-variant](../run-variant/report.md)" in a_md
    assert '<a href="../run-variant/report.html">run-variant</a>' in a_html


def test_run_and_audit_reports_follow_one_rule(specs, tmp_path: Path) -> None:
    """reports/<run>/run and /audit for the file named after its run, run-<stem> and audit-<stem> for
    another; a same-named file elsewhere gets a suffix once the first one's report is there."""
    baseline, variant = specs
    for path in (baseline, variant):
        result = audit_spec_file(path)
        audit_dir, run_dir = default_report_dir(result), default_run_report_dir(result.spec, path)
        assert audit_dir.parent == run_dir.parent == Path("reports") / RUN
        assert audit_dir.name.replace("audit", "run", 1) == run_dir.name
    elsewhere = tmp_path / "other" / "variant.yaml"
    elsewhere.parent.mkdir()
    elsewhere.write_text(variant.read_text())
    spec = audit_spec_file(elsewhere).spec
    assert default_run_report_dir(spec, elsewhere) == Path("reports") / RUN / "run-variant"  # nothing there yet
    # run-variant holds variant.yaml's report (as write_report_of leaves it: its spec-path file)
    (Path("reports") / RUN / "run-variant").mkdir(parents=True)
    (Path("reports") / RUN / "run-variant" / SPEC_PATH_FILE).write_text(f"{variant.resolve()}\n")
    moved = default_run_report_dir(spec, elsewhere)
    assert moved.parent == Path("reports") / RUN and moved.name.startswith("run-variant-") and len(moved.name) == 20
    assert default_run_report_dir(spec, variant) == Path("reports") / RUN / "run-variant"  # its own: in place
