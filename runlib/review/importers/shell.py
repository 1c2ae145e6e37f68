"""The argument list a launch script passes to its training program, resolved as bash would resolve it,
without running anything: the words of the script's training command (`torchrun ... pretrain_gpt.py ...`).

What is resolved (Bash Reference Manual, "Shell Expansions"): assignments `NAME=value` (also after
`export`, `local`, `declare`), arrays `NAME=( ... )` and appends `NAME+=( ... )` over several lines,
`$NAME`, `${NAME}`, `${NAME:-default}`, `${NAME-default}` and `${NAME:=default}`, positional parameters
(`$1`, `${1:-default}`: the script is read as run without arguments), `${NAME[@]}` and `${NAME[*]}`,
integer arithmetic `$(( ... ))` over numbers and variables, single and double quotes and backslashes,
word splitting of unquoted expansions (a quoted "${A[@]}" keeps each element one word), and
`if`/`elif`/`else`/`fi` on `[[ ]]` / `[ ]` string tests (`==`, `=`, `!=`, `-z`, `-n`, joined by `||` /
`&&`, negated by `!`); a file test (`-f`, `-d`, `-e`) is taken as true (the script's own checks that its
files exist). A command substitution (`$( )`, backquotes) in an assignment or in the training command is
refused with its line: its value is what running the script would print. Other commands (mkdir, echo, set)
are skipped, substitutions and all.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from runlib.review.importers.draft import UnmappableConfig

MAX_SCRIPT_CHARS = 256 * 1024
NAME = r"[A-Za-z_][A-Za-z0-9_]*"
ASSIGNMENT = re.compile(rf"^({NAME})(\+?)=")


@dataclass
class Part:
    """A piece of a word: its text and whether it was quoted (a quoted expansion is never split)."""

    text: str
    quoted: bool
    expand: bool  # $ expansions apply (not inside single quotes)


@dataclass
class Word:
    parts: list[Part] = field(default_factory=list)
    line: int = 0
    array: list[Word] | None = None  # NAME=( ... ): the words between the parentheses

    @property
    def raw(self) -> str:
        return "".join(p.text for p in self.parts)


def _lex(text: str, file: str) -> list[list[Word]]:
    """The script's simple commands, each a list of words (an array literal is one word holding its words)."""
    commands: list[list[Word]] = []
    current: list[Word] = []
    i, line, n = 0, 1, len(text)
    stack: list[list[Word]] = []  # array literals being read

    def words() -> list[Word]:
        return stack[-1] if stack else current

    def end_command() -> None:
        nonlocal current
        if current:
            commands.append(current)
        current = []

    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n and text[i + 1] == "\n":
            i, line = i + 2, line + 1
            continue
        if c == "\n":
            line += 1
            i += 1
            if not stack:
                end_command()
            continue
        if c in " \t\r":
            i += 1
            continue
        if c == "#":
            while i < n and text[i] != "\n":
                i += 1
            continue
        if c == ";" and not stack:
            end_command()
            i += 1
            continue
        if c == ")" and stack:
            array = stack.pop()
            words()[-1].array = array
            i += 1
            continue
        if text.startswith(("||", "&&"), i) and not stack:
            current.append(Word([Part(text[i : i + 2], False, False)], line))
            i += 2
            continue
        word, i, line = _word(text, i, line, file)
        words().append(word)
        if i < n and text[i] == "(" and ASSIGNMENT.match(word.raw) and word.raw.endswith("="):
            stack.append([])  # NAME=( ... ): the array's words follow
            i += 1
    end_command()
    return commands


