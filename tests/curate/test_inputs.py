"""runlib.curate.inputs: the glob walk (glob.glob's matches, bounded, symlink loops and FIFOs refused) and
the digest cache (one hash per file version, an edit that keeps size and mtime still seen)."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runlib.curate import inputs
from runlib.curate.inputs import check_unchanged, source_inputs
from runlib.errors import UserError
from runlib.util import globs
from runlib.util.globs import match_files
from runlib.util.hashing import file_digest
from tests.conftest import ROOT
from tests.limits import HANG_GUARD_S

FIELD = "data.sources.web.input.path"


def touch(path: str, text: str = "x") -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text)


@pytest.fixture
def tree() -> None:
    for path in (
        "data/x.jsonl",
        "data/.dot.jsonl",
        "data/a/y.jsonl",
        "data/a/b/z.jsonl",
        "data/a/b/q.jsonl.gz",
        "data/.hidden/h.jsonl",
        "data/c/w.txt",
    ):
        touch(path)
    os.mkdir("data/empty.jsonl")  # a directory a wildcard matches: not an input file


@pytest.mark.parametrize(
    "pattern",
    ["data/*.jsonl", "data/**/*.jsonl", "data/**", "**/*.jsonl", "data/*/*.json*", "data/.*", "data/[xy].jsonl"]
    + ["data/a/**/z.jsonl", "./data/*.jsonl", "data/x.jsonl", "data/**/b/*", "nowhere/*.jsonl"],
)
def test_matches_what_glob_matches(tree: None, pattern: str) -> None:
    expected = sorted(f for f in glob.glob(pattern, recursive=True) if os.path.isfile(f))
    assert [m.path for m in match_files(pattern, FIELD)] == expected


def test_symlink_loop_is_an_error_naming_the_link(tree: None) -> None:
    os.symlink("../../data", "data/a/loop")
    with pytest.raises(UserError, match=r"data/a/loop is a symbolic link loop \(it leads back to data\)") as err:
        match_files("data/**/*.jsonl", FIELD)
    assert FIELD in str(err.value)
    assert [m.path for m in match_files("data/*.jsonl", FIELD)] == ["data/x.jsonl"]  # no `**`: no walk into it


def test_a_directory_reached_twice_is_an_error(tree: None) -> None:
    os.symlink("../a", "data/c/alias")
    with pytest.raises(UserError, match=r"data/a and data/c/alias are the same directory"):
        match_files("data/**/*.jsonl", FIELD)
    os.unlink("data/c/alias")
    os.symlink("x.jsonl", "data/same.jsonl")
    with pytest.raises(UserError, match=r"data/same\.jsonl and data/x\.jsonl are the same file"):
        match_files("data/*.jsonl", FIELD)


def test_fifo_and_broken_link_are_errors(tree: None) -> None:
    os.mkfifo("data/pipe.jsonl")  # reading it would block forever
    with pytest.raises(UserError, match=r"data/pipe\.jsonl .* is not a regular file"):
        match_files("data/*.jsonl", FIELD)
    os.unlink("data/pipe.jsonl")
    os.symlink("missing.jsonl", "data/broken.jsonl")
    with pytest.raises(UserError, match=r"data/broken\.jsonl .* broken symbolic link"):
        match_files("data/*.jsonl", FIELD)


def test_glob_is_bounded(tree: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(globs, "MAX_INPUT_FILES", 3)
    with pytest.raises(UserError, match=rf"{FIELD}: 'data/\*\*' matches more than 3 files"):
        match_files("data/**", FIELD)
    monkeypatch.setattr(globs, "MAX_SCANNED_ENTRIES", 5)
    with pytest.raises(UserError, match=r"looks at more than 5 directory entries"):
        match_files("data/**/*.jsonl", FIELD)


def test_symlink_loop_under_runlib_plan_ends_with_exit_2(tmp_path: Path) -> None:
    """The issue's reproduction: `runlib plan` on a spec whose `**` glob walks into a link to an ancestor
    (glob.glob never returned). A generous timeout guards against a hang."""
    spec = (ROOT / "tests" / "fixtures" / "tiny.yaml").read_text()
    spec = spec.replace(
        "input: {format: builtin, name: python_docs, max_docs: 150}", 'input: {format: jsonl, path: "raw/**/*.jsonl"}'
    )
    assert "raw/**" in spec
    (tmp_path / "spec.yaml").write_text(spec)
    touch(str(tmp_path / "raw/sub/a.jsonl"), '{"text": "x"}\n')
    for name in ("l1", "l2", "l3"):  # glob.glob's walk grows as 3^depth through these
        os.symlink("..", tmp_path / "raw" / "sub" / name)
    env = {**os.environ, "RUNLIB_WORK_DIR": str(tmp_path / "work")}
    proc = subprocess.run(
        [sys.executable, "-m", "runlib", "plan", "spec.yaml"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )
    assert proc.returncode == 2, proc.stderr
    assert "data.sources.docs.input.path: raw/sub/l1 is a symbolic link loop" in proc.stderr
    assert "Traceback" not in proc.stderr


# -------------------------------------------------------------------------------------- fingerprints


@pytest.fixture
def hashes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths runlib.curate.inputs hashes, in order (no racy window: files written now are cacheable)."""
    monkeypatch.setattr(inputs, "RACY_WINDOW_NS", 0)
    calls: list[str] = []

    def counting(path):
        calls.append(str(path))
        return file_digest(path)

    monkeypatch.setattr(inputs, "file_digest", counting)
    return calls


