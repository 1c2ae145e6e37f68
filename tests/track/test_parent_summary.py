"""The MLflow parent's summary of a ladder: tokens are the spec's own run's, device-hours every stage's, and
the plan's estimate counts the rungs' training (a ladder's target is not trained)."""

import pytest

from runlib.graph.build import build_graph
from runlib.graph.train_plans import node_device_hours, train_plans
from runlib.plan import derive
from runlib.spec import load_spec
from runlib.store.manifest import Manifest
from runlib.track.metrics import parent_summary
from tests.conftest import ROOT
from tests.helpers import fake_manifest


def _manifest(node, tokens: int, seconds: float) -> Manifest:
    return fake_manifest(node, counts={"tokens": tokens, "processes": 2}, started_at=1.0e9, wall_seconds=seconds)


def test_rung_tokens_are_not_the_runs_and_planned_hours_count_the_rungs():
    spec = load_spec(ROOT / "specs" / "demo-ladder.yaml").spec
    graph = build_graph(spec)
    trains = graph.of("train_phase")
    assert trains and all("rung" in n.params for n in trains)  # the target is not trained
    manifests = {n.instance: _manifest(n, 1000 * (i + 1), 36.0) for i, n in enumerate(trains)}
    plans = train_plans(spec)
    planned = sum(node_device_hours(n, plans) for n in trains)
    assert 0 < planned < derive(spec).gpu_hours  # the rungs are smaller than the target
    own = {n.instance for n in trains if "rung" not in n.params}
    summary = {k: v for k, v, _ in parent_summary(manifests, {}, planned, own)}
    assert "train/tokens" not in summary  # no stage of the run itself trained
    assert summary["train/device_hours"] == pytest.approx(len(trains) * 36.0 * 2 / 3600)
    assert summary["plan/device_hours"] == pytest.approx(planned)
    every = {k: v for k, v, _ in parent_summary(manifests, {}, planned)}
    assert every["train/tokens"] == 1000 * len(trains)  # without run_instances: the largest of all