def _word(text: str, i: int, line: int, file: str) -> tuple[Word, int, int]:
    """One word from i: its quoted and unquoted parts; stops at whitespace, ; or ) outside quotes."""
    word = Word(line=line)
    n = len(text)
    buf: list[str] = []

    def flush(quoted: bool = False, expand: bool = True) -> None:
        if buf:
            word.parts.append(Part("".join(buf), quoted, expand))
            buf.clear()

    while i < n:
        c = text[i]
        if c in " \t\r\n;)" or text.startswith(("||", "&&"), i):
            break
        if c == "(" and buf and "".join(buf).endswith("="):
            break  # an array literal starts
        if c == "\\" and i + 1 < n:
            flush()
            word.parts.append(Part(text[i + 1], True, False))
            i += 2
            continue
        if c == "'":
            flush()
            end = text.find("'", i + 1)
            if end < 0:
                raise UnmappableConfig(f"{file}:{line}: a single quote is not closed")
            word.parts.append(Part(text[i + 1 : end], True, False))
            line += text.count("\n", i, end)
            i = end + 1
            continue
        if c == '"':
            flush()
            j = i + 1
            inner: list[str] = []
            while j < n and text[j] != '"':
                if text[j] == "\\" and j + 1 < n and text[j + 1] in '"\\$`\n':
                    inner.append(text[j + 1] if text[j + 1] != "\n" else "")
                    j += 2
                    continue
                if text.startswith("$(", j) or text[j] == "`":
                    k = _matching(text, j, file, line)
                    inner.append(text[j:k])
                    j = k
                    continue
                inner.append(text[j])
                j += 1
            if j >= n:
                raise UnmappableConfig(f"{file}:{line}: a double quote is not closed")
            line += text.count("\n", i, j)
            word.parts.append(Part("".join(inner), True, True))
            i = j + 1
            continue
        if text.startswith("$(", i) or c == "`" or text.startswith("${", i):
            k = _matching(text, i, file, line)
            buf.append(text[i:k])
            i = k
            continue
        buf.append(c)
        i += 1
    flush()
    return word, i, line


def _matching(text: str, i: int, file: str, line: int) -> int:
    """The index after the $( ... ), $(( ... )), ${ ... } or ` ... ` that starts at i."""
    if text[i] == "`":
        end = text.find("`", i + 1)
        if end < 0:
            raise UnmappableConfig(f"{file}:{line}: a backquote is not closed")
        return end + 1
    opening, closing = ("(", ")") if text[i + 1] == "(" else ("{", "}")
    depth, j = 0, i + 1
    while j < len(text):
        if text[j] == opening:
            depth += 1
        elif text[j] == closing:
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    raise UnmappableConfig(f"{file}:{line}: {text[i : i + 2]} is not closed")


_ARITH: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.floordiv,
    ast.Mod: operator.mod,
}


