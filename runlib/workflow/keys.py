"""Stage keys: a hash of exactly what a stage reads.

key = sha256(canonical JSON of {stage, code version, the stage's config, the keys of its inputs})[:16].
The config (runlib.stageconfig.StageConfig, built by runlib.workflow.configs) is all the stage code
receives besides its inputs' artifacts, so the key covers what the stage reads by construction. A
config never holds the run's name or anything machine-local, so renaming a run or editing its
schedule keeps the curated data, and two specs with the same curation settings share it.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runlib.stageconfig import StageConfig

# Bump a stage's version when its code changes what it writes.
# 3: manifests hold XXH3-128 file digests and their own checksum; an artifact built before has
# neither, would fail verification on every read, and is rebuilt under its new key instead.
# +1 each: manifests carry an HMAC-SHA256 and the digests of the inputs they read; one
# built before has neither, is refused on every read, and is rebuilt under its new key instead.
STAGE_VERSIONS: dict[str, int] = {
    "curate_shard": 5,
    "curate_source": 5,
    "train_tokenizer": 4,
    "tokenize": 4,
    "train_phase": 4,
    "eval_phase": 5,
    "fit_ladder": 3,
}


def canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def key_payload(stage: str, config: StageConfig, input_keys: dict[str, str]) -> dict[str, Any]:
    """What a key hashes: the stage, its code version, its config as JSON, its inputs' keys by role."""
    return {
        "stage": stage,
        "version": STAGE_VERSIONS[stage],
        "config": config.model_dump(mode="json"),
        "inputs": dict(input_keys),
    }


def stage_key(stage: str, config: StageConfig, input_keys: dict[str, str]) -> str:
    return hashlib.sha256(canonical(key_payload(stage, config, input_keys)).encode()).hexdigest()[:16]


def spec_key(spec: Any) -> str:
    """Identity of a whole run spec (all its semantics, not its name): names the MLflow parent run."""
    data = spec.model_dump(mode="json")
    data.pop("name", None)
    data.pop("description", None)
    return hashlib.sha256(canonical(data).encode()).hexdigest()[:12]
