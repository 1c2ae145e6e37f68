"""The run report: read from fake but well-formed artifacts of a spec's stage graph."""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from runlib.audit import audit_loaded
from runlib.audit.cases import case_data
from runlib.graph.build import StageGraph, build_graph
from runlib.plan import derive
from runlib.report import plots as report_plots
from runlib.report.collect import collect_run
from runlib.report.document import format_seconds
from runlib.report.plots import PLOTS
from runlib.report.run_report import main_report, write_report_of, write_run_report
from runlib.spec import load_spec, validate_data
from tests.helpers import write_fake_manifest

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PLOT_FILES = [name for name, _, _ in PLOTS]
SOURCES = {
    "web": {"domain": "web", "input": {"format": "builtin", "name": "python_docs"}, "tokens": "2.5B"},
    "code": {
        "domain": "code",
        "input": {"format": "builtin", "name": "python_code"},
        "tokens": "600M",
        "fim": {"rate": 0.5, "spm_rate": 0.5},
    },
}
DESCRIPTION = "Tiny <script>alert('x')</script> & <b>bold</b> run"
TASKS = {
    "hellaswag-mini": {"kind": "multiple_choice", "acc": 0.31, "acc_norm": 0.33, "n": 100},
    "web-continuation": {"kind": "answer_loglik", "loglik_mean": -41.5, "loglik_per_token": -2.75, "n": 50},
}
INTERVALS = 8


def write_spec(path: Path, patch: dict | None = None) -> Path:
    data = case_data({"data.sources": SOURCES, "description": DESCRIPTION, **(patch or {})})
    validate_data(data)  # fails here, not in load_spec, when the patch is wrong
    with open(path, "w") as f:
        YAML().dump(data, f)
    return path


@pytest.fixture
def spec_path(tmp_path: Path, work: Path) -> Path:
    return write_spec(tmp_path / "spec.yaml")


def wall_time(i: int) -> float:
    """A distinct wall time per node (their formatted forms differ too)."""
    return round(1.0 + 1.7 * i, 1)


def fake_records(plan, i: int) -> list[dict]:
    span = plan.phases[i].span
    out = []
    for j in range(1, INTERVALS + 1):
        step = span.start_step + round((span.end_step - span.start_step) * j / INTERVALS)
        tokens = span.start_tokens + round((span.end_tokens - span.start_tokens) * j / INTERVALS)
        loss = 2.0 + 8.0 / (1.0 + tokens / 1e8)
        out.append(
            {
                "step": step,
                "tokens": tokens,
                "loss": loss,
                "lr": plan.schedule.lr_at(tokens),
                "grad_norm": 0.5 + 0.01 * j,
                "tokens_per_s": 1.2e6 + 1e4 * j,
                "mfu": 0.38 + 0.001 * j,
                "loss_by_source": {"web": loss + 0.1, "code": loss - 0.3},
            }
        )
    return out


def _fake_curation_files(node) -> None:
    """The stats.json that the report's curation section reads, for the curation stages."""
    if node.stage == "curate_source":
        steps = [
            {"step": "length", "kind": "filter", "docs_in": 1000, "docs_out": 900, "chars_in": 5_000_000,
             "chars_out": 4_900_000, "reasons": {"empty": 10, "too_short": 90}},
            {"step": "heldout_split", "kind": "filter", "docs_in": 900, "docs_out": 900, "chars_in": 4_900_000,
             "chars_out": 4_900_000},
        ]  # fmt: skip
        (node.dir / "stats.json").write_text(json.dumps({"steps": steps}))
    elif node.stage == "train_classifier":
        counts_json = {
            "precision": 0.9,
            "recall": 0.75,
            "f1": 0.818,
            "heldout_positives": 4,
            "heldout_negatives": 5,
        }
        (node.dir / "stats.json").write_text(json.dumps({"counts": counts_json}))
    elif node.stage == "filter_quality":
        histogram = {"edges": [i / 10 for i in range(11)], "counts": [9, 8, 7, 6, 5, 4, 3, 2, 1, 5]}
        scored = {"step": "classifier", "kind": "filter", "docs_in": 50, "docs_out": 5, "chars_in": 500,
                  "chars_out": 50, "reasons": {"low_score": 45}, "threshold": 0.9, "histogram": histogram}  # fmt: skip
        (node.dir / "stats.json").write_text(json.dumps({"steps": [scored]}))


