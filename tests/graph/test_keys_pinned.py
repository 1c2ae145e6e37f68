"""Stage keys do not move under a refactor: every key of the pinned specs equals the one computed before
(tests/graph/pinned_keys.json). A changed key rebuilds the user's artifacts; when that is meant (a stage
version bump), regenerate the pins as tests/graph/pinned_keys.py says and say so in the commit."""

import json
from pathlib import Path

import pytest

from tests.graph.pinned_keys import PINNED_SPECS, ROOT, stage_keys

PINS = json.loads((Path(__file__).parent / "pinned_keys.json").read_text())


@pytest.mark.parametrize("spec_path", PINNED_SPECS)
def test_stage_keys_unchanged(spec_path, monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("RUNLIB_WORK_DIR", str(tmp_path / "work"))
    assert stage_keys(spec_path) == PINS[spec_path]


def test_pins_cover_every_stage_kind():
    """The pins are worth something only if they hold every stage kind the graph builds."""
    kinds = {key.split("/")[0] for keys in PINS.values() for key in keys.values()}
    assert kinds >= {
        "curate_shard",
        "curate_source",
        "train_tokenizer",
        "tokenize",
        "train_phase",
        "eval_phase",
        "fit_ladder",
    }
