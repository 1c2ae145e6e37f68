"""Tracking never holds up training: a stalled MLflow server (it answers /health but
never the API) held `runlib track` 7+ minutes, and a track job holding a core delayed the next phase.

The server here is real (a local HTTP server whose API handler never answers); `runlib track --resync
--stamp` (the workflow's track rule) must end with a warning, exit 0 and its stamp written within the
deadline. HANG_S is a guard ~10x above that deadline plus an interpreter start, not a timing assertion.
"""

from __future__ import annotations

import http.server
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.conftest import ROOT

TINY = ROOT / "tests" / "fixtures" / "tiny.yaml"
DEADLINE_S = 2
HANG_S = 120


class _Stalled(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.path.rstrip("/").endswith("/health"):
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"OK")
            return
        self.server.stop.wait()  # the API never answers

    do_POST = do_GET

    def log_message(self, *args):
        pass


@pytest.fixture
def stalled_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Stalled)
    server.daemon_threads = True
    server.stop = threading.Event()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.stop.set()
    server.shutdown()
    server.server_close()


def test_stalled_mlflow_server_is_a_warning_within_the_deadline(tmp_path, stalled_server):
    stamp = tmp_path / "tracked" / "stamp"
    env = {
        **os.environ,
        "RUNLIB_WORK_DIR": str(tmp_path / "work"),
        "MLFLOW_TRACKING_URI": stalled_server,
        "RUNLIB_TRACK_DEADLINE_S": str(DEADLINE_S),
    }
    cmd = [sys.executable, "-m", "runlib", "track", "--resync", str(TINY), "--stamp", str(stamp)]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=HANG_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"runlib track still waiting on a stalled MLflow server after {HANG_S} s")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert f"did not finish within {DEADLINE_S} s" in proc.stderr, proc.stderr[-2000:]
    assert "the next track step retries; retry: runlib track --resync" in proc.stderr
    assert stamp.read_text().startswith("not recorded:"), "the workflow goes on: the stamp is written"


def test_mlflow_http_limits_are_set_unless_the_user_set_them():
    from runlib.track.resync import bound_mlflow_requests

    env: dict[str, str] = {}
    bound_mlflow_requests(env)
    assert int(env["MLFLOW_HTTP_REQUEST_TIMEOUT"]) < 120 and int(env["MLFLOW_HTTP_REQUEST_MAX_RETRIES"]) < 7
    env = {"MLFLOW_HTTP_REQUEST_TIMEOUT": "300"}
    bound_mlflow_requests(env)
    assert env["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "300"


def test_track_rule_holds_no_core():
    """With --cores N a training phase takes every core; a track job holding one kept the next phase waiting.
    Snakemake runs a `threads: 0` job beside one that takes all cores (checked with snakemake 9)."""
    rule = Path(ROOT / "rules" / "track.smk").read_text()
    assert re.search(r"^\s+threads:\s*0\s*$", rule, re.M), "rules/track.smk: give the track rule `threads: 0`"


def test_damaged_store_is_named_and_the_track_step_retried(tmp_path, work, capsys):
    """A damaged mlflow.db ended in "the run is complete" and was never tracked again: the track step's
    stamp was written as if done. Now the warning names the damaged store and the fix, and a retry marker
    newer than the stamp (an input of rules/track.smk's job) makes the next `snakemake` track again."""
    from runlib.track.resync import main_resync, retry_marker

    work.mkdir()
    (work / "mlflow.db").write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 64)  # a header, then garbage
    stamp = tmp_path / "tracked" / "stamp"
    assert main_resync(TINY, stamp=stamp) == 0
    err = capsys.readouterr().err
    assert f"the MLflow store {work.resolve() / 'mlflow.db'} is damaged" in err, err
    assert "mv " in err and "runlib track --resync" in err
    assert stamp.read_text().startswith("not recorded:")
    marker = retry_marker(stamp)
    assert marker.exists() and marker.stat().st_mtime_ns > stamp.stat().st_mtime_ns
    rule = Path(ROOT / "rules" / "track.smk").read_text()
    assert '+ ".retry"' in rule and "track_retry," in rule, "rules/track.smk: the retry marker is an input of track"


def test_a_retry_that_succeeds_keeps_the_marker_older_than_the_stamp(tmp_path, monkeypatch, capsys):
    """Snakemake records the set of a job's inputs: a marker removed after a successful retry changed that
    set, so the data DAG's next `snakemake` ran the track job once more ("Set of input files has changed").
    The marker stays, older than the new stamp, so the inputs are the same and nothing reruns."""
    from runlib.track.resync import main_resync, retry_marker

    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("RUNLIB_WORK_DIR", str(work))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{work / 'mlflow.db'}")
    stamp = tmp_path / "tracked" / "stamp"
    stamp.parent.mkdir()
    stamp.write_text("not recorded: earlier failure\n")
    marker = retry_marker(stamp)
    marker.write_text("earlier failure\n")
    later = stamp.stat().st_mtime_ns + 1_000_000_000
    os.utime(marker, ns=(later, later))
    assert main_resync(TINY, stamp=stamp) == 0, capsys.readouterr().err
    assert not stamp.read_text().startswith("not recorded:")
    assert marker.exists() and marker.stat().st_mtime_ns < stamp.stat().st_mtime_ns
