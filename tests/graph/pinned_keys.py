"""Every stage key of a few specs, as `runlib plan` would compute them: what tests/graph/test_keys_pinned.py
pins so that a refactor of the layers cannot change a key (users would rebuild everything without a word).

    python -m tests.graph.pinned_keys > tests/graph/pinned_keys.json    # only when a key is meant to change

The builtin sources' keys hold the running Python's version (runlib.curate.builtin.builtin_python); it is
fixed here to the version the pins were computed with, so the pins hold on any 3.11 micro release."""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]
PINNED_SPECS = (
    "specs/demo.yaml",
    "tests/fixtures/tiny.yaml",
    "specs/variants/demo-branches.yaml",
    "specs/demo-ladder.yaml",
    "specs/llama2-7b.yaml",
    "specs/olmo2-7b.yaml",
)
PINNED_PYTHON = "3.11.7"


def stage_keys(spec_path: str) -> dict[str, str]:
    """Instance name -> stage key of every node of the spec's graph, computed from the repository root (a file
    source whose files are not here gets runlib diff's placeholder shard)."""
    from runlib.plan import derive
    from runlib.review.diff import review_graph
    from runlib.spec import load_spec

    spec = load_spec(ROOT / spec_path).spec
    with mock.patch.object(platform, "python_version", return_value=PINNED_PYTHON):
        graph, _ = review_graph(spec, derive(spec))
    return {node.instance: f"{node.stage}/{node.key}" for node in graph.nodes}


def all_keys() -> dict[str, dict[str, str]]:
    return {path: stage_keys(path) for path in PINNED_SPECS}


if __name__ == "__main__":
    os.chdir(ROOT)
    os.environ.setdefault("RUNLIB_WORK_DIR", "/tmp/runlib-pinned-keys")
    json.dump(all_keys(), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
