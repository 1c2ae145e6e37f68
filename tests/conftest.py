from pathlib import Path

import pytest

from tests import helpers

ROOT = Path(__file__).resolve().parent.parent
# the spec format contract, by example, kept verbatim (tests/spec/test_loader.py pins its digest)
REFERENCE_SPEC = ROOT / "tests" / "fixtures" / "spec-reference.yaml"
BASE_SPEC = ROOT / "runlib" / "audit" / "cases_base.yaml"


@pytest.fixture
def base_text() -> str:
    return BASE_SPEC.read_text()


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test's own work directory, <tmp_path>/work (RUNLIB_WORK_DIR; not created), with tmp_path as the
    working directory and MLFLOW_TRACKING_URI unset: no artifact, log or MLflow record lands in the
    repository's ./work or ./mlruns, or on a tracking server of the environment."""
    work = tmp_path / "work"
    monkeypatch.setenv("RUNLIB_WORK_DIR", str(work))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    return work


@pytest.fixture
def hang_guard():
    """The test fails after tests.limits.HANG_GUARD_S seconds instead of hanging (helpers.hang_guard)."""
    with helpers.hang_guard():
        yield


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
