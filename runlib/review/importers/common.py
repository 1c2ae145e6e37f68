"""What every importer fills in when its source does not say it: each value stated, each one `assumed:`.

The defaults are the ones a reader would guess and the audit can check: H100s at 40% MFU (Llama 3,
arXiv 2407.21783, Table 4: 38-43% BF16 MFU), bf16 with fp32 master weights, one foundation phase over
one placeholder source declared as a single pass over the run's tokens (so MIX003 stays silent unless
the source says how much data there is), and a log-only spike policy (it changes no update).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from runlib.review.importers.draft import Draft, UnmappableConfig
from runlib.spec.models import MAX_NAME_CHARS

NAME_CHARS = re.compile(r"[^a-z0-9._-]+")


def spec_name(text: str) -> str:
    """A spec name (lowercase, [a-z0-9._-], starting with a letter or digit) from free text."""
    # cut to the schema's length: a 5,000-character `dataset` became a source key YAML cannot write as a
    # plain key (1,024 characters at most), reported as "YAML syntax error: mapping values are not allowed"
    name = NAME_CHARS.sub("-", text.lower()).strip("-._")[:MAX_NAME_CHARS].strip("-._")
    return name or "imported"


def placeholder_source(draft: Draft, name: str, domain: str, tokens: int | None, why_tokens: str) -> None:
    """A file source at data/raw/<name>/ (a placeholder path: put the corpus there or edit it)."""
    draft.set(f"data.sources.{name}.domain", domain)
    draft.set(
        f"data.sources.{name}.input",
        {"format": "jsonl", "path": f"data/raw/{name}/*.jsonl"},
        "placeholder path: put the corpus there (or point to it) before running",
    )
    if tokens is not None:
        draft.set(f"data.sources.{name}.tokens", int(tokens), why_tokens)


def fill_defaults(draft: Draft, run_tokens: int, source: str = "web") -> None:
    draft.assume("seed", 0, "not given in the source")
    draft.assume("hardware.accelerator", "h100-sxm", "the source names no accelerator")
    draft.assume("hardware.nodes", 1, "the source gives no node count")
    draft.assume("hardware.devices_per_node", 8, "8-GPU nodes")
    draft.assume("hardware.mfu", 0.4, "planning MFU; Llama 3 reports 38-43% (arXiv 2407.21783, Table 4)")
    if not any(p.startswith("data.sources.") for p in draft.values):
        placeholder_source(
            draft,
            source,
            "web",
            run_tokens,
            "assumed: one pass over the run's tokens (the source gives no corpus size)",
        )
    sources = sorted({p.split(".")[2] for p in draft.values if p.startswith("data.sources.")})
    if not draft.has("phases"):
        draft.set(
            "phases",
            [
                {
                    "name": "pretrain",
                    "kind": "foundation",
                    "tokens": "100%",
                    "mixture": {s: round(1.0 / len(sources), 6) for s in sources},
                }
            ],
        )
        draft.comments["phases[0]"] = "assumed: one foundation phase over the whole run"
    draft.assume("tokens", int(run_tokens), "not given in the source")
    if draft.get("precision.loss_scaling") in ("dynamic", "static"):
        draft.assume(
            "checkpoint.state",
            ["model", "optimizer", "scheduler", "rng", "data", "scaler"],
            "everything an exact resume needs, the loss scaler included",
        )
    draft.assume(
        "monitor.spike",
        {"zscore": 5.0, "window": 200, "action": "log"},
        "log loss spikes only (changes no update; the source has no spike policy)",
    )


# --- the source's values, checked before any is mapped ---------------------------

MAX_SOURCE_DEPTH = 16
"""Nesting of a config's tables, objects and lists: HF config.json and torchtitan TOML files nest 3."""

MAX_SOURCE_NUMBER = 10**15
"""Largest magnitude of a number in a config: a token count of a real run is ~10^13; anything larger
(1e300, a 5,000-digit integer) is a typo or an attack, and arithmetic on it overflows a float."""


def whole(value: Any, file: str, field: str) -> int:
    """A count read from a config: an integer, or a float without a fraction (4096.0). int() of 4096.5
    gave 4096 without a word: a model other than the config's."""
    if isinstance(value, float) and not value.is_integer():
        raise UnmappableConfig(f"{file}: {field} = {value!r} is not a whole number; write the count the run used")
    if isinstance(value, bool):
        raise UnmappableConfig(f"{file}: {field} = {value!r} is not a number")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise UnmappableConfig(f"{file}: {field} = {str(value)[:40]!r} is not a whole number") from None


def check_source_values(value: Any, file: str, field: str = "") -> None:
    """UnmappableConfig naming the file and the field when a value of the parsed config is not finite,
    is larger than MAX_SOURCE_NUMBER, or sits more than MAX_SOURCE_DEPTH levels deep. Iterative, so a
    deep structure cannot exhaust the stack here."""
    stack: list[tuple[Any, str, int]] = [(value, field, 0)]
    while stack:
        item, where, depth = stack.pop()
        shown = where or "the top level"
        if depth > MAX_SOURCE_DEPTH:
            raise UnmappableConfig(
                f"{file}: {shown} is nested more than {MAX_SOURCE_DEPTH} levels deep; a config is a few levels: "
                "is this the right file?"
            )
        if isinstance(item, dict):
            stack.extend((v, f"{where}.{k}" if where else str(k), depth + 1) for k, v in item.items())
        elif isinstance(item, (list, tuple)):
            stack.extend((v, f"{where}[{i}]", depth + 1) for i, v in enumerate(item))
        elif isinstance(item, bool):
            continue
        elif isinstance(item, float) and not math.isfinite(item):
            raise UnmappableConfig(f"{file}: {shown} = {item} is not a finite number; write the value the run used")
        elif isinstance(item, (int, float)) and abs(item) > MAX_SOURCE_NUMBER:
            text = f"{item:.3g}" if isinstance(item, float) or item.bit_length() > 64 else str(item)
            raise UnmappableConfig(
                f"{file}: {shown} = {text} is larger than any real run's ({MAX_SOURCE_NUMBER:.0e}); "
                "write the value the run used"
            )


def parse_json_config(text: str, file: str, what: str = "the config") -> Any:
    """json.loads refusing what Python's json accepts but no config holds: NaN/Infinity, integers past
    MAX_SOURCE_NUMBER (json would build a 4,300-digit one, then raise ValueError past that), nesting
    past Python's recursion limit (RecursionError); each an UnmappableConfig naming the file."""

    def constant(name: str) -> Any:
        raise UnmappableConfig(f"{file}: {what} holds {name}, which is not a JSON number; write a finite value")

    def integer(digits: str) -> int:
        if len(digits.lstrip("-")) > 16:
            raise UnmappableConfig(
                f"{file}: {what} holds an integer of {len(digits.lstrip('-')):,} digits; no config value has "
                "more than 16: write the value the run used"
            )
        return int(digits)

    try:
        data = json.loads(text, parse_constant=constant, parse_int=integer)
    except json.JSONDecodeError as exc:
        raise UnmappableConfig(f"{file}:{exc.lineno}:{exc.colno}: {what} is not valid JSON ({exc.msg})") from None
    except RecursionError:
        raise UnmappableConfig(
            f"{file}: {what} is nested too deeply to read; a config is a few levels: is this the right file?"
        ) from None
    check_source_values(data, file)
    return data