class Shell:
    """The variables of a script read top to bottom, and the expansion of its words."""

    def __init__(self, file: str):
        self.file = file
        self.scalars: dict[str, str] = {}
        self.arrays: dict[str, list[str]] = {}

    # ------------------------------------------------------------------ expansion

    def value(self, name: str) -> str | None:
        if name in self.arrays:
            return self.arrays[name][0] if self.arrays[name] else ""
        return self.scalars.get(name)

    def _parameter(self, body: str, line: int) -> list[str] | str:
        """${body}: a list for an array's [@]/[*], else the string."""
        m = re.fullmatch(rf"({NAME}|\d+)\[[@*]\]", body)
        if m:
            return list(self.arrays.get(m.group(1), []))
        m = re.fullmatch(rf"({NAME}|\d+)(:?[-=])(.*)", body, re.S)
        if m:
            name, op, default = m.groups()
            current = self.value(name)
            if current is None or (op.startswith(":") and current == ""):
                current = " ".join(self.expand_text(default, line))
                if op.endswith("="):
                    self.scalars[name] = current
            return current
        if re.fullmatch(rf"{NAME}|\d+", body):
            return self.value(body) or ""
        raise UnmappableConfig(f"{self.file}:{line}: ${{{body}}}: an expansion the importer does not resolve")

    def _arith(self, expression: str, line: int) -> str:
        text = re.sub(rf"\$\{{?({NAME})\}}?", lambda m: self.value(m.group(1)) or "0", expression)
        text = re.sub(NAME, lambda m: self.value(m.group(0)) or "0", text)

        def evaluate(node: ast.AST) -> int:
            if isinstance(node, ast.Expression):
                return evaluate(node.body)
            if isinstance(node, ast.Constant) and type(node.value) is int:
                return node.value
            if isinstance(node, ast.BinOp) and type(node.op) in _ARITH:
                return _ARITH[type(node.op)](evaluate(node.left), evaluate(node.right))
            if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
                return -evaluate(node.operand)
            raise ValueError(expression)

        try:
            return str(evaluate(ast.parse(text.strip(), mode="eval")))
        except (SyntaxError, ValueError, ZeroDivisionError):
            raise UnmappableConfig(
                f"{self.file}:{line}: $(({expression})): arithmetic the importer does not resolve"
            ) from None

    def _pieces(self, part: Part, line: int) -> list[tuple[str | list[str], bool]]:
        """A part's text and expansions in order: (text, False) literal, (value, True) expanded."""
        if not part.expand:
            return [(part.text, False)]
        out: list[tuple[str | list[str], bool]] = []
        text, i = part.text, 0
        while i < len(text):
            j = text.find("$", i)
            k = text.find("`", i)
            j = min(x for x in (j, k) if x >= 0) if max(j, k) >= 0 else -1
            if j < 0:
                out.append((text[i:], False))
                break
            if j > i:
                out.append((text[i:j], False))
            if text[j] == "`" or text.startswith("$(", j) and not text.startswith("$((", j):
                raise UnmappableConfig(
                    f"{self.file}:{line}: {text[j : j + 40]}: a command substitution; its value is what running the "
                    "script prints, which the importer never does: write the value in the script"
                )
            if text.startswith("$((", j):
                end = _matching(text, j, self.file, line)
                out.append((self._arith(text[j + 3 : end - 2], line), True))
                i = end
            elif text.startswith("${", j):
                end = _matching(text, j, self.file, line)
                out.append((self._parameter(text[j + 2 : end - 1], line), True))
                i = end
            else:
                m = re.match(rf"\$({NAME}|\d|[@*#?])", text[j:])
                if not m:
                    out.append(("$", False))
                    i = j + 1
                    continue
                out.append((self.value(m.group(1)) or "", True))
                i = j + len(m.group(0))
        return out

    def expand(self, word: Word) -> list[str]:
        """The words one word becomes: expansions, then word splitting of what was not quoted."""
        fields: list[str] = []
        current: list[str] = []
        started = False  # a word is under way (a quoted empty string is a word)

        def cut() -> None:
            nonlocal current, started
            if started or current:
                fields.append("".join(current))
            current, started = [], False

        def add(pieces: list[str]) -> None:
            """Pieces that are words of their own, the first joined to the word under way."""
            nonlocal started
            for k, piece in enumerate(pieces):
                if k:
                    cut()
                current.append(piece)
                started = True

        for part in word.parts:
            for value, expanded in self._pieces(part, word.line):
                if isinstance(value, list):  # ${A[@]}: quoted, one word per element; else each element split
                    add(value if part.quoted else [w for e in value for w in e.split()])
                elif expanded and not part.quoted:  # split on whitespace, which also ends or starts a word
                    if value[:1].isspace():
                        cut()
                    add(value.split())
                    if value[-1:].isspace():
                        cut()
                else:
                    current.append(value)
                    started = started or part.quoted or bool(value)
        cut()
        return fields

    def expand_text(self, text: str, line: int) -> list[str]:
        word, _, _ = _word(text, 0, line, self.file)
        return self.expand(word)

    # ------------------------------------------------------------------ statements

    def assign(self, word: Word) -> None:
        m = ASSIGNMENT.match(word.raw)
        assert m is not None
        name, append = m.group(1), bool(m.group(2))
        if word.array is not None:
            values = [w for element in word.array for w in self.expand(element)]
            self.arrays[name] = (self.arrays.get(name, []) if append else []) + values
            self.scalars.pop(name, None)
            return
        rest = Word(self._after_equals(word, len(m.group(0))), word.line)
        value = " ".join(self.expand(rest))  # an assignment does not split: the words rejoined
        if name in self.arrays and append:
            self.arrays[name].append(value)
        else:
            self.scalars[name] = (self.scalars.get(name, "") + value) if append else value

    @staticmethod
    def _after_equals(word: Word, skip: int) -> list[Part]:
        """The parts of NAME=value after the `NAME=`."""
        out, left = [], skip
        for part in word.parts:
            if left >= len(part.text):
                left -= len(part.text)
                continue
            out.append(Part(part.text[left:], part.quoted, part.expand))
            left = 0
        return out

    def test(self, words: list[Word]) -> bool:
        """An if's condition: [[ ]] / [ ] tests joined by || and &&, each maybe negated by !."""
        result: bool | None = None
        joiner = "||"
        group: list[Word] = []
        for w in [*words, Word([Part("||", False, False)])]:
            if w.raw in ("||", "&&") and not w.parts[0].quoted:
                value = self._one_test(group)
                result = value if result is None else (result or value) if joiner == "||" else (result and value)
                joiner, group = w.raw, []
            else:
                group.append(w)
        return bool(result)

    def _one_test(self, words: list[Word]) -> bool:
        raw = [w.raw for w in words]
        negate = bool(raw) and raw[0] == "!"
        if negate:
            words, raw = words[1:], raw[1:]
        if raw[:1] in (["[["], ["["]) and raw[-1:] in (["]]"], ["]"]):
            words = words[1:-1]
        args = ["".join(self.expand(w)) if any(p.quoted for p in w.parts) else " ".join(self.expand(w)) for w in words]
        if args and args[0] == "!":
            negate, args = not negate, args[1:]
        if len(args) == 3 and args[1] in ("==", "=", "!="):
            value = (args[0] == args[2]) == (args[1] != "!=")
        elif len(args) == 2 and args[0] in ("-z", "-n"):
            value = (args[1] == "") == (args[0] == "-z")
        elif len(args) == 2 and args[0] in ("-f", "-d", "-e", "-s", "-r", "-x"):
            value = True  # the script checks its own files: taken as present
        elif len(args) == 1:
            value = args[0] != ""
        else:
            raise UnmappableConfig(
                f"{self.file}:{words[0].line if words else 0}: if {' '.join(raw)}: a condition the importer does not resolve"
            )
        return value != negate


