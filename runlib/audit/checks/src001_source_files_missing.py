"""SRC001: a file source whose path matches no input file here.

Why it matters:
    A source's `input.path` is a glob the curation stage expands when the workflow starts, relative
    to the directory snakemake (or `runlib plan`) runs in. A glob that matches nothing (a typo, a
    wrong extension, data not yet copied to this machine) stops the workflow at its gate; before
    this check the audit passed such a spec and the error came later, without the spec's line. A
    glob that walks into a symbolic link loop, meets a broken link or a FIFO fails the same way.

Flagged:
    data: {sources: {web: {domain: web, input: {format: jsonl, path: "data/web/*.json"}}}}
    # data/web/ holds *.jsonl files: nothing matches. An error when a phase mixture, the
    # tokenizer's train_on or an eval task needs the source and its directory is here (the
    # pattern is wrong); a warning when the directory itself is absent (the data is not on this
    # machine: a spec planned here and run elsewhere audits without error, like the published
    # specs; the workflow's gate refuses to start) or when nothing needs the source.

Preferred:
    data: {sources: {web: {domain: web, input: {format: jsonl, path: "data/web/*.jsonl"}}}}

How to fix:
    Correct the path (it is relative to the directory the workflow runs in, not to the spec
    file), or copy the data there first; a source that nothing uses can also be removed. The
    audit only lists directories (no file is read or hashed; runlib.audit.facts gathers the listing
    once, before the checks) and stops after AUDIT_MAX_DIRECTORY_ENTRIES entries; a glob that large
    is left to `runlib plan`, which walks it all (info finding).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from pathlib import Path

from runlib.audit.registry import Context, Finding, case
from runlib.spec.models import RunSpec

CODE = "SRC001"
NAME = "source-files-missing"
SEVERITY = "error"


def consumers(spec: RunSpec, name: str) -> list[str]:
    """What needs the source's documents: phases that give it a positive weight, the tokenizer's
    training sample, eval tasks built from its held-out documents."""
    phases = [p.name for p in spec.phases if p.mixture.get(name, 0.0) > 0]
    needs = [f"phase{'s' if len(phases) > 1 else ''} {', '.join(phases)}"] if phases else []
    if spec.tokenizer.pretrained is None and spec.tokenizer.train_on.get(name, 0.0) > 0:
        needs.append("tokenizer.train_on")
    needs += [f"eval task {t.name}" for t in spec.eval.tasks if t.from_heldout == name]
    return needs


def check(ctx: Context) -> Iterator[Finding]:
    for name, source in ctx.spec.data.sources.items():
        fmt, pattern = source.input.format, source.input.path
        if fmt == "builtin":
            continue
        field = f"data.sources.{name}.input.path"
        needs = consumers(ctx.spec, name)
        used = f"needed by {' and '.join(needs)}" if needs else "not used (no phase, tokenizer sample or eval task)"
        if not pattern:
            yield ctx.finding(
                f"data.sources.{name}.input",
                f"source {name!r} has format {fmt} but no path: the curation stage has nothing to read; it is {used}",
                f'add input.path, a glob of its files, e.g. path: "data/{name}/*.{fmt}"',
                severity="error" if needs else "warning",
            )
            continue
        found = ctx.files.sources[name]
        state, detail, here = found.state, found.detail, ctx.files.here
        remove = "" if needs else f"; or remove the unused source {name!r}"
        if state == "none":
            there = found.sample
            holds = f"; it holds {', '.join(there)}{', ...' if len(there) == 3 else ''}" if there else ""
            yield ctx.finding(
                field,
                f"{pattern!r} matches no file in {os.path.abspath(detail or here)}{holds} (relative paths are read "
                f"from {here}, where the workflow runs); source {name!r} is {used}",
                "correct the glob: the directory is there, so check the file names and the extension (e.g. "
                f"*.jsonl vs *.jsonl.gz){remove}",
                severity="error" if needs else "warning",
            )
        elif state == "absent":
            yield ctx.finding(
                field,
                f"{pattern!r} matches no file: its directory {detail} does not exist under {here} (relative "
                f"paths are read from where the workflow runs); source {name!r} is {used}. "
                + ("The plan uses its declared tokens" if source.tokens else "Its tokens are unknown (MIX004)")
                + "; the workflow's gate refuses to start until the files are there",
                f"copy the data to {detail}/ before running, or correct the path if the directory name is "
                f"mistyped{remove}",
                severity="warning",
            )
        elif state == "problem":
            yield ctx.finding(
                field,
                f"{detail}; source {name!r} is {used}",
                "as the message says",
                severity="error" if needs else "warning",
            )
        elif state == "unchecked":
            yield ctx.finding(
                field,
                f"{pattern!r} was not checked to the end: the audit stops after {detail}",
                "run `runlib plan SPEC`, which walks the whole glob (and hashes its files once)",
                severity="info",
            )


_HERE = glob.escape(str(Path(__file__).resolve()))  # a file that exists wherever the tests run
_NOWHERE = "/nonexistent-runlib-case/web/*.jsonl"

PASS = [
    {"data.sources.web.input.path": _HERE, "data.sources.code.input.path": _HERE.replace(".py", ".p[y]")},
    {
        "data.sources.web.input": {"format": "builtin", "name": "python_docs"},
        "data.sources.code.input": {"format": "builtin", "name": "python_code"},
    },
    {  # a text source given as a directory: every file under it
        "data.sources.web.input": {"format": "text", "path": str(Path(__file__).resolve().parent)},
        "data.sources.code.input.path": _HERE,
    },
]
FAIL = [
    case(  # the extension is wrong: .py files exist beside it, no .pyc
        {"data.sources.web.input.path": _HERE, "data.sources.code.input.path": _HERE + "c"},
        "error",
    ),
    case(  # a source no mixture and no tokenizer sample uses: a warning
        {
            "data.sources.web.input.path": _HERE,
            "data.sources.code.input.path": _NOWHERE,
            "tokenizer.train_on": {"web": 1.0},
            "phases[0].mixture": {"web": 1.0},
            "phases[1].mixture": {"web": 1.0},
            "phases[2].mixture": {"web": 1.0},
            "phases[3].mixture": {"web": 1.0},
        },
        "warning",
    ),
    case({"data.sources.web.input": {"format": "jsonl"}, "data.sources.code.input.path": _HERE}, "error"),
    case(  # the data is not on this machine (planned here, run elsewhere): a warning
        {"data.sources.web.input.path": _NOWHERE, "data.sources.code.input.path": _HERE},
        "warning",
    ),
]
