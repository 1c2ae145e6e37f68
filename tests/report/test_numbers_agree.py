"""Every number shown in two places comes from one function: the planned LR (audit text,
JSON, the audit's and the run report's plots, the trainer's schedule), the memory per device (the plot's bars,
its table, the JSON, the text), the audit's findings (`runlib audit` and the run report), the epochs per
source (`runlib audit` and `runlib diff`) and the device memory on a CPU spec.

Two specs: the demo, and a GPU spec with two phases that scale the LR (phases[].optimizer.lr_scale), a batch
ramp, and measured tokens: its sources are "tokenized" (a tokenize manifest with its tokens_train count,
written as the stage writes it), with fewer tokens than declared, so the audit counts the measured ones and
finds a repeated source (MIX003) that the declared counts hide."""

from __future__ import annotations

import math
import shutil
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

from runlib.audit import AuditResult
from runlib.audit.render import plots
from runlib.audit.render import report as audit_report
from runlib.audit.render.json_view import audit_view, to_dict
from runlib.audit.render.text import render as render_text
from runlib.graph.build import build_graph
from runlib.graph.measured import audit_spec_file
from runlib.plan.timeline import tokens_at_step
from runlib.report.collect import collect_run
from runlib.report.document import audit_blocks
from runlib.report.plots import draw_lr
from runlib.review.diff import diff_files
from runlib.spec.hardware import device_memory_text, host_memory_bytes
from runlib.train.config import build_train_phase_configs
from tests.conftest import ROOT
from tests.helpers import write_fake_manifest
from tests.report.test_run_report import write_spec

GIB = 2**30
RAMP = [{"after": "0 tokens", "global_batch": "128Ki tokens"}, {"after": "2%", "global_batch": "256Ki tokens"}]
VARIANT = {
    "phases[1].optimizer": {"lr_scale": 0.25},
    "phases[3].optimizer": {"lr_scale": 0.5},
    "batch.ramp": RAMP,
}
# measured training tokens per source: a fraction of the declared, so that a source repeats (MIX003)
MEASURED_FRACTION = {"demo": {"docs": 0.1, "code": 0.5, "arithmetic": 1.0}, "variant": {"web": 0.1, "code": 0.5}}


@dataclass(frozen=True)
class Case:
    name: str
    path: Path


def write_measured(path: Path, fractions: dict[str, float]) -> None:
    """A tokenize manifest for each source, with tokens_train = the declared tokens x its fraction."""
    result = audit_spec_file(path)
    nodes = build_graph(result.spec).of("tokenize")
    for node in nodes:  # the source's tokens split over its parts, the remainder in part 0
        source = node.params["source"]
        parts = sum(n.params["source"] == source for n in nodes)
        measured = int(result.spec.data.sources[source].tokens * fractions[source])
        tokens = measured // parts + (measured % parts if node.params["part"] == 0 else 0)
        write_fake_manifest(node.dir, node, counts={"tokens_train": tokens})


@pytest.fixture(params=["demo", "variant"])
def case(request: pytest.FixtureRequest, tmp_path: Path, work: Path) -> Case:
    if request.param == "demo":
        path = Path(shutil.copy(ROOT / "specs" / "demo.yaml", tmp_path / "demo.yaml"))
    else:
        path = write_spec(tmp_path / "variant.yaml", VARIANT)
    write_measured(path, MEASURED_FRACTION[request.param])
    return Case(request.param, path)


def _findings(result: AuditResult) -> list[tuple[str, str, str, str]]:
    return [(f.code, f.severity, f.path, f.message) for f in result.findings]


# --------------------------------------------------------------------------------------------- LR


def test_planned_lr_is_the_lr_training_sets(case: Case) -> None:
    """The LR the audit and the run report draw and print is the trainer's: its ScheduleConfig per phase
    (runlib.train.config.schedule_within, lr_scale included) at the same tokens."""
    result = audit_spec_file(case.path)
    plan = result.plan
    configs = build_train_phase_configs(result.spec, plan)
    if case.name == "variant":
        assert [p.lr_scale for p in plan.phases] == [1.0, 0.25, 1.0, 0.5]
        assert len(plan.phases[0].span.segments) > 1  # the ramp
    spans = [p.span for p in plan.phases]

    def trainer_lrs(x: float) -> list[float]:  # a boundary belongs to both phases: either value is drawn
        return [c.schedule.lr_at(x) for c in configs if c.span.start_tokens <= x <= c.span.end_tokens]

    def drawn(line) -> list[tuple[float, float]]:
        return list(zip(*(map(float, v) for v in line.get_data()), strict=True))

    audit_fig = plots.draw_lr(plan)
    by_tokens, by_steps = (ax.lines[0] for ax in audit_fig.axes)
    run = collect_run(case.path)
    report_line = next(ln for ln in draw_lr(run).axes[0].lines if ln.get_label() == "plan schedule")
    for x, y in drawn(by_tokens) + drawn(report_line):
        assert any(math.isclose(y, lr, rel_tol=1e-12) for lr in trainer_lrs(x)), (x, y, trainer_lrs(x))
    for step, y in drawn(by_steps):
        assert any(math.isclose(y, lr, rel_tol=1e-9) for lr in trainer_lrs(tokens_at_step(spans, step)))
    for i, c in enumerate(configs):  # the step-end LR of every phase's first and last steps
        for step in (c.span.start_step + 1, c.span.end_step):
            lr = c.schedule.lr_at(tokens_at_step(spans, step))
            assert plan.lr_at_step(step) == plan.lr_at_step(step, phase=i) == pytest.approx(lr, rel=1e-12)

    text = render_text(result)
    for ph, p, c in zip(to_dict(result)["derived"]["phases"], plan.phases, configs, strict=True):
        start, end = c.schedule.lr_at(c.span.start_tokens), c.schedule.lr_at(c.span.end_tokens)
        assert (ph["lr_start"], ph["lr_end"], ph["lr_scale"]) == pytest.approx((start, end, p.lr_scale), rel=1e-12)
        line = next(ln for ln in text.splitlines() if ln.startswith(f"  {p.name[:12]:<12} "))
        assert f"{start:.2g}>{end:.2g}" in line or (start == 0 and f"0>{end:.2g}" in line)


