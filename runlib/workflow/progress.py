"""Console progress while Snakemake runs: what each running stage is, by name, and how far training is.

The Snakefile starts the view in its `onstart` handler (the main Snakemake process only: jobs that
Snakemake runs remotely get --no-hooks) and ends it in `onsuccess` / `onerror`. It reads two things:
- Snakemake's own log records (a logging.Handler on the "snakemake.logging" logger): a job starts
  (JOB_INFO: rule and wildcards, so the stage's key, which the view names by the graph's instance name,
  e.g. "train_phase foundation"), finishes (JOB_FINISHED) or fails (JOB_ERROR); on Slurm, the plugin's
  "has been submitted with SLURM jobid N" line gives each stage's Slurm job id;
- each running train_phase's progress.json (runlib.train.loop writes it every few seconds into the
  phase's scratch directory): step, tokens, the last interval's mean loss, tokens/s, the phase's ETA.

On a terminal (stderr a tty) one status line is redrawn in place (\\r) and Snakemake's own output is
written above it; otherwise (CI logs, a file) the training line is printed as a plain line at most every
PLAIN_EVERY_S seconds or PLAIN_EVERY_FRACTION of the phase. The full detail stays in each stage's log
file (work/logs/<stage>/<key>.log). The overall ETA covers training only: the running phase's remaining
tokens at its measured speed, plus each later phase's planned time (runlib.plan: estimated hours at the
spec's MFU) scaled by measured / planned speed of the latest phase measured. RUNLIB_PROGRESS=0 turns the
view off. Stage numerics never depend on it: it only reads.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from runlib.spec.units import format_count
from runlib.store.command import executable
from runlib.store.settings import work_dir
from runlib.util.report_dirs import report_dir

Progress = dict[str, Any]
"""A phase's progress.json as runlib.train.loop writes it: step, tokens, loss, tokens_per_s, its span."""

TTY_EVERY_S = 1.0  # redraw of the status line on a terminal
POLL_EVERY_S = 5.0  # progress.json reads when not on a terminal
PLAIN_EVERY_S = 30.0  # at most one plain training line per phase this often ...
PLAIN_EVERY_FRACTION = 0.10  # ... or when the phase has advanced this much since the last one
SNAKEMAKE_LOGGER = "snakemake.logging"
_SLURM_SUBMITTED = re.compile(r"Job (\d+) has been submitted with SLURM jobid (\d+)")
_CLEAR = "\r\x1b[K"


def format_seconds(seconds: float | None) -> str:
    """3725 -> '1h 02m', 200 -> '3m 20s', 42 -> '42s'; None or not finite -> '?'."""
    if seconds is None or not (seconds == seconds) or seconds in (float("inf"), float("-inf")):
        return "?"
    s = max(0, int(round(seconds)))
    if s >= 3600:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s}s"


@dataclass(frozen=True)
class PhaseTime:
    """A training phase as the overall ETA sees it."""

    key: str
    name: str
    tokens: int
    planned_s: float | None  # the plan's estimate (None: the plan cannot say, no peak FLOP/s known)


def training_left_s(
    phases: list[PhaseTime],
    finished: set[str],
    current: dict[str, Progress],
    measured_over_planned: float | None,
) -> float | None:
    """Seconds of training left (pure): each running phase (key -> its progress.json) at its measured speed;
    each later phase at its planned time x measured_over_planned (measured / planned seconds per token of
    the latest phase measured), or at the running phase's measured tokens/s when the plan has no estimate.
    None before any speed is measured."""
    speeds = [float(p["tokens_per_s"]) for p in current.values() if p.get("tokens_per_s")]
    if not speeds and measured_over_planned is None:
        return None
    left = 0.0
    for phase in phases:
        if phase.key in finished:
            continue
        progress = current.get(phase.key)
        if progress and progress.get("tokens_per_s"):
            left += max(0, progress["end_tokens"] - progress["tokens"]) / progress["tokens_per_s"]
        elif phase.planned_s is not None and measured_over_planned is not None:
            left += phase.planned_s * measured_over_planned
        elif speeds:
            left += phase.tokens / speeds[-1]
        else:
            return None
    return left


