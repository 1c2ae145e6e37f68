"""A spec being written by an importer or by `runlib propose`: values with their provenance, emitted as
commented YAML, then loaded with the real loader so that what is written is what the audit reads.

Each value carries a comment: where it came from (`n_layer [CFG]`), or `assumed: ...` with the reason
when the source does not say it. Pure: no file is read or written here.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from runlib.errors import SpecError, UserError
from runlib.spec import LoadedSpec, load_spec_text

TOP_ORDER = (
    "name",
    "description",
    "seed",
    "hardware",
    "budget",
    "model",
    "tokenizer",
    "data",
    "parallelism",
    "batch",
    "optimizer",
    "schedule",
    "precision",
    "tokens",
    "phases",
    "checkpoint",
    "monitor",
    "audit",
)
COMMENT_COLUMN = 34
_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_ .%-]*$|^[0-9][0-9.]*\s*(tokens|steps|sequences|%)$")
_RESERVED = {"true", "false", "null", "yes", "no", "on", "off", "~"}


class UnmappableConfig(UserError):
    """The source config says something a run spec cannot express (the CLI exits 2)."""


@dataclass(frozen=True)
class HardwareChoice:
    """`runlib import --devices/--nodes/--accelerator`: the hardware a file does not state, or states for
    another machine (Megatron-LM's GPT-3 175B example names one node for tensor 8 x pipeline 16)."""

    devices: int | None = None
    """Accelerators in all."""
    nodes: int | None = None
    accelerator: str | None = None

    def layout(self, per_node_default: int = 8) -> tuple[int, int] | None:
        """(nodes, devices per node) the options ask for; None without --devices or --nodes."""
        if self.devices is None and self.nodes is None:
            return None
        if self.devices is not None and self.nodes is not None:
            if self.devices % self.nodes:
                raise UserError(f"runlib import: --devices {self.devices} does not divide over --nodes {self.nodes}")
            return self.nodes, self.devices // self.nodes
        if self.devices is not None:
            nodes = max(1, -(-self.devices // per_node_default))
            if self.devices % nodes:
                raise UserError(
                    f"runlib import: --devices {self.devices}: give a multiple of {per_node_default} or --nodes"
                )
            return nodes, self.devices // nodes
        assert self.nodes is not None
        return self.nodes, per_node_default


@dataclass
class Draft:
    """Dotted path -> value, in insertion order, plus a comment per path and header lines."""

    values: dict[str, Any] = field(default_factory=dict)
    comments: dict[str, str] = field(default_factory=dict)
    header: list[str] = field(default_factory=list)
    choice: HardwareChoice = field(default_factory=HardwareChoice)
    """The importing command's hardware options, which the importers apply before sizing the batch."""

    def chosen_hardware(self, per_node_default: int = 8) -> int | None:
        """Set hardware.* from the command's options (runlib import --devices/--nodes/--accelerator); the world
        size they give, or None when they give no devices or nodes."""
        if self.choice.accelerator is not None:
            self.set("hardware.accelerator", self.choice.accelerator, "runlib import --accelerator")
        layout = self.choice.layout(per_node_default)
        if layout is None:
            return None
        nodes, per_node = layout
        self.set("hardware.nodes", nodes, "runlib import --nodes/--devices")
        self.set("hardware.devices_per_node", per_node, "runlib import --nodes/--devices")
        return nodes * per_node

    def set(self, path: str, value: Any, note: str | None = None) -> None:
        self.values[path] = value
        if note:
            self.comments[path] = note

    def assume(self, path: str, value: Any, why: str) -> None:
        """Set a value the source does not give, unless it is already set."""
        if path not in self.values:
            self.set(path, value, f"assumed: {why}")

    def get(self, path: str, default: Any = None) -> Any:
        return self.values.get(path, default)

    def has(self, path: str) -> bool:
        return path in self.values

    def nested(self) -> dict[str, Any]:
        root: dict[str, Any] = {}
        for path, value in self.values.items():
            parts = path.split(".")
            node = root
            for part in parts[:-1]:
                node = node.setdefault(part, {})
            node[parts[-1]] = value
        return root

    def to_yaml(self) -> str:
        tree = self.nested()
        lines = [f"# {h}" if h else "#" for h in self.header]
        for key in TOP_ORDER:
            if key in tree:
                _emit(lines, key, tree[key], key, 0, self.comments)
        for key in tree:
            if key not in TOP_ORDER:
                _emit(lines, key, tree[key], key, 0, self.comments)
        return "\n".join(lines) + "\n"


def scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        return text if ("." in text or "e" in text or "inf" in text or "nan" in text) else text + ".0"
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in _RESERVED and text == text.strip():
        return text
    return json.dumps(text)


def flow(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{scalar(k)}: {flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    return scalar(value)


def _line(text: str, comment: str | None) -> str:
    if not comment:
        return text
    return f"{text.ljust(COMMENT_COLUMN - 1)} # {comment}"


def _emit(lines: list[str], key: str, value: Any, path: str, indent: int, comments: dict[str, str]) -> None:
    pad = "  " * indent
    comment = comments.get(path)
    # a mapping whose children carry comments is written as a block, the rest in flow style
    if isinstance(value, dict) and value and any(p.startswith(path + ".") for p in comments):
        lines.append(_line(f"{pad}{key}:", comment))
        for k, v in value.items():
            _emit(lines, str(k), v, f"{path}.{k}", indent + 1, comments)
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        lines.append(_line(f"{pad}{key}:", comment))
        for i, item in enumerate(value):
            lines.append(_line(f"{pad}  - {flow(item)}", comments.get(f"{path}[{i}]")))
    else:
        lines.append(_line(f"{pad}{key}: {flow(value)}", comment))


def load_draft(text: str, file: str, what: str, comments: dict[str, str] | None = None) -> LoadedSpec:
    """The LoadedSpec of an emitted draft; a draft the schema refuses is the source's fault (exit 2).
    With the draft's `comments`, each refused value also names where it came from in the source."""

    def origin(path: str) -> str:
        note = (comments or {}).get(path)
        return f" (from {note})" if note else ""

    try:
        return load_spec_text(text, file)
    except SpecError as exc:
        raise UnmappableConfig(
            f"{what}: the values map to a spec the schema refuses:\n"
            + "\n".join(f"  {d.path}{origin(d.path)}: {d.message}" for d in exc.diagnostics)
        ) from None
