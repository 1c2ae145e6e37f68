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


# Rough seconds of the longest test modules on 2 quiet cores (`pytest --durations=40`, 2026-12-01, summed per module).
# Only the order uses them: with `--dist loadfile --no-loadscope-reorder` pytest-xdist hands modules to the
# workers in collection order, so the longest start first and the many short modules fill both workers'
# tails (longest processing time first). Without this, xdist orders modules by test count, and the few
# long end-to-end modules, which have few tests, ran last on one worker while the other sat idle.
MODULE_COST_S = {
    "tests/workflow/test_faults.py": 330,
    "tests/train/test_phase_training.py": 330,
    "tests/workflow/test_data_stages.py": 240,
    "tests/review/test_shrink.py": 240,
    "tests/ladder/test_ladder_e2e.py": 185,
    "tests/workflow/test_cluster.py": 170,
    "tests/train/test_parallel.py": 150,
    "tests/track/test_mlflow_track.py": 110,
    "tests/workflow/test_multinode.py": 60,
    "tests/train/test_launch.py": 40,
    "tests/workflow/test_commit_protocol.py": 40,
    "tests/export/test_hf.py": 40,
    "tests/export/test_hf_transformers4.py": 40,
    "tests/test_bench.py": 40,
    "tests/train/test_spikes.py": 25,
    "tests/workflow/test_artifacts.py": 25,
}


def pytest_collection_modifyitems(config, items):
    def cost(item) -> int:
        return MODULE_COST_S.get(Path(str(item.fspath)).relative_to(ROOT).as_posix(), 0)

    items.sort(key=lambda item: -cost(item))  # stable: the order inside a module is kept
