"""Fields added after stage keys existed: left out of a model's serialized form while at their default.

A key hashes a config's JSON, so a new field serialized at its default would change every existing key and
rebuild every artifact. Leaving it out while at its default changes the keys of exactly the specs that set it.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel

_Data = TypeVar("_Data")


def omit_new_fields_at_default(model: BaseModel, names: frozenset[str], data: _Data) -> _Data:
    """`data` (model's serialized form) without the fields in `names` whose value is their default."""
    if isinstance(data, dict):
        for name in names:
            if name in data and getattr(model, name) == type(model).model_fields[name].default:
                del data[name]
    return data
