"""Token counts measured by this spec's tokenize stages, where they are built (read from manifests)."""

from __future__ import annotations

from runlib.errors import UserError
from runlib.spec.models import RunSpec


def measured_tokens(spec: RunSpec) -> dict[str, int]:
    """Training tokens per source from built tokenize artifacts; sources not yet tokenized are absent."""
    from runlib.workflow.settings import artifacts_dir

    if not (artifacts_dir() / "tokenize").is_dir():
        return {}  # nothing tokenized on this machine: don't even import the graph (numpy, ~0.3 s)
    from runlib.workflow.graph import build_graph
    from runlib.workflow.manifest import find_manifest

    try:
        graph = build_graph(spec)
    except UserError:
        return {}  # inputs not on this machine: nothing measured here
    out = {}
    for node in graph.of("tokenize"):
        manifest = find_manifest(node.dir)
        if manifest is not None:
            counts = manifest.counts
            if "tokens_train" in counts:
                out[node.params["source"]] = int(counts["tokens_train"])
    return out
