from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# a verbatim copy of shared/design/spec-reference.yaml (the spec format contract), so a clean clone tests it
REFERENCE_SPEC = ROOT / "tests" / "fixtures" / "spec-reference.yaml"
SHARED_REFERENCE_SPEC = ROOT.parent / "shared" / "design" / "spec-reference.yaml"
BASE_SPEC = ROOT / "runlib" / "audit" / "cases_base.yaml"


@pytest.fixture
def base_text() -> str:
    return BASE_SPEC.read_text()
