"""Build a check's case spec: the base spec (cases_base.yaml) with a patch of dotted paths applied."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path

from runlib.audit.registry import DELETE
from runlib.spec.loader import parse_yaml

BASE_SPEC = Path(__file__).with_name("cases_base.yaml")
_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


@cache
def _base_data() -> dict[str, object]:
    data, _ = parse_yaml(BASE_SPEC.read_text(), str(BASE_SPEC))
    if not isinstance(data, dict):
        raise TypeError(f"{BASE_SPEC}: not a mapping")
    return data


def split_path(path: str) -> list[str | int]:
    return [name if name else int(index) for name, index in _PART.findall(path)]


def _child(node: object, part: str | int, path: str) -> object:
    """node[part], a new mapping when a mapping has no such key."""
    if isinstance(node, dict) and isinstance(part, str):
        return node.setdefault(part, {})
    if isinstance(node, list) and isinstance(part, int):
        return node[part]
    raise KeyError(f"{path}: no {part!r} in {type(node).__name__}")


def apply_patch(data: Mapping[str, object], patch: Mapping[str, object]) -> dict[str, object]:
    """A deep copy of `data` with each dotted path set (intermediate mappings are created); the value DELETE
    removes the key."""
    out = copy.deepcopy(dict(data))
    for path, value in patch.items():
        parts = split_path(path)
        node: object = out
        for part in parts[:-1]:
            node = _child(node, part, path)
        last = parts[-1]
        if isinstance(node, dict) and isinstance(last, str):
            if value == DELETE:
                del node[last]
            else:
                node[last] = copy.deepcopy(value)
        elif isinstance(node, list) and isinstance(last, int):
            if value == DELETE:
                del node[last]
            else:
                node[last] = copy.deepcopy(value)
        else:
            raise KeyError(f"{path}: cannot set {last!r} in {type(node).__name__}")
    return out


def case_data(patch: Mapping[str, object]) -> dict[str, object]:
    """The base spec's data with the patch applied: a check case's spec (validate_data makes it a RunSpec)."""
    return apply_patch(_base_data(), patch)
