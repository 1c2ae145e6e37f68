"""The README says exactly which files of a rebuilt artifact are byte for byte the first build's (it
said rebuilt phases were identical, and their measured throughput is not). The sentence must
name exactly the fields tests/workflow/test_faults.py leaves out of its comparison (MEASURED), so the
claim and the test that checks it cannot drift apart."""

from __future__ import annotations

import re

from tests.conftest import ROOT
from tests.workflow.test_faults import MEASURED


def test_readme_names_exactly_what_a_rebuild_does_not_reproduce():
    readme = " ".join((ROOT / "README.md").read_text().split())
    match = re.search(
        r"gives the uninterrupted run's artifact \([^)]*\): every file byte for byte .*?is unchanged\.", readme
    )
    assert match, "README: the Kills paragraph must say which files a rebuild reproduces byte for byte"
    claim = match.group(0)
    assert set(MEASURED) == {"metrics.jsonl", "run.json"}
    assert "`tokens_per_s` and `mfu` in `metrics.jsonl`" in claim
    dropped = {
        k
        for k in ("step", "tokens", "loss", "lr", "grad_norm", "tokens_per_s", "mfu")
        if k
        not in MEASURED["metrics.jsonl"](
            {k: 0 for k in ("step", "tokens", "loss", "lr", "grad_norm", "tokens_per_s", "mfu")}
        )
    }
    assert dropped == {"tokens_per_s", "mfu"}
    kept = MEASURED["run.json"]({"mesh": 1, "world": 2, "tokens_per_s": 3})
    assert set(kept) == {"mesh", "world"} and "`run.json` but its `mesh` and `world`" in claim
    assert "content hash" in claim
