"""MLflow's wall time of a run counts from that run's own start: a variant that reuses its
baseline's first phases spans only the builds it made itself, not the baseline's."""

from __future__ import annotations

from pathlib import Path

import pytest

from runlib.cli import main
from runlib.graph.build import build_graph
from runlib.spec import load_spec
from tests.conftest import ROOT
from tests.helpers import write_fake_manifest

MlflowClient = pytest.importorskip("mlflow.tracking").MlflowClient

from runlib.track import mlflow_track  # noqa: E402

TINY = ROOT / "tests" / "fixtures" / "tiny.yaml"
BASELINE_START = 1.7e9  # the baseline's builds, a day before the variant's
VARIANT_START = BASELINE_START + 86_400.0


def build(spec_path: Path, start: float) -> dict[str, tuple[float, float]]:
    """A manifest for each of the spec's artifacts not built yet, 10 s apart from `start`, each 5 s long;
    returns key -> (start, end) of the builds made."""
    spans = {}
    for i, node in enumerate(build_graph(load_spec(spec_path).spec).nodes):
        if node.manifest_path.exists():
            continue  # built by an earlier run: reused
        began = start + 10.0 * i
        write_fake_manifest(node.dir, node, started_at=began, wall_seconds=5.0)
        spans[node.key] = (began, began + 5.0)
    return spans


def parent_of(client: MlflowClient, spec_path: Path):
    spec = load_spec(spec_path).spec
    experiment = client.get_experiment_by_name(mlflow_track.experiment_name(spec))
    run_id = mlflow_track._search_one(
        client, experiment.experiment_id, {"runlib.kind": "parent", "runlib.spec_key": mlflow_track.spec_key(spec)}
    )
    return client.get_run(run_id)


def test_a_variant_counts_its_wall_time_from_its_own_first_build(
    tmp_path: Path, work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    baseline = tmp_path / "tiny.yaml"
    baseline.write_text(TINY.read_text())
    variant = tmp_path / "tiny-anneal.yaml"  # the same name, another anneal mixture: the last phase reruns
    old = "{name: anneal, kind: anneal, tokens: 10%, mixture: {docs: 0.4, code: 0.4, arithmetic: 0.2}}"
    assert old in baseline.read_text()
    variant.write_text(baseline.read_text().replace(old, old.replace("docs: 0.4, code: 0.4", "docs: 0.2, code: 0.6")))

    spans_a = build(baseline, BASELINE_START)
    assert main(["track", "--resync", str(baseline)]) == 0
    spans_b = build(variant, VARIANT_START)
    assert main(["track", "--resync", str(variant)]) == 0
    capsys.readouterr()
    reused = {n.key for n in build_graph(load_spec(variant).spec).nodes} - set(spans_b)
    assert spans_b and reused and reused <= set(spans_a)  # the variant reuses the baseline's first phases

    client = mlflow_track._client()
    a, b = parent_of(client, baseline), parent_of(client, variant)
    first_a, last_a = min(s for s, _ in spans_a.values()), max(e for _, e in spans_a.values())
    first_b, last_b = min(s for s, _ in spans_b.values()), max(e for _, e in spans_b.values())
    assert a.data.metrics["run/wall_seconds"] == pytest.approx(last_a - first_a)
    assert a.info.start_time == int(first_a * 1000)
    # before: the variant's wall time ran from the baseline's first build (a day and more)
    assert b.data.metrics["run/wall_seconds"] == pytest.approx(last_b - first_b)
    assert b.info.start_time == int(first_b * 1000) and b.info.end_time == int(last_b * 1000)
    children = client.search_runs(
        [b.info.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{b.info.run_id}'"
    )
    flags = {r.data.tags["runlib.key"]: r.data.tags[mlflow_track.REUSED_TAG] for r in children}
    assert flags == {key: "true" if key in reused else "false" for key in flags} and len(flags) == len(spans_b) + len(
        reused
    )

    # the baseline resynced again keeps its own span: its children were recorded first
    assert main(["track", "--resync", str(baseline)]) == 0
    assert parent_of(client, baseline).data.metrics["run/wall_seconds"] == pytest.approx(last_a - first_a)
