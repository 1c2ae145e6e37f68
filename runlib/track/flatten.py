"""Nested dicts and lists -> flat MLflow params: dotted keys ("model.d_model", "phases.0.tokens")."""

from __future__ import annotations

import json
import re
from typing import Any

# MLflow's limits (mlflow/utils/validation.py, MLflow 3.x), spelled out so that importing this module
# does not import mlflow (1.5 CPU-s): the Snakefile's process reads the track stamps' paths through
# runlib.track; tests/track/test_mlflow_track.py checks that they equal the installed MLflow's.
MAX_PARAM_VAL_LENGTH = 6000
MAX_ENTITY_KEY_LENGTH = 250

_BAD_KEY_CHARS = re.compile(r"[^\w.\- :]")  # MLflow param/metric names: alphanumerics, _ . - space colon


def clean_key(key: str) -> str:
    """A valid MLflow param/metric name: other characters (slashes included) become "_"."""
    return _BAD_KEY_CHARS.sub("_", key)[:MAX_ENTITY_KEY_LENGTH]


def stringify(value: object, limit: int = MAX_PARAM_VAL_LENGTH) -> str:
    """JSON spelling for null/booleans/empty containers, str() otherwise; cut to MLflow's value limit."""
    if value is None or isinstance(value, bool):
        text = json.dumps(value)
    elif isinstance(value, (dict, list, tuple)) and not value:
        text = "{}" if isinstance(value, dict) else "[]"
    else:
        text = str(value)
    if len(text) > limit:
        marker = "...[truncated]"
        text = text[: limit - len(marker)] + marker
    return text


def _walk(value: object, key: str, out: dict[str, str]) -> None:
    if isinstance(value, dict) and value:
        for k, v in value.items():
            _walk(v, f"{key}.{k}" if key else str(k), out)
    elif isinstance(value, (list, tuple)) and value:
        for i, v in enumerate(value):
            _walk(v, f"{key}.{i}" if key else str(i), out)
    else:
        out[clean_key(key)] = stringify(value)


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """{"model": {"d_model": 768}, "phases": [{"tokens": 5}]} -> {"model.d_model": "768", "phases.0.tokens": "5"}.

    `prefix` ("spec.") is prepended verbatim. Empty dicts and lists are kept as "{}" and "[]" so no
    field silently disappears; None is "null" and booleans "true"/"false" (as in the spec's YAML).
    """
    out: dict[str, str] = {}
    for k, v in d.items():
        _walk(v, f"{prefix}{k}", out)
    return out
