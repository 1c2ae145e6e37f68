"""Build a check's case spec: the base spec (cases_base.yaml) with a patch of dotted paths applied."""

from __future__ import annotations

import copy
import re
from functools import cache
from pathlib import Path
from typing import Any

from runlib.audit.registry import DELETE

BASE_SPEC = Path(__file__).with_name("cases_base.yaml")
_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


@cache
def _base_data() -> dict[str, Any]:
    from runlib.spec.loader import parse_yaml

    data, _ = parse_yaml(BASE_SPEC.read_text(), str(BASE_SPEC))
    return data


def split_path(path: str) -> list[str | int]:
    return [name if name else int(index) for name, index in _PART.findall(path)]


def apply_patch(data: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of `data` with each dotted path set (intermediate mappings are created)."""
    out = copy.deepcopy(data)
    for path, value in patch.items():
        parts = split_path(path)
        node: Any = out
        for part in parts[:-1]:
            if isinstance(part, str) and part not in node:
                node[part] = {}
            node = node[part]
        last = parts[-1]
        if value == DELETE:
            del node[last]
        else:
            node[last] = copy.deepcopy(value)
    return out


def case_data(patch: dict[str, Any]) -> dict[str, Any]:
    return apply_patch(_base_data(), patch)
