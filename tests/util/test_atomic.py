"""`-o`/`--out` and every atomic write keep what the name points at: `-o /dev/null` run
as root became a regular 0600 file, and a symbolic link was replaced by a file. Devices and FIFOs are
written in place, links are written through, regular files are still replaced atomically with their
permission bits kept.

The device here is a private character node of /dev/null's numbers in tmp_path (not /dev/null itself:
the old code would replace the machine's)."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from runlib.cli import main
from runlib.errors import UserError
from runlib.util.atomic import write_text_atomic

FIX = Path(__file__).parent.parent / "fixtures" / "imports"


def _null_device(tmp_path: Path) -> Path:
    node = tmp_path / "null"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # /dev/null's major, minor (Linux devices.txt)
    except (PermissionError, OSError) as exc:
        pytest.skip(f"cannot create a device node here ({exc}); the FIFO test covers writing in place")
    return node


def test_out_to_a_character_device_writes_in_place(tmp_path):
    null = _null_device(tmp_path)
    assert main(["schema", "--out", str(null)]) == 0
    st = os.lstat(null)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3), "the device was replaced by a file"
    assert [p.name for p in tmp_path.iterdir()] == ["null"], "a temporary file was left beside it"


def test_a_fifo_is_written_in_place(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    write_text_atomic(fifo, "name: x\n")
    reader.join(timeout=60)  # a guard: the reader returns as soon as the writer closes
    assert got == [b"name: x\n"]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_symlink_is_written_through_and_kept(tmp_path):
    target = tmp_path / "real" / "spec.yaml"
    target.parent.mkdir()
    target.write_text("old\n")
    link = tmp_path / "spec.yaml"
    link.symlink_to(target)
    assert main(["import", str(FIX / "train_gpt2.py"), "-o", str(link)]) in (0, 1)  # 1: the audit's findings
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text().startswith("# Imported by `runlib import`")
    assert main(["schema", "--out", str(link)]) == 0
    assert link.is_symlink() and target.read_text().startswith("{")
    dangling = tmp_path / "new.yaml"
    dangling.symlink_to(tmp_path / "real" / "created.yaml")
    write_text_atomic(dangling, "new\n")
    assert dangling.is_symlink() and (tmp_path / "real" / "created.yaml").read_text() == "new\n"


def test_regular_files_keep_their_mode_and_new_ones_follow_the_umask(tmp_path):
    existing = tmp_path / "spec.yaml"
    existing.write_text("old\n")
    existing.chmod(0o640)
    write_text_atomic(existing, "new\n")
    assert existing.read_text() == "new\n" and stat.S_IMODE(existing.stat().st_mode) == 0o640
    old_mask = os.umask(0o022)
    try:
        write_text_atomic(tmp_path / "fresh.yaml", "x\n")
    finally:
        os.umask(old_mask)
    assert stat.S_IMODE((tmp_path / "fresh.yaml").stat().st_mode) == 0o644


def test_a_directory_is_refused(tmp_path, capsys):
    with pytest.raises(UserError, match="is a directory"):
        write_text_atomic(tmp_path, "x\n")
    assert main(["import", str(FIX / "train_gpt2.py"), "-o", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_a_fifo_without_a_reader_is_refused_not_waited_on_forever(tmp_path, capsys, monkeypatch):
    """open(2) of a FIFO for writing blocks until a reader comes: `-o fifo` hung."""
    monkeypatch.setattr("runlib.util.atomic.FIFO_READER_WAIT_S", 0.2)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    guard = threading.Timer(60, lambda: os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # unblocks a hung writer
    guard.daemon = True
    guard.start()
    try:
        assert main(["schema", "--out", str(fifo)]) == 2
    finally:
        guard.cancel()
    err = capsys.readouterr().err
    assert str(fifo) in err and "no process read" in err and "Traceback" not in err, err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize(
    "target",
    [
        pytest.param("/dev/full", id="full_device"),
        pytest.param("{tmp}/a_file/spec.yaml", id="parent_is_a_file"),
        pytest.param("{tmp}/" + "n" * 300 + ".yaml", id="name_too_long"),
    ],
)
def test_out_that_cannot_be_written_is_exit_2_naming_it(target, tmp_path, capsys):
    """An OSError of the write was a traceback with exit 1 (which means "the audit found errors")."""
    if target == "/dev/full" and not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    (tmp_path / "a_file").write_text("x")
    out = target.format(tmp=tmp_path)
    assert main(["import", str(FIX / "train_gpt2.py"), "-o", out]) == 2
    err = capsys.readouterr().err
    assert out in err and "cannot write it" in err and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"], "a temporary file was left behind"
