"""Hostile manifests: a manifest.json replaced by a FIFO or a link to /dev/zero
hung `runlib verify`, `snakemake` and every stage that reads its inputs' manifests; one of nested arrays
ended in a RecursionError traceback. Each is now a ManifestError (a UserError: exit 2) naming the file.

Each read runs under SIGALRM, far above the milliseconds it takes: a guard against a hang, not a timing bound.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runlib.store.manifest import MAX_MANIFEST_BYTES, ManifestError, read_manifest
from tests.helpers import refused


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _zero_link(path: Path) -> None:
    path.symlink_to("/dev/zero")


def _deep(path: Path) -> None:
    path.write_text('{"a":' * 100_000 + "1" + "}" * 100_000)


def _oversize(path: Path) -> None:
    with open(path, "wb") as f:
        f.truncate(MAX_MANIFEST_BYTES + 10)  # sparse: no disk used


def _not_utf8(path: Path) -> None:
    path.write_bytes(b'{"stage": "\xff"}')


def _directory(path: Path) -> None:
    path.mkdir()


CASES = {
    "fifo": (_fifo, "FIFO"),
    "link_to_dev_zero": (_zero_link, "character device"),
    "nested_100k": (_deep, "not a readable JSON manifest"),
    "over_16_mib": (_oversize, "MiB"),
    "not_utf8": (_not_utf8, "not a readable JSON manifest"),
    "directory": (_directory, "directory"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_manifest_is_a_manifest_error_naming_the_file(name, tmp_path):
    make, words = CASES[name]
    make(tmp_path / "manifest.json")
    refused(
        lambda: read_manifest(tmp_path), str(tmp_path / "manifest.json"), words, error=ManifestError, max_chars=1500
    )


def test_missing_manifest_is_not_built(tmp_path):
    with pytest.raises(ManifestError, match="not built"):
        read_manifest(tmp_path / "absent")
