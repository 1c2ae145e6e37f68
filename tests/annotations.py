"""Reading the spec models' type annotations in the schema-walking tests."""

from __future__ import annotations

import types
import typing
from typing import Any, Union


def strip_optional(annotation: Any) -> Any:
    """The type under Annotated[...] and Optional[...] (a union of several types is returned as is)."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            rest = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(rest) != 1:
                return annotation
            annotation = rest[0]
        else:
            return annotation
