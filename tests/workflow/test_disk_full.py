"""A stage that runs out of disk says so, with the place and the fix: before, a full
disk surfaced as the writer's words ("unexpected pos 8896 vs 8790" from torch.save, a traceback of
OSError 28 or 27) with exit 1.

A real stage (curate_shard of the tiny spec's arithmetic source, ~300 KB of output) runs with its work
directory on a 128 KiB tmpfs (ENOSPC; needs mount, as root: skipped otherwise) and under a file size limit
of 64 KiB (RLIMIT_FSIZE's soft limit, SIGXFSZ ignored: EFBIG; both restored after). Each must end in a
UserError (exit 2) naming the place and the fix, with nothing committed.
"""

from __future__ import annotations

import resource
import signal
import subprocess
from contextlib import contextmanager

import pytest

from runlib.errors import UserError
from runlib.graph.stages import run_stage
from runlib.spec import load_spec
from runlib.store.diskfull import disk_full_cause
from tests.conftest import ROOT

TINY = ROOT / "tests" / "fixtures" / "tiny.yaml"


def _key() -> str:
    from runlib.graph.build import build_graph

    graph = build_graph(load_spec(TINY).spec)
    return next(n.key for n in graph.of("curate_shard") if n.params["source"] == "arithmetic")


@contextmanager
def _file_size_limit(limit_bytes: int):
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of the signal's termination
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


def _refused(work, key: str, what: str) -> None:
    with pytest.raises(UserError) as info:
        run_stage("curate_shard", str(TINY), key)
    message = str(info.value)
    assert message.startswith(f"curate_shard {key}: {what} at {work}"), message
    assert "rerun" in message and len(message) < 600, message
    assert not (work / "artifacts" / "curate_shard" / key).exists()
    assert list((work / "artifacts" / "curate_shard").iterdir()) == [], "the build's temporary folder was left"


def test_file_size_limit_during_a_stage_names_it(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNLIB_WORK_DIR", str(tmp_path))
    key = _key()
    with _file_size_limit(64 * 1024):
        _refused(tmp_path, key, "file size limit reached")


def test_full_disk_during_a_stage_names_it(tmp_path, monkeypatch):
    small = tmp_path / "small"
    small.mkdir()
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", str(small)], capture_output=True)
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mount.stderr.strip()}); the file size limit test covers EFBIG")
    try:
        monkeypatch.setenv("RUNLIB_WORK_DIR", str(small))
        _refused(small, _key(), "disk full")
    finally:
        subprocess.run(["umount", str(small)], check=False)


def test_torch_short_write_is_recognised():
    """torch.save's texts for a short write (PyTorch caffe2/serialize/inline_container.cc)."""
    error = RuntimeError("[enforce fail at inline_container.cc:778] . PytorchStreamWriter failed writing file data/3")
    assert disk_full_cause(error) == ("disk full", None)
    wrapped = RuntimeError("checkpoint not saved")
    wrapped.__cause__ = RuntimeError("unexpected pos 8896 vs 8790")
    assert disk_full_cause(wrapped) == ("disk full", None)
    assert disk_full_cause(RuntimeError("shape mismatch")) is None
