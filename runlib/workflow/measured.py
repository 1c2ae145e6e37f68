"""Token counts measured by this spec's tokenize stages, where they are built (read from manifests)."""

from __future__ import annotations

import json

from runlib.errors import UserError
from runlib.spec.models import RunSpec


def measured_tokens(spec: RunSpec) -> dict[str, int]:
    """Training tokens per source from built tokenize artifacts; sources not yet tokenized are absent."""
    from runlib.workflow.graph import build_graph
    from runlib.workflow.settings import artifacts_dir

    if not (artifacts_dir() / "tokenize").is_dir():
        return {}  # nothing tokenized on this machine: don't even glob the inputs
    try:
        graph = build_graph(spec)
    except UserError:
        return {}  # inputs not on this machine: nothing measured here
    out = {}
    for node in graph.of("tokenize"):
        path = node.manifest_path
        if path.exists():
            counts = json.loads(path.read_text()).get("counts", {})
            if "tokens_train" in counts:
                out[node.params["source"]] = int(counts["tokens_train"])
    return out
