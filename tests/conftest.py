from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REFERENCE_SPEC = ROOT.parent / "shared" / "design" / "spec-reference.yaml"
BASE_SPEC = ROOT / "runlib" / "audit" / "cases_base.yaml"


@pytest.fixture
def base_text() -> str:
    return BASE_SPEC.read_text()