def speed_ratio(phase: PhaseTime, progress: Progress) -> float | None:
    """Measured / planned seconds per token of a running phase (None when either is unknown)."""
    tps = progress.get("tokens_per_s")
    if not tps or not phase.planned_s or not phase.tokens:
        return None
    return (1.0 / float(tps)) / (phase.planned_s / phase.tokens)


def train_line(name: str, progress: Progress, run_left_s: float | None = None) -> str:
    """One line for a running training phase, from its progress.json."""
    steps = progress["end_step"] - progress["start_step"]
    step = progress.get("step", progress["start_step"]) - progress["start_step"]
    tokens = progress.get("tokens", progress["start_tokens"]) - progress["start_tokens"]
    total = progress["end_tokens"] - progress["start_tokens"]
    parts = [f"{name}: step {step}/{steps}", f"{format_count(tokens)}/{format_count(total)} tokens"]
    if progress.get("loss") is not None:
        parts.append(f"loss {progress['loss']:.3f}")
    if progress.get("tokens_per_s"):
        parts.append(f"{progress['tokens_per_s']:,.0f} tok/s")
    parts.append(f"ETA {format_seconds(progress.get('eta_s'))}")
    if run_left_s is not None:
        parts.append(f"training left ~{format_seconds(run_left_s)}")
    return " | ".join(parts)


def plain_due(last_at: float | None, last_fraction: float | None, now: float, fraction: float) -> bool:
    """Whether a plain (non-terminal) training line is due: the first one, then every PLAIN_EVERY_S seconds
    or PLAIN_EVERY_FRACTION of the phase, whichever comes first, and at the phase's end."""
    if last_at is None or last_fraction is None:
        return True
    if fraction >= 1.0 > last_fraction:
        return True
    return now - last_at >= PLAIN_EVERY_S or fraction - last_fraction >= PLAIN_EVERY_FRACTION


LAST_LINE_BYTES = 4096  # a failed stage's reason is its log's last line: read no more than this of it