def build_fake_run(spec_path: Path, phases: set[int] | None = None) -> tuple[StageGraph, dict[str, float]]:
    """Write manifests for the data stages and for the train/eval stages of `phases` (all: None);
    returns the graph and each built instance's wall time."""
    spec = load_spec(spec_path).spec
    plan = derive(spec)
    graph = build_graph(spec)
    walls = {}
    for i, node in enumerate(graph.nodes):
        phase = node.params.get("phase")
        if phase is not None and phases is not None and phase not in phases:
            continue
        node.dir.mkdir(parents=True, exist_ok=True)
        counts, details = {}, {}
        if node.stage == "train_phase":
            records = fake_records(plan, phase)
            (node.dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
            spikes = {
                "spikes": [
                    {"step": records[2]["step"], "data_step": 5, "loss": 9.0, "grad_norm": 7.0, "action": "rollback"}
                ]
            }
            (node.dir / "spikes.json").write_text(json.dumps({**spikes, "skipped_data_steps": [5]}))
            (node.dir / "final.pt").write_bytes(b"not a checkpoint")
            last = records[-1]
            counts = {
                "steps": last["step"],
                "tokens": last["tokens"],
                "final_loss": last["loss"],
                "tokens_per_s": last["tokens_per_s"],
                "spikes": 1,
                "processes": 8,
                "mfu": 0.25 + 0.01 * phase,
            }
            details = {
                "mesh": {"dp_replicate": 1, "dp_shard": 4, "tp": 2, "cp": 1, "pp": 1},
                "memory": {
                    "estimate_bytes_per_device": 3 * 2**30,
                    "measured_peak_bytes_per_rank": [2 * 2**30, (2 + phase) * 2**30],
                    "measured_kind": "cuda_max_memory_allocated",
                },
            }
        elif node.stage == "eval_phase":
            p = plan.phases[phase]
            heldout = {
                s: {
                    "loss": 3.0 - 0.1 * phase + d,
                    "perplexity": math.exp(3.0 - 0.1 * phase + d),
                    "bits_per_byte": 1.1 - 0.01 * phase,
                    "tokens": 40960,
                }
                for s, d in (("web", 0.2), ("code", -0.4))
            }
            data = {
                "phase": p.name,
                "phase_index": phase,
                "tokens": p.span.end_tokens,
                "heldout": heldout,
                "tasks": TASKS,
            }
            (node.dir / "eval.json").write_text(json.dumps(data))
        else:
            _fake_curation_files(node)
        walls[node.instance] = wall_time(i)
        write_fake_manifest(node.dir, node, wall_seconds=wall_time(i), counts=counts, details=details)
    return graph, walls


def assert_pngs(out: Path, min_bytes: int = 3_000) -> None:
    from PIL import Image

    for name in PLOT_FILES:
        path = out / name
        assert path.read_bytes()[:8] == PNG_MAGIC, name
        with Image.open(path) as im:
            im.verify()
        with Image.open(path) as im:
            assert im.size[0] >= 600 and im.size[1] >= 300, (name, im.size)
        assert path.stat().st_size > min_bytes, f"{name} is suspiciously small ({path.stat().st_size} bytes)"


def read_both(out: Path) -> tuple[str, str]:
    return (out / "report.md").read_text(encoding="utf-8"), (out / "report.html").read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------------- tests


def test_complete_run(spec_path: Path, tmp_path: Path) -> None:
    graph, walls = build_fake_run(spec_path)
    spec = load_spec(spec_path).spec
    out = write_run_report(str(spec_path))
    assert out == Path("reports") / spec.name / "run-spec"  # spec.yaml is not named after its run
    expected = ["report.md", "report.html", "summary.json", "spec-path.txt", *PLOT_FILES]
    assert sorted(p.name for p in out.iterdir()) == sorted(expected)
    assert sorted(p.name for p in out.parent.iterdir()) == ["run-spec"]  # no temp dir left behind
    assert_pngs(out, min_bytes=20_000)  # an empty plot is under 10 kB
    md, page = read_both(out)
    for text in (md, page):
        assert "All stages are built" in text and "Missing stages" not in text
        for phase in spec.phases:
            assert phase.name in text
        for source in spec.data.sources:
            assert source in text
        for task in TASKS:
            assert task in text
        for node in graph.nodes:
            assert node.key in text  # stage keys
            assert html.escape(node.instance) in text
        for instance, wall in walls.items():
            assert f"{html.escape(instance)}: {format_seconds(wall)}" in text, instance
        for name in PLOT_FILES:
            assert name in text
        assert "Key derived numbers" in text and "Parameters" in text
    assert "| web | 3.2000 | 3.1000 | 3.0000 | 2.9000 |" in md  # held-out loss, source x phase
    # the curation funnel per source: reasons largest first
    assert "| length | filter | 1,000 | 900 | 90.0% | 5M | 4.9M | too_short 90, empty 10 |" in md
    assert "| heldout_split | filter | 900 | 900 | 100.0% | 4.9M | 4.9M | – |" in md
    assert "| hellaswag-mini | multiple_choice | acc_norm | 100 | n/a | 0.3300 |" in md  # no chance_acc recorded
    assert md.count("| built |") >= 4
    # plan against measurement: the mesh that ran, MFU, the largest rank's peak memory against the estimate
    gpu_hours = walls[graph.find("train_phase", phase=0).instance] * 8 / 3600  # its wall time x 8 processes
    assert (
        f"| foundation | dp_shard 4 x tp 2 | {gpu_hours:.3g} | 3.79 | 1.28M | 0.250 | 0.400 | 2,048 MiB "
        "(cuda_max_memory_allocated) | 3,072 MiB | 1.50 |" in md
    )
    assert (
        "| enrich | dp_shard 4 x tp 2 |" in md and "| 3,072 MiB (cuda_max_memory_allocated) | 3,072 MiB | 1.00 |" in md
    )
    assert '<img src="loss.png"' in page and "<script" not in page.lower()
    # GPU-hours on a GPU run: the first train stage's wall time x 8 processes / 3600 s
    assert "| Phase | Mesh | GPU-hours | Planned GPU-hours |" in md and "| GPU-hours | " in md


def test_partial_run_names_missing_stages(spec_path: Path, tmp_path: Path) -> None:
    graph, _ = build_fake_run(spec_path, phases={0})
    out = write_run_report(str(spec_path), tmp_path / "partial")
    assert_pngs(out)
    md, page = read_both(out)
    missing = [n for n in graph.nodes if n.stage in ("train_phase", "eval_phase") and n.params["phase"] != 0]
    assert len(missing) == 6
    for text in (md, page):
        line = next(ln for ln in text.splitlines() if "Missing stages (6" in ln)
        for node in missing:
            assert node.instance in line
        assert "train_phase foundation" not in line and "eval_phase foundation" not in line
        assert "1 of 4 phases trained" in text
        assert "Not evaluated yet: enrich, long, anneal" in text
    assert md.count("| not built |") >= 6


def test_nothing_built_still_reports(spec_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main_report(str(spec_path), tmp_path / "empty") == 0
    out = tmp_path / "empty"
    assert_pngs(out)
    md, _ = read_both(out)
    graph = build_graph(load_spec(spec_path).spec)
    assert f"0 of {len(graph.nodes)} stages built" in md
    captured = capsys.readouterr()
    assert str(out / "report.html") in captured.out
    assert f"{len(graph.nodes)} of {len(graph.nodes)} stages not built" in captured.err


def test_html_escapes_text(spec_path: Path, tmp_path: Path) -> None:
    graph, _ = build_fake_run(spec_path)
    node = graph.find("eval_phase", phase=3)
    data = json.loads((node.dir / "eval.json").read_text())
    data["tasks"]["<img src=x onerror=alert(1)>"] = {"kind": "multiple_choice", "acc": 0.5, "acc_norm": 0.5, "n": 4}
    (node.dir / "eval.json").write_text(json.dumps(data))
    md, page = read_both(write_run_report(str(spec_path), tmp_path / "esc"))
    assert "<script>" not in page and "<b>bold</b>" not in page and "<img src=x" not in page
    assert html.escape(DESCRIPTION) in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "<script>" not in md and "<img src=x" not in md  # markdown renders inline HTML: escaped too


def test_audit_summary(spec_path: Path, tmp_path: Path) -> None:
    spec_path = write_spec(spec_path, {"optimizer.lr": 0.05})  # a finding (LR far above the reference)
    result = audit_loaded(load_spec(spec_path))
    assert result.findings
    md, _ = read_both(write_run_report(str(spec_path), tmp_path / "aud"))
    counts = f"{result.count('error')} errors, {result.count('warning')} warnings, {result.count('info')} info"
    assert counts in md
    for f in result.findings:
        assert f.code in md


def test_write_is_atomic(spec_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    build_fake_run(spec_path, phases={0})
    out = write_run_report(str(spec_path), tmp_path / "rep")
    before = read_both(out)

    def broken(run, path):
        raise RuntimeError("plot failed")

    monkeypatch.setitem(report_plots.PLOTTERS, "throughput.png", broken)
    with pytest.raises(RuntimeError, match="plot failed"):
        write_run_report(str(spec_path), out)
    assert read_both(out) == before  # the previous report, whole
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_a_manifest_that_does_not_validate_is_reported_not_raised(spec_path: Path, tmp_path: Path) -> None:
    graph, _ = build_fake_run(spec_path)
    node = graph.of("train_tokenizer")[0]
    node.manifest_path.write_text(json.dumps({"stage": node.stage, "projection": {}}))  # an older runlib's
    out = write_run_report(str(spec_path), tmp_path / "out")
    md, _ = read_both(out)
    assert "unreadable (not a valid manifest)" in md


# ------------------------------------------------------------------ honest numbers


def test_honest_numbers_of_a_cpu_run(tmp_path: Path, work: Path) -> None:
    """Core-hours on CPU, chance levels and capped example counts beside task scores, the loss
    smoothed over tokens per phase (a held-out-only record in the log is skipped)."""
    cpu = write_spec(tmp_path / "cpu.yaml", {"hardware.accelerator": "cpu"})
    graph, _ = build_fake_run(cpu)
    cap = "100 of 120 examples: the source has 100 held-out documents (data.heldout_docs)"
    for node in graph.of("eval_phase"):
        data = json.loads((node.dir / "eval.json").read_text())
        data["tasks"]["hellaswag-mini"] |= {"chance_acc": 0.25, "examples_requested": 120, "examples_cap": cap}
        (node.dir / "eval.json").write_text(json.dumps(data))
    node = graph.find("train_phase", phase=1)
    records = [json.loads(line) for line in (node.dir / "metrics.jsonl").read_text().splitlines()]
    records.insert(3, {"step": records[2]["step"], "tokens": records[2]["tokens"], "heldout_loss_by_source": {}})
    (node.dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))

    run = collect_run(cpu)
    xs, ys = report_plots.smoothed_loss(run)
    raw = [r for r in run.records() if "loss" in r]
    assert xs == [r["tokens"] for r in raw]
    first = {p.records[0]["tokens"]: p.records[0]["loss"] for p in run.phases}
    for x, y in zip(xs, ys, strict=True):
        if x in first:
            assert y == pytest.approx(first[x])  # restarted at each phase: its first point is its raw value
    assert any(y != pytest.approx(r["loss"]) for y, r in zip(ys, raw, strict=True))  # and smoothed after
    assert report_plots.smoothing_half_life_tokens(run) == pytest.approx(0.02 * run.plan.tokens_total)

    md, page = read_both(write_report_of(run, tmp_path / "cpu-report"))
    derived = md.split("### Key derived numbers")[1].split("## Findings")[0].split("### Errors")[0]
    assert "| Core-hours | " in derived and "GPU-hours" not in derived  # the audit's row, in this run's unit
    assert "| Phase | Mesh | Core-hours | Planned core-hours |" in md
    assert "<th>Core-hours</th><th>Planned core-hours</th>" in page
    assert "| hellaswag-mini | multiple_choice | acc | 100 of 120 requested | 0.2500 | 0.3100 |" in md
    assert "| hellaswag-mini | multiple_choice | acc_norm | 100 of 120 requested | 0.2500 | 0.3300 |" in md
    assert (
        "| web-continuation | answer_loglik | loglik_mean | 50 | – | -41.5000 |" in md
    )  # no chance for a log-likelihood
    assert "<th>Chance</th>" in page and "<td>0.2500</td>" in page
    for text in (md, page):
        assert f"Fewer examples than requested: hellaswag-mini: {cap}." in text
        assert "exponential moving average over tokens" in text and "ln(vocabulary)" in text


def test_quality_filters_get_their_funnel_rows_and_score_plot(tmp_path: Path, work: Path) -> None:
    web = {**SOURCES["web"], "curate": {"classifier": {"positives": ["code"], "keep_top_fraction": 0.1}}}
    spec_path = write_spec(tmp_path / "spec.yaml", {"data.sources": {**SOURCES, "web": web}})
    build_fake_run(spec_path)
    out = write_run_report(str(spec_path))
    md, page = read_both(out)
    assert "| classifier | filter | 50 | 5 | 10.0% | 500 | 50 | low_score 45 |" in md
    assert "Quality scores" in md and '<img src="quality.png"' in page
    assert "Classifier of web: held-out precision 0.900, recall 0.750, F1 0.818 at score 0.5 (4 anchor" in md
    assert (out / "quality.png").read_bytes()[:8] == PNG_MAGIC and (out / "quality.png").stat().st_size > 10_000


def test_a_mixture_of_experts_gets_its_expert_load_section_and_plot(tmp_path: Path, work: Path) -> None:
    moe = {"experts": 4, "top_k": 2, "expert_d_ff": 64, "aux_loss": 0.01, "bias_update_rate": 0.001}
    spec_path = write_spec(tmp_path / "spec.yaml", {"model.moe": moe})
    graph, _ = build_fake_run(spec_path)
    for node in graph.of("train_phase"):  # the training log's expert_load: one layer balanced, one not
        records = [json.loads(x) for x in (node.dir / "metrics.jsonl").read_text().splitlines()]
        for r in records:
            r["expert_load"] = {"layers.0.mlp": [0.25] * 4, "layers.1.mlp": [0.55, 0.15, 0.15, 0.15]}
        (node.dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    out = write_run_report(str(spec_path))
    md, page = read_both(out)
    assert "## Expert load" in md and "4 routed experts, top-2, balanced by an auxiliary loss of 0.01" in md
    assert "DeepSeek-V3's bias update at 0.001 per step" in md and '<img src="expert_load.png"' in page
    plot = out / "expert_load.png"
    assert plot.read_bytes()[:8] == PNG_MAGIC and plot.stat().st_size > 10_000
    # a dense spec has neither
    dense = write_spec(tmp_path / "dense.yaml")
    build_fake_run(dense)
    md_dense, _ = read_both(write_run_report(str(dense)))
    assert "Expert load" not in md_dense


def test_the_imbalance_is_max_over_mean() -> None:
    from runlib.report.experts_section import imbalance, load_series

    assert imbalance([0.25] * 4) == 1.0 and imbalance([0.55, 0.15, 0.15, 0.15]) == pytest.approx(2.2)
    series = load_series([{"tokens": 10, "expert_load": {"l": [0.5, 0.5]}}, {"tokens": "x", "expert_load": {}}])
    assert series == {"l": [(10.0, [0.5, 0.5])]}
