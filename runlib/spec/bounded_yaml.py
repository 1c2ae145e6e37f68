"""YAML composition with limits, so that a hostile spec is refused in milliseconds, not minutes.

ruamel.yaml has no limits of its own that help here (measured with ruamel.yaml 0.19.1, pure Python):
- its scanner keeps one possible simple key per flow level and walks all of them for every token
  (`Scanner.stale_possible_simple_keys`, `next_possible_simple_key`), and looks up to 1024
  characters ahead for the `:` of a simple key: 1,000 nested `[` take 2.7 s, 8,000 take 83 s, and
  100,000 end in a RecursionError of the (recursive) composer after minutes;
- its composer shares an aliased node instead of copying it, but anything that walks the tree
  (here `loader._to_data`) expands every alias: a 2.5 KB "billion laughs" document (9 levels of
  10 aliases) is 10^9 values, and `&a [*a]` is a cycle;
- pure-Python scanning costs ~100 us per value, so a large document is slow on its own.

The limits below are checked where the work happens, before it grows: nesting depth in the scanner
(a flow `[`/`{` or a new block indentation level past MAX_NESTING_DEPTH stops it at that
character), values, aliases and alias expansion in the composer (at the alias that crosses a limit,
with its line and column). Each raises LimitExceeded, which the loader reports as SPEC003. An explicit
tag on any node raises ExplicitTag (SPEC001) in the composer, before the node is built. The
limits sit far above any real spec: the largest committed spec (tests/fixtures/spec-reference.yaml)
is 8.7 KB, 408 values, 7 levels deep, without aliases.
"""

from __future__ import annotations

from typing import Any

from ruamel.yaml.composer import Composer
from ruamel.yaml.events import AliasEvent
from ruamel.yaml.nodes import MappingNode, SequenceNode
from ruamel.yaml.scanner import RoundTripScanner

MAX_DOCUMENT_BYTES = 128 * 1024
"""Size of a spec file (the largest committed spec is 8.7 KB); checked before anything is parsed."""

MAX_NESTING_DEPTH = 32
"""Nested mappings and sequences, block and flow together, aliases expanded (a spec needs 7)."""

MAX_VALUES = 2_000
"""Values (scalars, mappings, sequences; keys count) after expanding aliases: the reference spec has
408, and 2,000 values compose in about 0.3 s."""

MAX_ALIASES = 1_000
"""Alias uses (`*name`) in one document."""

MAX_NUMBER_CHARS = 40
"""Characters of one integer or float scalar: int64 needs 19 digits, a float repr 24 characters.
Python refuses int() of more than 4,300 digits with a ValueError (sys.get_int_max_str_digits)."""


MAX_KEY_CHARS = 200
"""Characters of a mapping key: keys are field names and the names of sources, phases and codes."""


class LimitExceeded(Exception):
    """A document over one of the limits; `line` and `col` are 1-based (None: the whole document)."""

    code = "SPEC003"

    def __init__(self, message: str, line: int | None = None, col: int | None = None):
        super().__init__(message)
        self.message, self.line, self.col = message, line, col

    @classmethod
    def at(cls, mark: Any, message: str) -> LimitExceeded:
        return cls(message, mark.line + 1, mark.column + 1)


class ExplicitTag(LimitExceeded):
    """A node with an explicit tag (`!!str 5`, `!!python/object/apply:os.system [...]`, `!custom`).

    A spec holds the plain values of YAML 1.2's core schema (mappings, sequences, strings, numbers,
    booleans, null; YAML 1.2.2 section 10.3), each resolved from how it is written. A tag changes what
    a value is (`!!str 5` is the text "5"; PyYAML's unsafe loaders call a function for
    `!!python/object/apply`), so the loader refuses every explicit tag rather than accept some: the
    file says the same thing to every YAML reader."""

    code = "SPEC001"


def _too_deep(depth: int) -> str:
    return (
        f"nested {depth} levels deep: a spec is at most {MAX_NESTING_DEPTH} levels of mappings and sequences "
        "(7 are needed); remove the extra nesting"
    )