def last_log_line(path: str) -> str | None:
    """The last non-empty line of a log (read from its last LAST_LINE_BYTES; at most 1,000 characters, as a
    refusal ends with its rebuild command), or None when it cannot be read: what a failed job said last,
    shown under 'FAILED' so the reason needs no `cat`."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - LAST_LINE_BYTES))
            tail = f.read(LAST_LINE_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    if not lines:
        return None
    return lines[-1] if len(lines[-1]) <= 1000 else lines[-1][:997] + "..."


def summary_lines(spec_path: str, run_name: str, tracking_uri: str, ok: bool) -> list[str]:
    """What the end of a run prints: the run report, the audit report and the MLflow UI command."""
    report = report_dir(run_name, spec_path, "run") / "report.html"  # the Snakefile's target, the audit's rule
    audit = report_dir(run_name, spec_path, "audit") / "audit.html"
    lines = ["runlib: the run is complete." if ok else "runlib: the run stopped with a failed job (see above)."]
    if report.exists():
        lines.append(f"  run report:  {report}")
    audit_line = f"  audit:       {audit}"
    if not audit.exists():
        audit_line += f"  (write it: {shlex.quote(executable('runlib'))} audit {shlex.quote(spec_path)} --format html)"
    lines.append(audit_line)
    lines.append(
        f"  MLflow UI:   mlflow ui --backend-store-uri {shlex.quote(tracking_uri)}   (then http://127.0.0.1:5000)"
    )
    if not ok:
        logs = work_dir() / "logs"  # RUNLIB_WORK_DIR's, not the default ./work
        lines.append(f"  logs:        {logs}/<stage>/<key>.log (the failed job's path is printed above)")
    return lines


@dataclass
class _Job:
    label: str
    stage: str
    key: str
    log: str | None
    started: float
    slurm_id: str | None = None
    plain_at: float | None = None
    plain_fraction: float | None = None


@dataclass
class View:
    """The live view: fed Snakemake's log records (on_record) and polled (tick) by a thread."""

    labels: dict[tuple[str, str], str]  # (rule, key) -> "train_phase foundation"
    phases: list[PhaseTime]
    scratch: Any  # key -> the train_phase's scratch directory (runlib.train.phase.scratch_dir)
    stream: TextIO
    tty: bool
    clock: Any = time.monotonic
    jobs: dict[int, _Job] = field(default_factory=dict)
    finished: set[str] = field(default_factory=set)
    ratio: float | None = None
    status: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)

    # ---------------------------------------------------------------------------- output
    def _write_raw(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass

    def say(self, line: str) -> None:
        """A line above the status line (or a plain line)."""
        with self.lock:
            if self.tty and self.status:
                self._write_raw(_CLEAR + line + "\n" + self.status)
            else:
                self._write_raw(line + "\n")

    def set_status(self, text: str) -> None:
        with self.lock:
            self.status = text
            self._write_raw(_CLEAR + text)

    # ---------------------------------------------------------------------------- events
    def label(self, rule: str, wildcards: dict[str, Any]) -> tuple[str, str]:
        key = str((wildcards or {}).get("key", ""))
        if rule == "track":
            phase = self.labels.get(("train_phase", key), key)
            return f"track {phase.removeprefix('train_phase ')}", key
        return self.labels.get((rule, key), f"{rule} {key}".strip()), key

    def on_record(self, record: logging.LogRecord) -> None:
        job: _Job | None
        event = str(getattr(getattr(record, "event", None), "value", getattr(record, "event", "")) or "")
        rule = getattr(record, "rule_name", None)  # Snakemake's log records carry the job's fields as attributes
        if event == "job_info" and rule not in (None, "all"):
            label, key = self.label(str(rule), getattr(record, "wildcards", {}) or {})
            logs = getattr(record, "log", None) or []
            job = _Job(label, str(rule), key, logs[0] if logs else None, self.clock())
            self.jobs[int(getattr(record, "jobid", -1))] = job
            self.say(f"runlib: started {label}")
        elif event == "job_finished":
            job = self.jobs.pop(int(getattr(record, "job_id", -1)), None)
            if job is not None:
                if job.stage == "train_phase":
                    self.finished.add(job.key)
                self.say(f"runlib: done {job.label} in {format_seconds(self.clock() - job.started)}")
                self._clear_status_if_idle()
        elif event == "job_error":
            job = self.jobs.pop(int(getattr(record, "jobid", -1)), None)
            if job is not None:
                self.say(f"runlib: FAILED {job.label}; its log: {job.log or '(none)'}")
                reason = last_log_line(job.log) if job.log else None
                if reason:  # a stage's refusal (a tampered input, a full disk) is one line at its log's end
                    self.say(f"  {reason}")
                self._clear_status_if_idle()
        else:
            match = _SLURM_SUBMITTED.search(record.getMessage() if record.msg is not None else "")
            if match and int(match.group(1)) in self.jobs:
                job = self.jobs[int(match.group(1))]
                job.slurm_id = match.group(2)
                self.say(f"runlib: {job.label} is Slurm job {job.slurm_id}")

    def _clear_status_if_idle(self) -> None:
        if self.tty and self.status and not any(j.stage == "train_phase" for j in self.jobs.values()):
            with self.lock:
                self.status = ""
                self._write_raw(_CLEAR)

    # ---------------------------------------------------------------------------- polling
    def read_progress(self) -> dict[str, Progress]:
        out: dict[str, Progress] = {}
        for job in list(self.jobs.values()):
            if job.stage != "train_phase":
                continue
            try:
                out[job.key] = json.loads((Path(self.scratch(job.key)) / "progress.json").read_text())
            except (OSError, ValueError):
                continue
        return out

    def tick(self) -> None:
        progress = self.read_progress()
        by_key = {p.key: p for p in self.phases}
        for key, p in progress.items():
            if key in by_key:
                self.ratio = speed_ratio(by_key[key], p) or self.ratio
        left = training_left_s(self.phases, self.finished, progress, self.ratio)
        lines = []
        for job in list(self.jobs.values()):
            running = progress.get(job.key)
            if job.stage != "train_phase" or running is None:
                continue
            p = running
            line = train_line(job.label, p, left)
            if self.tty:
                lines.append(line)
                continue
            span = max(1, p["end_tokens"] - p["start_tokens"])
            fraction = (p.get("tokens", p["start_tokens"]) - p["start_tokens"]) / span
            now = self.clock()
            if plain_due(job.plain_at, job.plain_fraction, now, fraction):
                job.plain_at, job.plain_fraction = now, fraction
                self.say("runlib: " + line)
        if self.tty and lines:
            width = _terminal_width()
            self.set_status(" || ".join(lines)[: width - 1])


def _terminal_width() -> int:
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError):
        return 120