TRAINING_SCRIPT = re.compile(r"(pretrain|train)[\w-]*\.py$")
LAUNCHERS = ("torchrun", "python", "python3", "deepspeed", "srun", "mpirun", "accelerate")
"""Commands whose words are expanded to look for the training script (others may hold command substitutions
that never reach the run: `mkdir -p "$(dirname "$CHECKPOINT_PATH")"`)."""


def training_command(text: str, file: str) -> list[str] | None:
    """The expanded words of the script's training command (the last command that runs a *train*.py), None
    when the script has none. UnmappableConfig names the line of what cannot be resolved without running."""
    if len(text) > MAX_SCRIPT_CHARS:
        return None  # no launch script is this long: read as a file of flags, whose limits name the line
    shell = Shell(file)
    found: list[str] | None = None
    branches: list[list[bool]] = []  # per open if: [this branch is taken, a branch was taken]

    def active() -> bool:
        return all(taken for taken, _ in branches)

    for command in _lex(text, file):
        head = command[0].raw
        if head in ("if", "elif"):
            words = command[1:]
            cut = next((k for k, w in enumerate(words) if w.raw == "then"), len(words))
            if head == "if":
                take = active() and shell.test(words[:cut])
                branches.append([take, take])
            else:
                done = branches[-1][1]
                take = not done and all(t for t, _ in branches[:-1]) and shell.test(words[:cut])
                branches[-1] = [take, done or take]
            command = words[cut + 1 :]
        while command and command[0].raw in ("then", "else"):  # a keyword that starts the line's command
            if command[0].raw == "else":
                branches[-1] = [not branches[-1][1], True]
            command = command[1:]
        if not command:
            continue
        head = command[0].raw
        if head == "fi":
            branches.pop()
            continue
        if not active():
            continue
        if head in ("export", "local", "declare", "readonly"):
            command = [w for w in command[1:] if not w.raw.startswith("-")]
        assignments = 0
        for w in command:
            if ASSIGNMENT.match(w.raw) and not w.parts[0].quoted:
                shell.assign(w)
                assignments += 1
            else:
                break
        words = command[assignments:]
        if not words:
            continue
        launcher = words[0].raw.rsplit("/", 1)[-1] in LAUNCHERS
        if launcher or any(TRAINING_SCRIPT.search(w.raw.strip('"')) for w in words):
            expanded = [x for w in words for x in shell.expand(w)]
            if any(TRAINING_SCRIPT.search(x) for x in expanded):
                found = expanded
    return found
