"""What this spec's built artifacts measured, where they are built: the token counts of its tokenize stages
(read from manifests) and the held-out loss its fit_ladder stage predicts (read from fit.json)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from runlib.audit import AuditResult, audit_loaded
from runlib.errors import UserError
from runlib.spec import LoadedSpec, load_spec
from runlib.spec.models import RunSpec


def _graph(spec: RunSpec) -> Any:
    """The spec's stage graph, or None when its inputs are not on this machine (nothing measured here)."""
    from runlib.graph.build import build_graph

    try:
        return build_graph(spec)
    except UserError:
        return None


def measured(spec: RunSpec) -> tuple[dict[str, int], dict[str, Any] | None]:
    """(measured_tokens, ladder_prediction) with the stage graph built at most once; nothing is imported
    beyond this module while no tokenize or fit_ladder artifact exists on this machine."""
    from runlib.store.settings import artifacts_dir

    want_tokens = (artifacts_dir() / "tokenize").is_dir()
    want_ladder = spec.ladder is not None and (artifacts_dir() / "fit_ladder").is_dir()
    if not (want_tokens or want_ladder):
        return {}, None  # nothing built on this machine: don't even import the graph (numpy, ~0.3 s)
    graph = _graph(spec)
    if graph is None:
        return {}, None
    return (measured_tokens(spec, graph) if want_tokens else {}), (
        ladder_prediction(spec, graph) if want_ladder else None
    )


def measured_tokens(spec: RunSpec, graph: Any = None) -> dict[str, int]:
    """Training tokens per source from built tokenize artifacts; sources not yet tokenized are absent."""
    from runlib.store.settings import artifacts_dir

    if graph is None:
        if not (artifacts_dir() / "tokenize").is_dir():
            return {}  # nothing tokenized on this machine: don't even import the graph (numpy, ~0.3 s)
        graph = _graph(spec)
        if graph is None:
            return {}
    from runlib.store.manifest import find_manifest

    parts = Counter(node.params["source"] for node in graph.of("tokenize"))
    built: dict[str, list[int]] = defaultdict(list)
    for node in graph.of("tokenize"):
        manifest = find_manifest(node.dir)
        if manifest is not None and "tokens_train" in manifest.counts:
            built[node.params["source"]].append(int(manifest.counts["tokens_train"]))
    # a source is measured once all its parts are built
    return {name: sum(tokens) for name, tokens in built.items() if len(tokens) == parts[name]}


def ladder_prediction(spec: RunSpec, graph: Any = None) -> dict[str, Any] | None:
    """The pooled held-out loss the spec's built fit_ladder artifact predicts for the spec's own run:
    {loss, low, high, resamples, source: "fit_ladder <key>", withheld}; None without a ladder or while the
    fit of this spec's rungs (its key: the rungs' configs and data) is not built. `withheld`: why the
    prediction is not to be used (its law is not determined by the rungs: runlib.ladder.fit.law_problems),
    or None."""
    from runlib.store.settings import artifacts_dir

    if spec.ladder is None or not (artifacts_dir() / "fit_ladder").is_dir():
        return None
    if graph is None:
        graph = _graph(spec)
        if graph is None:
            return None
    from runlib.ladder.stage import OVERALL
    from runlib.store.manifest import find_manifest

    for node in graph.of("fit_ladder"):
        fit_json = node.dir / "fit.json"
        if find_manifest(node.dir) is None or not fit_json.exists():
            continue  # the manifest is written last: without it the fit is not (fully) built
        try:
            overall = json.loads(fit_json.read_text())["fits"][OVERALL]
            prediction = overall["prediction"]
            problems = [str(p) for p in overall.get("problems", [])]
            return {
                "loss": float(prediction["value"]),
                "low": float(prediction["low"]),
                "high": float(prediction["high"]),
                "resamples": int(prediction["resamples"]),
                "source": f"fit_ladder {node.key}",
                "withheld": "; ".join(problems) or None,
            }
        except (ValueError, KeyError, TypeError) as exc:
            raise UserError(
                f"{fit_json}: no fits.{OVERALL}.prediction {{value, low, high, resamples}} ({exc}); "
                f"fix: rebuild it (delete {node.dir} and run the workflow again)"
            ) from exc
    return None


def audit_measured(loaded: LoadedSpec) -> AuditResult:
    """The audit `runlib audit` prints: with the token counts of the spec's tokenized sources in place of the
    declared ones, and its built ladder's prediction."""
    tokens, prediction = measured(loaded.spec)
    return audit_loaded(loaded, tokens, prediction)


def audit_spec_file(path: str | Path) -> AuditResult:
    """Load and audit a spec file as `runlib audit` does (audit_measured); raises SpecError for a spec that
    does not load."""
    return audit_measured(load_spec(path))