class _Events(logging.Handler):
    def __init__(self, view: View):
        super().__init__(level=logging.DEBUG)
        self.view = view

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.view.on_record(record)
        except Exception:  # the view must never break Snakemake's logging
            pass


class _AboveStatus:
    """Snakemake's stream on a terminal: each write first clears the status line, which is redrawn after."""

    def __init__(self, stream: TextIO, view: View):
        self._stream, self._view = stream, view

    def write(self, text: str) -> int:
        with self._view.lock:
            if self._view.status:
                self._stream.write(_CLEAR)
            n = self._stream.write(text)
            if self._view.status and text.endswith("\n"):
                self._stream.write(self._view.status)
            return n

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@dataclass
class Running:
    """A started view: its thread and what to undo at the end."""

    view: View
    handler: logging.Handler
    stop: threading.Event
    thread: threading.Thread
    wrapped: list[tuple[logging.StreamHandler[TextIO], TextIO]]


def start(
    labels: dict[tuple[str, str], str],
    phases: list[PhaseTime],
    scratch: Callable[[str], Path],
    stream: TextIO | None = None,
) -> Running | None:
    """Start the view (None when RUNLIB_PROGRESS=0)."""
    if os.environ.get("RUNLIB_PROGRESS", "1") == "0":
        return None
    stream = stream or sys.stderr
    tty = bool(getattr(stream, "isatty", lambda: False)()) and os.environ.get("TERM") != "dumb"
    view = View(labels, phases, scratch, stream, tty)
    logger = logging.getLogger(SNAKEMAKE_LOGGER)
    handler = _Events(view)
    logger.addHandler(handler)
    wrapped: list[tuple[logging.StreamHandler[TextIO], TextIO]] = []
    if tty:
        for h in logger.handlers:
            if isinstance(h, logging.StreamHandler) and getattr(h.stream, "isatty", lambda: False)():
                wrapped.append((h, h.stream))
                h.setStream(_AboveStatus(h.stream, view))
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(TTY_EVERY_S if tty else POLL_EVERY_S):
            try:
                view.tick()
            except Exception:
                pass

    thread = threading.Thread(target=loop, name="runlib-progress", daemon=True)
    thread.start()
    return Running(view, handler, stop, thread, wrapped)


def finish(running: Running | None, lines: list[str], stream: TextIO | None = None) -> None:
    """Stop the view, put Snakemake's stream back, print the closing lines."""
    if running is not None:
        running.stop.set()
        running.thread.join(timeout=5)
        logging.getLogger(SNAKEMAKE_LOGGER).removeHandler(running.handler)
        for handler, original in running.wrapped:
            handler.setStream(original)
        if running.view.tty and running.view.status:
            running.view._write_raw(_CLEAR)
    out = stream or sys.stderr
    out.write("\n".join(lines) + "\n")
    out.flush()
