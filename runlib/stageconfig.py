"""The base of every stage's config: exactly what one stage instance reads, and so its cache key.

Each stage kind has one subclass (curate shard, curate source, tokenizer, tokenize, train phase,
eval, report), built from the spec and its plan by one function in `runlib.workflow.configs`. The
stage code receives its config and its inputs' artifacts, never the RunSpec, so a key that hashes
the config covers what the stage reads by construction. A config never holds the run's name or
anything machine-local (paths of the work directory, the number of local cores).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StageConfig(BaseModel):
    """What one stage instance reads; frozen, and hashed (as JSON) into the stage's key."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
