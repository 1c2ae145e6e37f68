"""Stage keys: a hash of exactly what a stage reads.

key = sha256(canonical JSON of {stage, code version, the spec projection the stage reads, the keys
of its inputs})[:16]. The projection never holds the run's name, anything machine-local, or spec
fields the stage does not read, so renaming a run or editing its schedule keeps the curated data,
and two specs with the same curation settings share it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

# Bump a stage's version when its code changes what it writes.
STAGE_VERSIONS: dict[str, int] = {
    "curate_shard": 1,
    "curate_source": 1,
    "train_tokenizer": 1,
    "tokenize": 1,
    "train_phase": 1,
    "eval_phase": 1,
}


def canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def stage_key(stage: str, projection: dict[str, Any], input_keys: dict[str, str]) -> str:
    payload = {"stage": stage, "version": STAGE_VERSIONS[stage], "projection": projection, "inputs": input_keys}
    return hashlib.sha256(canonical(payload).encode()).hexdigest()[:16]


def spec_key(spec: Any) -> str:
    """Identity of a whole run spec (all its semantics, not its name): names the MLflow parent run."""
    data = spec.model_dump(mode="json")
    data.pop("name", None)
    data.pop("description", None)
    return hashlib.sha256(canonical(data).encode()).hexdigest()[:12]