# ----------------------------------------------------------------------------------------- memory


def test_memory_plot_bars_add_up_to_the_tables_total(case: Case) -> None:
    """The bars of each phase add up to MemoryBreakdown.total: the plot's table, the JSON and the text."""
    result = audit_spec_file(case.path)
    plan = result.plan
    ax = plots.draw_memory(plan).axes[0]
    stacked: dict[int, float] = defaultdict(float)
    for bar in ax.patches:
        stacked[round(bar.get_x() + bar.get_width() / 2)] += bar.get_height()
    _, rows = plots.memory_table(plan)
    total_row = next(r for r in rows if r[0] == "total")
    text = render_text(result)
    phases = to_dict(result)["derived"]["phases"]
    if case.name == "variant":
        assert all(p.memory.fragmentation > 0 for p in plan.phases)  # the part the plot left out
    for i, (p, ph) in enumerate(zip(plan.phases, phases, strict=True)):
        assert stacked[i] * GIB == pytest.approx(p.memory.total, rel=1e-9)
        assert ph["memory_bytes_per_device"] == p.memory.total
        assert total_row[i + 1] == plots.format_bytes(p.memory.total)
        line = next(ln for ln in text.splitlines() if ln.startswith(f"  {p.name[:12]:<12} "))
        assert line.endswith(f"{p.memory.total / GIB:>8.1f}")


def test_device_memory_is_the_same_everywhere(case: Case) -> None:
    """The device memory the plot draws is the one the audit text, the HTML table and MEM001 use; on a CPU
    spec it is this machine's memory shared by the node's processes, not the catalog's 8 GiB placeholder."""
    result = audit_spec_file(case.path)
    plan, spec = result.plan, result.spec
    if spec.hardware.accelerator == "cpu":
        host = host_memory_bytes()
        assert host is not None
        assert plan.accelerator.memory_gib == pytest.approx(host / GIB / spec.hardware.devices_per_node)
        assert "this machine's" in plan.accelerator.memory_basis
    ax = plots.draw_memory(plan).axes[0]
    device_lines = [ln for ln in ax.lines if ln.get_label().startswith("device ")]
    assert [ln.get_label() for ln in device_lines] == [f"device {device_memory_text(plan.accelerator)}"]
    assert float(device_lines[0].get_ydata()[0]) == pytest.approx(plan.accelerator.memory_gib)
    _, rows = plots.memory_table(plan)
    assert rows[-1][0] == f"of {plan.accelerator.memory_gib:.3g} GiB"
    words = device_memory_text(plan.accelerator, "each")
    assert words in " ".join(render_text(result).split())
    derived = dict(audit_report.derived_blocks(result, audit_view(result).derived)[1].rows)
    assert words in derived["Devices"]


def test_declared_host_memory_is_used_on_cpu(tmp_path: Path, work: Path) -> None:
    """hardware.memory_gib on a CPU spec is the memory per device, said so, and MEM001 reads the same."""
    text = (ROOT / "specs" / "demo.yaml").read_text().replace("  mfu: 0.1 ", "  memory_gib: 0.25\n  mfu: 0.1 ", 1)
    assert "memory_gib: 0.25" in text
    path = tmp_path / "demo.yaml"
    path.write_text(text)
    result = audit_spec_file(path)
    assert result.plan.accelerator.memory_gib == 0.25
    assert device_memory_text(result.plan.accelerator) == "0.25 GiB (hardware.memory_gib)"
    assert "MEM001" in {f.code for f in result.findings}  # 655 MiB per process does not fit 256 MiB


# ---------------------------------------------------------------------------------------- findings


def test_run_report_audit_is_the_cli_audit(case: Case) -> None:
    """The run report's audit section lists what `runlib audit` lists: measured tokens included."""
    cli = audit_spec_file(case.path)
    assert any(f.code == "MIX003" for f in cli.findings)  # only the measured tokens repeat a source
    run = collect_run(case.path)
    assert _findings(run.audit) == _findings(cli)
    assert [s.tokens_basis for s in run.plan.sources] == ["measured"] * len(run.plan.sources)
    md = audit_report.render_markdown(audit_blocks(run))
    counts = f"{cli.count('error')} errors, {cli.count('warning')} warnings, {cli.count('info')} info"
    assert counts in md
    for f in cli.findings:
        assert f"`{f.code}`" in md


# ------------------------------------------------------------------------------------------ epochs


def test_diff_epochs_are_the_audits(case: Case) -> None:
    """`runlib diff` compares the epochs `runlib audit` reports: measured where the sources are tokenized."""
    cli = audit_spec_file(case.path)
    d = diff_files(case.path, case.path)
    rows = {(r.section, r.quantity): r for r in d.plan}
    for s in cli.plan.sources:
        assert s.tokens_basis == "measured"
        epochs = rows[(f"source {s.name}", "epochs")]
        assert (epochs.a, epochs.b) == (s.epochs, s.epochs)
        available = rows[(f"source {s.name}", "tokens available")]
        assert (available.a, available.b) == (s.tokens_available, s.tokens_available)
    assert sorted(d.measured_sources) == sorted(f"{side}: {s.name}" for side in "AB" for s in cli.plan.sources)
