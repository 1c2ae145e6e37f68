"""The base of every stage's config: exactly what one stage instance reads, and so its cache key.

Each stage kind has one subclass (curate shard, curate source, tokenizer, tokenize, train phase,
eval, report), built from the spec and its plan by one function in `runlib.graph.configs`. The
stage code receives its config and its inputs' artifacts, never the RunSpec, so a key that hashes
the config covers what the stage reads by construction. A config never holds the run's name or
anything machine-local (paths of the work directory, the number of local cores).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, model_serializer

from runlib.util.keyed import omit_new_fields_at_default


class StageConfig(BaseModel):
    """What one stage instance reads; frozen, and hashed (as JSON) into the stage's key.

    A field named in KEYED_WHEN_SET is left out of the serialized config (and so of the key) while it has
    its default: a field added after keys existed (a content digest only some specs have) changes the keys
    of exactly the configs that set it (as runlib.spec.models.KeyedWhenSet does for spec sections)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
    KEYED_WHEN_SET: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _omit_new_fields_at_default(self, handler: Any) -> Any:
        return omit_new_fields_at_default(self, self.KEYED_WHEN_SET, handler(self))
