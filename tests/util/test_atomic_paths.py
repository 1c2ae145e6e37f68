"""atomic_file and replace_dir: a reader finds the old content or the new, whole; a failed write leaves the
old one and no temporary behind."""

from pathlib import Path

import pytest

from runlib.util.atomic import atomic_file, replace_dir


def test_atomic_file_replaces_on_success_and_keeps_the_old_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "state.bin"
    with atomic_file(target) as tmp:
        assert tmp.parent == target.parent and tmp != target
        tmp.write_bytes(b"new")
        assert not target.exists()  # nothing at the name until the block ends
    assert target.read_bytes() == b"new"
    with pytest.raises(RuntimeError), atomic_file(target) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("killed mid-write")
    assert target.read_bytes() == b"new"
    assert sorted(p.name for p in target.parent.iterdir()) == ["state.bin"]


def test_replace_dir_swaps_a_non_empty_directory(tmp_path: Path) -> None:
    out = tmp_path / "report"
    out.mkdir()
    (out / "old.txt").write_text("old")
    new = tmp_path / ".tmp-report"
    new.mkdir()
    (new / "new.txt").write_text("new")
    replace_dir(new, out)
    assert sorted(p.name for p in out.iterdir()) == ["new.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]  # the old one is gone, no leftovers


def test_replace_dir_puts_the_old_back_when_the_swap_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "report"
    out.mkdir()
    (out / "old.txt").write_text("old")
    missing = tmp_path / ".tmp-never-written"  # renaming it fails: the old directory must come back
    with pytest.raises(FileNotFoundError):
        replace_dir(missing, out)
    assert (out / "old.txt").read_text() == "old"


def test_replace_dir_refuses_a_file(tmp_path: Path) -> None:
    (tmp_path / "report").write_text("a file")
    new = tmp_path / ".tmp"
    new.mkdir()
    with pytest.raises(FileExistsError):
        replace_dir(new, tmp_path / "report")
