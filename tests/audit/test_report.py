"""The markdown/HTML report: complete content, valid plots, escaped user text, atomic writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from runlib.audit import AuditResult, audit, audit_loaded
from runlib.audit.cases import BASE_SPEC, case_data
from runlib.audit.render import plots, report
from runlib.audit.render.report import default_report_dir, write_report
from runlib.spec import load_spec, validate_data

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PLOT_FILES = [name for name, _, _ in plots.PLOTS]
DOC = {"markdown": "audit.md", "html": "audit.html"}


@pytest.fixture(scope="module")
def base_result() -> AuditResult:
    return audit_loaded(load_spec(BASE_SPEC))


def patched(patch: dict) -> AuditResult:
    return audit(validate_data(case_data(patch)).spec)


def assert_plots(out: Path) -> None:
    assert sorted(PLOT_FILES) == sorted(["lr.png", "tokens_per_step.png", "mixture.png", "memory.png", "epochs.png"])
    for name in PLOT_FILES:
        data = (out / name).read_bytes()
        assert data[:8] == PNG_MAGIC, name
        assert len(data) > 5_000, f"{name} is suspiciously small ({len(data)} bytes)"


@pytest.mark.parametrize("fmt", ["markdown", "html"])
def test_report_has_plots_and_every_name(base_result: AuditResult, tmp_path: Path, fmt: str) -> None:
    out = write_report(base_result, tmp_path / "rep", fmt)
    assert out == tmp_path / "rep"
    assert_plots(out)
    text = (out / DOC[fmt]).read_text(encoding="utf-8")
    spec = base_result.spec
    assert spec.name in text
    for phase in spec.phases:
        assert phase.name in text
    for source in spec.data.sources:
        assert source in text
    for f in base_result.findings:
        assert f.code in text
    for name in PLOT_FILES:
        assert name in text  # referenced by relative file name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep"]  # no temp dir left behind


def test_html_is_self_contained(base_result: AuditResult, tmp_path: Path) -> None:
    text = (write_report(base_result, tmp_path / "rep", "html") / "audit.html").read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    assert "<style>" in text
    assert "<script" not in text.lower()
    assert "http://" not in text and "https://" not in text


@pytest.mark.parametrize("fmt", ["markdown", "html"])
def test_findings_and_silenced_findings_are_listed(tmp_path: Path, fmt: str) -> None:
    fp16 = {"precision.compute": "fp16", "precision.loss_scaling": "none"}
    result = patched(fp16)
    assert "PREC001" in [f.code for f in result.findings]
    text = (write_report(result, tmp_path / "a", fmt) / DOC[fmt]).read_text(encoding="utf-8")
    assert "PREC001" in text
    assert "exit status 1" in text

    silenced = patched({**fp16, "audit.ignore": {"PREC001": "deliberate fp16 ablation"}})
    assert [i.finding.code for i in silenced.ignored] == ["PREC001"]
    text = (write_report(silenced, tmp_path / "b", fmt) / DOC[fmt]).read_text(encoding="utf-8")
    assert "PREC001" in text and "deliberate fp16 ablation" in text


def test_html_escapes_user_text(tmp_path: Path) -> None:
    evil = "<script>alert(1)</script>"
    result = patched({"phases[0].mixture": {"web": 0.7, "code": 0.2, evil: 0.1}})
    assert any(evil in f.message for f in result.findings)  # the source name reaches a finding message
    out = write_report(result, tmp_path / "rep", "html")
    text = (out / "audit.html").read_text(encoding="utf-8")
    assert evil not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    md = (write_report(result, tmp_path / "md", "markdown") / "audit.md").read_text(encoding="utf-8")
    assert f"'{evil}'" not in md  # no live HTML in markdown text (code spans are literal anyway)
    assert_plots(out)


@pytest.mark.parametrize(
    "patch",
    [
        {"phases": [{"name": "only", "kind": "foundation", "tokens": "100%", "mixture": {"web": 1.0}}]},
        {"phases": [{"name": "only", "kind": "foundation", "tokens": "0 tokens", "mixture": {"web": 1.0}}]},
        {"data.sources.code.tokens": 0, "data.sources.web.tokens": None, "phases[0].mixture": {"web": 0.7, "x": 0.3}},
        {"phases": []},
    ],
    ids=["one-phase", "zero-tokens", "unknown-and-empty-sources", "no-phases"],
)
def test_degenerate_plans_still_report(tmp_path: Path, patch: dict) -> None:
    result = patched(patch)
    out = write_report(result, tmp_path / "rep", "html")
    for name in PLOT_FILES:
        assert (out / name).read_bytes()[:8] == PNG_MAGIC
    text = (out / "audit.html").read_text(encoding="utf-8")
    for s in result.plan.sources:
        assert s.name in text
    if any(s.tokens_available is None for s in result.plan.sources):
        assert "unknown" in text


def test_failed_write_leaves_nothing(base_result: AuditResult, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(plan, path):
        raise RuntimeError("plot failed")

    monkeypatch.setattr(plots, "plot_epochs", boom)  # the last plot: the others are already written
    with pytest.raises(RuntimeError, match="plot failed"):
        write_report(base_result, tmp_path / "rep", "markdown")
    assert list(tmp_path.iterdir()) == []


def test_failed_rewrite_keeps_previous_report(
    base_result: AuditResult, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = write_report(base_result, tmp_path / "rep", "markdown")
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def boom(blocks):
        raise RuntimeError("render failed")

    monkeypatch.setattr(report, "render_markdown", boom)
    with pytest.raises(RuntimeError, match="render failed"):
        write_report(base_result, out, "markdown")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep"]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_rewrite_replaces_previous_report_and_formats_coexist(base_result: AuditResult, tmp_path: Path) -> None:
    out = write_report(base_result, tmp_path / "rep", "markdown")
    (out / "stale.txt").write_text("from an older report")
    (out / "audit.md").write_text("an older markdown report")
    write_report(base_result, out, "html")
    expected = sorted([*PLOT_FILES, "audit.html", "audit.md", report.SPEC_PATH_FILE])
    assert sorted(p.name for p in out.iterdir()) == expected  # markdown kept: formats coexist
    assert "an older" not in (out / "audit.md").read_text()  # written again from this audit, with the new plots
    assert (out / report.SPEC_PATH_FILE).read_text().strip() == str(BASE_SPEC.resolve())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep"]


def test_unknown_format_is_rejected(base_result: AuditResult, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="format"):
        write_report(base_result, tmp_path / "rep", "pdf")  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_default_report_dir_is_keyed_by_spec_file_and_run(tmp_path: Path) -> None:
    """reports/<run>/audit for the file named after its run; a copy with the same run name gets its own
    directory; a same-named file elsewhere never overwrites the first one's report."""
    text = BASE_SPEC.read_text()
    own = tmp_path / "case-base.yaml"
    own.write_text(text)
    copy = tmp_path / "case-base-edit.yaml"
    copy.write_text(text)
    elsewhere = tmp_path / "other" / "case-base.yaml"
    elsewhere.parent.mkdir()
    elsewhere.write_text(text)
    root = tmp_path / "reports"
    own_result = audit_loaded(load_spec(own))
    assert default_report_dir(own_result, root) == root / "case-base" / "audit"
    assert default_report_dir(audit_loaded(load_spec(copy)), root) == root / "case-base" / "audit-case-base-edit"
    (root / "case-base" / "audit").mkdir(parents=True)
    (root / "case-base" / "audit" / report.SPEC_PATH_FILE).write_text(f"{own.resolve()}\n")
    assert default_report_dir(own_result, root) == root / "case-base" / "audit"  # its own: rewritten in place
    other = default_report_dir(audit_loaded(load_spec(elsewhere)), root)
    assert other.parent == root / "case-base" and other.name.startswith("audit-") and len(other.name) == 14


