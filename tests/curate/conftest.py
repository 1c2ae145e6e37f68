import pytest


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    """Curation tests read and write relative paths (globs as in a spec): each runs in its own directory."""
    monkeypatch.chdir(tmp_path)
