"""Every Hugging Face config.json fixture imports to exactly the parameters transformers itself builds from it.

transformers (5.24, in the test extras) instantiates each config's model on the meta device (no memory, no
weights: AutoModelForCausalLM.from_config) and counts its parameters, tied weights once; runlib's importer maps
the same file to a spec whose plan counts them by formula (runlib.plan.params). The two must agree to the
parameter for every family the importer maps (runlib.review.importers.hf.FAMILIES)."""

import json
import warnings
from pathlib import Path

import pytest
import torch

from runlib.plan import derive
from runlib.review.importers import import_file
from runlib.review.importers.hf import FAMILIES

FIXTURES = sorted((Path(__file__).parent.parent / "fixtures" / "imports" / "hf").glob("*.config.json"))


def transformers_count(path: Path) -> int:
    from transformers import AutoConfig, AutoModelForCausalLM

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # rope_scaling factor / max_position notes of some configs
        config = AutoConfig.for_model(**json.loads(path.read_text()))
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_the_import_counts_what_transformers_builds(path: Path) -> None:
    assert derive(import_file(path).loaded.spec).params.total == transformers_count(path)


def test_every_family_has_a_fixture() -> None:
    families = {json.loads(p.read_text())["model_type"] for p in FIXTURES}
    assert set(FAMILIES) <= families, sorted(set(FAMILIES) - families)
