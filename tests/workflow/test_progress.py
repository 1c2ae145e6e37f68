"""The console view of a workflow run (runlib.workflow.progress): names, training numbers, ETA, the end."""

from __future__ import annotations

import io
import json
import logging
import shlex
import sys
from pathlib import Path

import pytest

from runlib.store.command import executable
from runlib.workflow import progress
from runlib.workflow.progress import PhaseTime, View

KEY, NEXT = "a1b2c3d4e5f60718", "0f1e2d3c4b5a6978"


def record(event: str, **extra) -> logging.LogRecord:
    r = logging.LogRecord(progress.SNAKEMAKE_LOGGER, logging.INFO, __file__, 1, extra.pop("msg", None), None, None)
    r.__dict__.update(event=event, **extra)
    return r


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def phase_progress(tokens: int, tokens_per_s: float = 1000.0) -> dict:
    return {
        "phase": "foundation",
        "start_step": 0,
        "end_step": 400,
        "start_tokens": 0,
        "end_tokens": 400_000,
        "step": tokens // 1000,
        "tokens": tokens,
        "loss": 4.2137,
        "tokens_per_s": tokens_per_s,
        "eta_s": (400_000 - tokens) / tokens_per_s,
    }


def view(tmp_path, tty: bool, clock=None) -> tuple[View, io.StringIO]:
    stream = io.StringIO()
    labels = {("train_phase", KEY): "train_phase foundation", ("train_phase", NEXT): "train_phase anneal"}
    phases = [
        PhaseTime(KEY, "train_phase foundation", 400_000, 200.0),
        PhaseTime(NEXT, "train_phase anneal", 40_000, 20.0),
    ]
    return View(labels, phases, lambda key: tmp_path / key, stream, tty, clock=clock or Clock()), stream


def test_plain_lines_name_the_phase_not_its_key_and_are_rate_limited(tmp_path) -> None:
    clock = Clock()
    v, out = view(tmp_path, tty=False, clock=clock)
    v.on_record(record("job_info", jobid=3, rule_name="train_phase", wildcards={"key": KEY}, log=["x.log"]))
    (tmp_path / KEY).mkdir()
    for t, tokens in ((0, 10_000), (10, 20_000), (31, 30_000), (35, 80_000), (40, 400_000)):
        clock.now = t
        (tmp_path / KEY / "progress.json").write_text(json.dumps(phase_progress(tokens)))
        v.tick()
    lines = out.getvalue().splitlines()
    assert lines[0] == "runlib: started train_phase foundation" and KEY not in out.getvalue()
    trained = [line for line in lines if "step" in line]
    # the first, then 30 s later, then 10% of the phase later, then the phase's end; not the one at 10 s
    assert [line.split(" | ")[1] for line in trained] == [
        "10K/400K tokens",
        "30K/400K tokens",
        "80K/400K tokens",
        "400K/400K tokens",
    ]
    assert "loss 4.214 | 1,000 tok/s | ETA 6m 30s" in trained[0]
    # training left: this phase's 390 s at its speed + the next phase's planned 20 s x (measured 1 ms per
    # token / planned 0.5 ms per token)
    assert trained[0].endswith("training left ~7m 10s")
    clock.now = 300
    v.on_record(record("job_finished", job_id=3))
    assert out.getvalue().splitlines()[-1] == "runlib: done train_phase foundation in 5m 00s"


def test_on_a_terminal_the_status_line_is_redrawn_in_place_below_snakemake_output(tmp_path) -> None:
    v, out = view(tmp_path, tty=True)
    v.on_record(record("job_info", jobid=1, rule_name="train_phase", wildcards={"key": KEY}, log=[]))
    (tmp_path / KEY).mkdir()
    (tmp_path / KEY / "progress.json").write_text(json.dumps(phase_progress(50_000)))
    v.tick()
    assert out.getvalue().endswith(
        "\r\x1b[Ktrain_phase foundation: step 50/400 | 50K/400K tokens | loss 4.214 | "
        "1,000 tok/s | ETA 5m 50s | training left ~6m 30s"
    )
    above = progress._AboveStatus(out, v)
    above.write("rule eval_phase:\n")  # Snakemake's output: clear the status, write, redraw it below
    assert out.getvalue().endswith("\r\x1b[Krule eval_phase:\n" + v.status)
    v.on_record(record("job_error", jobid=1))
    assert "runlib: FAILED train_phase foundation" in out.getvalue() and out.getvalue().endswith("\r\x1b[K")