def test_each_file_version_is_hashed_once(tree: None, hashes: list[str]) -> None:
    first = source_inputs("data/**/*.jsonl", FIELD)
    assert [f.path for f in first] == ["data/a/b/z.jsonl", "data/a/y.jsonl", "data/x.jsonl"]
    assert all(f.digest == file_digest(f.path) and f.bytes == 1 for f in first)
    assert sorted(hashes) == sorted(f.path for f in first)
    hashes.clear()
    assert source_inputs("data/**/*.jsonl", FIELD) == first and hashes == []  # warm: no file read

    # an appended document: size and digest change; only that file is hashed again
    with open("data/a/y.jsonl", "a") as f:
        f.write("y")
    second = source_inputs("data/**/*.jsonl", FIELD)
    assert hashes == ["data/a/y.jsonl"]
    assert second[1].bytes == 2 and second[1].digest != first[1].digest
    assert [second[0], second[2]] == [first[0], first[2]]

    # an edit that keeps the size and puts the mtime back: ctime still moves, the digest follows
    hashes.clear()
    st = os.stat("data/x.jsonl")
    Path("data/x.jsonl").write_text("z")
    os.utime("data/x.jsonl", ns=(st.st_atime_ns, st.st_mtime_ns))
    third = source_inputs("data/**/*.jsonl", FIELD)
    assert hashes == ["data/x.jsonl"] and third[2].digest == file_digest("data/x.jsonl") != first[2].digest


def test_racy_and_broken_caches(tree: None, hashes: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inputs, "RACY_WINDOW_NS", 3600 * 10**9)  # every file is "just written"
    source_inputs("data/*.jsonl", FIELD)
    source_inputs("data/*.jsonl", FIELD)
    assert hashes == ["data/x.jsonl", "data/x.jsonl"]  # hashed, never cached
    monkeypatch.setattr(inputs, "RACY_WINDOW_NS", 0)
    source_inputs("data/*.jsonl", FIELD)
    tables = list(Path("work/cache/file-digests").glob("*.json"))
    assert len(tables) == 1
    tables[0].write_text('{"version": 1, "files": ')  # torn or foreign: ignored, then rewritten
    hashes.clear()
    assert source_inputs("data/*.jsonl", FIELD)[0].digest == file_digest("data/x.jsonl") and len(hashes) == 1
    source_inputs("data/*.jsonl", FIELD)
    assert len(hashes) == 1


def test_a_file_changed_after_keying_is_refused(tree: None) -> None:
    files = source_inputs("data/*.jsonl", FIELD)
    assert len(check_unchanged("data/*.jsonl", files, FIELD)) == 1
    Path("data/x.jsonl").write_text("q")  # same size, other content
    with pytest.raises(UserError, match=r"data/x\.jsonl changed since this stage's key was computed"):
        check_unchanged("data/*.jsonl", files, FIELD)
