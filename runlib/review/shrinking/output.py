"""`runlib shrink`'s output: the shrunk spec's data with its comments (Shrunk), written as YAML."""

from __future__ import annotations

import io
import textwrap
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq


@dataclass
class Shrunk:
    data: dict[str, Any]  # the shrunk spec as YAML data
    header: list[str]  # comment lines for the top of the file
    source_notes: dict[str, str] = field(default_factory=dict)  # source name -> comment above it
    task_notes: dict[int, str] = field(default_factory=dict)  # index in eval.tasks -> comment above it


def _commented(obj: Any) -> Any:
    """Mappings as ruamel's CommentedMap (which carry comments), recursively."""
    if isinstance(obj, dict):
        cm = CommentedMap()
        for k, v in obj.items():
            cm[k] = _commented(v)
        return cm
    if isinstance(obj, list):
        return [_commented(v) for v in obj]
    return obj


def to_yaml(shrunk: Shrunk) -> str:
    """The shrunk spec as YAML: block style, leaf mappings and lists in flow style, the comments in place."""
    doc = _commented(shrunk.data)
    doc.yaml_set_start_comment("\n".join(wrap(shrunk.header)))
    sources = doc["data"]["sources"]
    for name, note in shrunk.source_notes.items():
        sources.yaml_set_comment_before_after_key(name, before=note, indent=4)
    if shrunk.task_notes:
        tasks = CommentedSeq(doc["eval"]["tasks"])
        doc["eval"]["tasks"] = tasks
        for i, note in shrunk.task_notes.items():
            tasks.yaml_set_comment_before_after_key(i, before="\n".join(wrap([note], 104)), indent=4)
    yaml = YAML()
    yaml.default_flow_style = None
    yaml.width = 120
    yaml.indent(mapping=2, sequence=4, offset=2)
    out = io.StringIO()
    yaml.dump(doc, out)
    return out.getvalue()


def wrap(lines: list[str], width: int = 110) -> list[str]:
    """Comment lines wrapped at `width`, the continuations indented by two spaces."""
    out = []
    for line in lines:
        out += textwrap.wrap(line, width, subsequent_indent="  ") or [""]
    return out