def test_cpu_run_counts_core_hours_in_every_view() -> None:
    from runlib.audit.render import json_view, text

    cpu = patched({"hardware.accelerator": "cpu", "hardware.devices_per_node": 2})
    blocks = report.build_blocks(cpu)
    assert "| Core-hours |" in report.render_markdown(blocks)
    assert "<td>Core-hours</td>" in report.render_html(blocks, "t")
    time_line = next(line for line in text.render(cpu).splitlines() if line.startswith("  time "))
    assert "core-hours" in time_line and "GPU" not in time_line
    derived = report.render_markdown(blocks).split("## Phases")[0]  # the derived table, not the findings
    assert "GPU-hours" not in derived
    assert json_view.to_dict(cpu)["derived"]["device_hours_unit"] == "core-hours"
    gpu = report.render_markdown(report.build_blocks(patched({})))
    assert "| GPU-hours |" in gpu and "ore-hours" not in gpu


def test_small_run_hours_and_days_read_the_same_in_every_view() -> None:
    """The reports rounded device-hours to one decimal and days to two (a shrunk run's 0.00871 core-hours
    and 0.000181 days read '0.0' and '0.00') where the terminal printed three significant digits (a number in two places comes from one function)."""
    from runlib.audit.render import text

    cpu = patched({"hardware.accelerator": "cpu", "hardware.devices_per_node": 2, "tokens": "200K"})
    time_line = next(line for line in text.render(cpu).splitlines() if line.startswith("  time "))
    hours, days = time_line.split()[1], time_line.split()[3]
    markdown = report.render_markdown(report.build_blocks(cpu))
    assert f"| Core-hours | {hours} " in markdown  # then "|" or " (budget ...)"
    assert f"| Wall-clock days | {days} " in markdown


def test_text_view_shows_the_memory_parts_and_their_assumptions() -> None:
    from runlib.audit.render import json_view, text

    pp = patched(
        {
            "parallelism.pipeline": 2,
            "parallelism.sharding": "zero1",
            "parallelism.grad_accumulation": "separate_buffer",
            "parallelism.attention_kernel": "eager",
            "hardware.devices_per_node": 8,
        }
    )
    lines = text.render(pp).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  memory "))
    block = " ".join(line.strip() for line in lines[start : start + 12] if line.startswith(("  memory ", " " * 14)))
    mem = max(pp.plan.phases, key=lambda p: p.memory.total).memory
    assert f"= {mem.total / 2**30:.3g}" in block
    assert "pipeline stage" in block and "eager attention" in block and "separate buffer" in block
    assert "allocator cache" in block and f"{mem.device_reported / 2**30:.3g}" in block
    phase = json_view.to_dict(pp)["derived"]["phases"][0]
    assert phase["memory_device_reported_bytes"] > phase["memory_bytes_per_device"]
    assert phase["memory_assumptions"]["allreduce_bucket_bytes"] > 0
    plain = text.render(patched({}))
    assert "allocator cache" not in plain and "  memory " in plain
