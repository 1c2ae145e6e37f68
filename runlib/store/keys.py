"""Stage keys: a hash of exactly what a stage reads.

key = sha256(canonical JSON of {stage, code version, the stage's config, the keys of its inputs})[:16]; the
code version is the stage kind's (runlib.graph.registry).
The config (runlib.store.stageconfig.StageConfig, built by runlib.graph.configs) is all the stage code
receives besides its inputs' artifacts, so the key covers what the stage reads by construction. A
config never holds the run's name or anything machine-local, so renaming a run or editing its
schedule keeps the curated data, and two specs with the same curation settings share it.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runlib.store.stageconfig import StageConfig


def canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def key_payload(stage: str, version: int, config: StageConfig, input_keys: dict[str, str]) -> dict[str, Any]:
    """What a key hashes: the stage, its code version (runlib.graph.registry), its config as JSON, its inputs'
    keys by role."""
    return {
        "stage": stage,
        "version": version,
        "config": config.model_dump(mode="json"),
        "inputs": dict(input_keys),
    }


def stage_key(stage: str, version: int, config: StageConfig, input_keys: dict[str, str]) -> str:
    return hashlib.sha256(canonical(key_payload(stage, version, config, input_keys)).encode()).hexdigest()[:16]


def spec_key(spec: Any) -> str:
    """Identity of a whole run spec (all its semantics, not its name): names the MLflow parent run."""
    data = spec.model_dump(mode="json")
    data.pop("name", None)
    data.pop("description", None)
    return hashlib.sha256(canonical(data).encode()).hexdigest()[:12]