def test_track_and_slurm_jobs_are_named(tmp_path) -> None:
    v, out = view(tmp_path, tty=False)
    v.on_record(record("job_info", jobid=7, rule_name="track", wildcards={"key": NEXT}, log=[]))
    v.on_record(record("", msg="Job 7 has been submitted with SLURM jobid 4242 (log: /x/4242.log)."))
    assert out.getvalue().splitlines() == ["runlib: started track anneal", "runlib: track anneal is Slurm job 4242"]


@pytest.mark.parametrize(("seconds", "text"), [(3725, "1h 02m"), (200, "3m 20s"), (42, "42s"), (None, "?")])
def test_format_seconds(seconds, text) -> None:
    assert progress.format_seconds(seconds) == text


def test_the_end_names_the_reports_and_the_mlflow_command(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reports" / "demo" / "run").mkdir(parents=True)
    (tmp_path / "reports" / "demo" / "run" / "report.html").write_text("")
    lines = progress.summary_lines("specs/demo.yaml", "demo", "sqlite:////w/mlflow.db", ok=True)
    runlib_cmd = shlex.quote(executable("runlib"))  # this environment's, as the run's own snakemake
    assert lines == [
        "runlib: the run is complete.",
        "  run report:  reports/demo/run/report.html",
        f"  audit:       reports/demo/audit/audit.html  (write it: {runlib_cmd} audit specs/demo.yaml --format html)",
        "  MLflow UI:   mlflow ui --backend-store-uri sqlite:////w/mlflow.db   (then http://127.0.0.1:5000)",
    ]
    other = progress.summary_lines("copy.yaml", "demo", "sqlite:////w/mlflow.db", ok=False)
    # the copy's own run report is not written yet: no line for it (not the baseline's report)
    assert not any("run report" in line for line in other) and other[0].startswith("runlib: the run stopped")
    assert "reports/demo/audit-copy/audit.html" in other[1]
    (tmp_path / "reports" / "demo" / "run-copy").mkdir()
    (tmp_path / "reports" / "demo" / "run-copy" / "report.html").write_text("")
    other = progress.summary_lines("copy.yaml", "demo", "sqlite:////w/mlflow.db", ok=True)
    assert other[1] == "  run report:  reports/demo/run-copy/report.html"  # a variant's, beside the baseline's


def test_a_failed_run_points_at_the_logs_and_runlib_it_used(tmp_path, monkeypatch) -> None:
    """The end of a failed run named ./work/logs whatever RUNLIB_WORK_DIR said, and a bare `runlib` that a
    user who ran the venv's snakemake by its path does not have on PATH (commands that
    work where the user is)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RUNLIB_WORK_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("PATH", "/nonexistent")  # the venv is not activated
    lines = progress.summary_lines("my.yaml", "demo", "sqlite:////w/mlflow.db", ok=False)
    logs = next(line for line in lines if line.startswith("  logs:"))
    assert f"{tmp_path / 'elsewhere' / 'logs'}/<stage>/<key>.log" in logs
    audit = next(line for line in lines if line.startswith("  audit:"))
    runlib = Path(sys.executable).parent / "runlib"
    assert f"(write it: {runlib} audit my.yaml --format html)" in audit and runlib.is_file()


def test_a_failed_job_shows_the_last_line_of_its_log(tmp_path) -> None:
    """A stage that refuses a tampered input says why on its log's last line; the console showed only
    'FAILED ...; its log: ...', so the reason took a `cat` (seen with a corrupted token shard)."""
    log = tmp_path / "stage.log"
    log.write_text(
        "== runlib train-phase --key k: pid 1 ==\n" + "x" * 10_000 + "\nartifact tokenize/abc: train.bin differs\n\n"
    )
    v, out = view(tmp_path, tty=False)
    v.on_record(record("job_info", jobid=4, rule_name="train_phase", wildcards={"key": KEY}, log=[str(log)]))
    v.on_record(record("job_error", jobid=4))
    failed = out.getvalue().splitlines()[-2:]
    assert failed == [
        f"runlib: FAILED train_phase foundation; its log: {log}",
        "  artifact tokenize/abc: train.bin differs",
    ]