class BoundedScanner(RoundTripScanner):
    """The round-trip scanner, stopping at the character that opens one level too many."""

    def _depth(self) -> int:
        return len(self.indents) + self.flow_level

    def fetch_flow_collection_start(self, TokenClass: Any, to_push: str) -> None:  # noqa: N803 (ruamel's name)
        if self._depth() + 1 > MAX_NESTING_DEPTH:
            raise LimitExceeded.at(self.reader.get_mark(), _too_deep(self._depth() + 1))
        super().fetch_flow_collection_start(TokenClass, to_push)

    def add_indent(self, column: int) -> bool:
        if self.indent < column and self._depth() + 1 > MAX_NESTING_DEPTH:
            raise LimitExceeded.at(self.reader.get_mark(), _too_deep(self._depth() + 1))
        return super().add_indent(column)


def short_tag(tag: str) -> str:
    """`!!str` for tag:yaml.org,2002:str; other tags as written, cut to 60 characters."""
    tag = "!!" + tag.removeprefix("tag:yaml.org,2002:") if tag.startswith("tag:yaml.org,2002:") else tag
    return tag if len(tag) <= 60 else tag[:57] + "..."


class BoundedComposer(Composer):
    """The composer, counting values with aliases expanded and refusing recursive aliases.

    For every node composed it records the number of values it expands to and its expanded height,
    so an alias costs one lookup: the limits are checked at the alias, with its position, before
    anything walks the expansion."""

    def __init__(self, loader: Any = None) -> None:
        super().__init__(loader)
        self.warn_double_anchors = False  # YAML allows redefining an anchor; a warning per reuse is noise
        self._values = 0
        self._aliases = 0
        self._size: dict[int, int] = {}  # id(node) -> values it expands to; present once composed
        self._height: dict[int, int] = {}  # id(node) -> expanded nesting height (a scalar: 0)

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.parser.peek_event()
        tag = getattr(event, "tag", None)
        if tag is not None and str(tag) != "!":  # "!": the non-specific tag of a quoted scalar
            raise ExplicitTag.at(
                event.start_mark,
                f"explicit YAML tag {short_tag(str(tag))}: a spec holds plain values (text, numbers, true/false, "
                "lists, mappings) and no tags; remove the tag (quote a value to make it text)",
            )
        if self.parser.check_event(AliasEvent):
            event = self.parser.peek_event()
            name = event.anchor
            target = self.anchors.get(name)
            if target is not None:
                self._check_alias(event, name, target)
            return super().compose_node(parent, index)  # an undefined alias: ruamel's ComposerError
        start = self._values
        node = super().compose_node(parent, index)
        self._values += 1
        if self._values > MAX_VALUES:
            raise LimitExceeded.at(
                node.start_mark,
                f"more than {MAX_VALUES:,} values in the spec (a spec has a few hundred): "
                "split it or remove what is not needed",
            )
        self._size[id(node)] = self._values - start
        if isinstance(node, MappingNode):
            children = [child for pair in node.value for child in pair]
        elif isinstance(node, SequenceNode):
            children = node.value
        else:
            children = []
        self._height[id(node)] = 1 + max((self._height[id(c)] for c in children), default=-1)
        return node

    def _check_alias(self, event: Any, name: str, target: Any) -> None:
        if id(target) not in self._size:  # still being composed: the alias is inside its own anchor
            raise LimitExceeded.at(
                event.start_mark,
                f"alias *{name} refers to the node that contains it (&{name} at line "
                f"{target.start_mark.line + 1}): a recursive alias has no finite value; write the value out",
            )
        self._aliases += 1
        if self._aliases > MAX_ALIASES:
            raise LimitExceeded.at(
                event.start_mark, f"more than {MAX_ALIASES:,} aliases (*name) in the spec: write the values out"
            )
        self._values += self._size[id(target)]
        if self._values > MAX_VALUES:
            raise LimitExceeded.at(
                event.start_mark,
                f"alias *{name} ({self._size[id(target)]:,} values) makes the spec expand to more than "
                f"{MAX_VALUES:,} values (nested aliases multiply: a 'billion laughs' document); write the values out",
            )
        depth = self.depth + self._height[id(target)]  # self.depth: the collections open around the alias
        if depth > MAX_NESTING_DEPTH:
            raise LimitExceeded.at(event.start_mark, _too_deep(depth) + f" (through alias *{name})")


def compose_bounded(text: str) -> Any:
    """The node tree of one YAML document, or LimitExceeded; ruamel's YAMLError for bad YAML."""
    from ruamel.yaml import YAML

    yaml = YAML(typ="rt", pure=True)
    yaml.Scanner = BoundedScanner
    yaml.Composer = BoundedComposer
    return yaml.compose(text)
