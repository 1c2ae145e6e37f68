"""Files a spec names, checked before any job starts: the rule for every field that
names a file is a check at the workflow gate, reported at the field's line.

FILE_FIELDS lists the schema's fields that name a file (their Field carries NAMES_FILE,
runlib.spec.models) and the check that covers each; tests/audit/test_gate_fields.py fails when a field
with the marker has no entry here, or an entry's check lets a missing file through the gate.

`named_file_refusals(spec)` is RUN012's rule: tokenizer.pretrained must be a regular file holding a
Hugging Face `tokenizers` tokenizer.json (a JSON object: a SentencePiece .model or a tiktoken file is
not read by the tokenizer stage), and a multiple_choice or answer_loglik task's path a regular file.
Only a stat and the first bytes of a regular file are read (a FIFO or a device is refused unopened),
so `runlib audit` stays fast and cannot block.
"""

from __future__ import annotations

import os
import stat

from runlib.errors import UserError
from runlib.plan.enact import Refusal
from runlib.spec.models import EvalTaskSpec, RunSpec
from runlib.util.userfile import read_bounded, refusal

FILE_FIELDS: dict[str, str] = {
    "data.sources.*.input.path": "SRC001 (the audit) and the gate's glob expansion (runlib.graph.configs)",
    "data.sources.*.curate.url_filter.blocklist": "the gate's config building (runlib.graph.configs.named_files)",
    "data.sources.*.curate.ner.model": "RUN012, and the gate's config building (runlib.graph.configs.ner_files)",
    "tokenizer.pretrained": "RUN012",
    "eval.tasks[].path": "RUN012 (multiple_choice, answer_loglik); lm_eval: the harness gate (runlib.eval.harness.gate)",
}
"""Spec field pattern -> what checks the file it names before any job starts."""

HEAD_BYTES = 64
"""Bytes read from the start of a tokenizer file to tell a JSON object from another format."""

TASK_KINDS_WITH_FILES = ("multiple_choice", "answer_loglik")
"""Task kinds whose path runlib reads itself (an lm_eval path is lm-eval's task folder: its own gate)."""


def _problem(path: str) -> str | None:
    """Why `path` is not a readable regular file here (None: it is)."""
    try:
        st = os.stat(os.path.expanduser(path))
    except FileNotFoundError:
        return f"{path!r} does not exist (relative paths are read from {os.getcwd()}, where the workflow runs)"
    except OSError as exc:
        return f"{path!r} cannot be read ({exc.strerror})"
    except ValueError:  # os.stat of a path with a NUL byte (a traceback before)
        return f"{path!r} holds a NUL character, which no file name can"
    if stat.S_ISDIR(st.st_mode):
        return f"{path!r} is a folder, not a file"
    if not stat.S_ISREG(st.st_mode):
        return f"{path!r} is not a regular file (a FIFO, socket or device)"
    if refusal(path, st, "the file") is not None:  # /proc/kmsg: a regular file whose read blocks
        return f"{path!r} is a kernel file (/proc or /sys), not a regular file"
    return None


def _head(path: str) -> bytes:
    try:  # non-blocking open, regular files only: the file may have changed since _problem's stat
        return read_bounded(os.path.expanduser(path), HEAD_BYTES, "the file")[:HEAD_BYTES]
    except UserError:
        return b""


def tokenizer_refusals(pretrained: str | None) -> list[Refusal]:
    if pretrained is None:
        return []
    field = "tokenizer.pretrained"
    problem = _problem(pretrained)
    if problem is not None:
        return [
            Refusal(
                "RUN012",
                field,
                pretrained,
                f"{problem}: the tokenizer stage copies this file, so its job would fail",
                "put the tokenizer.json there (an imported spec's path is a placeholder: point it at a real "
                "file), or train one instead: delete pretrained and set tokenizer.vocab_size",
            )
        ]
    head = _head(pretrained).lstrip(b" \t\r\n\xef\xbb\xbf")
    if not head.startswith(b"{"):
        return [
            Refusal(
                "RUN012",
                field,
                pretrained,
                f"{pretrained!r} is not a Hugging Face tokenizers tokenizer.json (a JSON object); the tokenizer "
                "stage reads only that format (a SentencePiece .model or a tiktoken file is not read)",
                "convert it: transformers' AutoTokenizer.from_pretrained(<folder>).backend_tokenizer"
                ".save('tokenizer.json') writes one from a fast tokenizer; then point tokenizer.pretrained at it",
            )
        ]
    return []


def task_refusals(tasks: list[EvalTaskSpec]) -> list[Refusal]:
    """RUN012 for each eval task whose file (tasks[].path) is not a readable file here."""
    out = []
    for i, task in enumerate(tasks):
        if task.path is None or task.kind not in TASK_KINDS_WITH_FILES:
            continue
        problem = _problem(task.path)
        if problem is not None:
            out.append(
                Refusal(
                    "RUN012",
                    f"eval.tasks[{i}].path",
                    task.path,
                    f"task {task.name}: {problem}: the eval stage reads it after each phase, so that job would fail",
                    "put the JSONL task file there (format in the README), or build the task from a source's "
                    "held-out documents with from_heldout: <source>",
                )
            )
    return out


def ner_model_refusals(spec: RunSpec) -> list[Refusal]:
    """RUN012 for each curate.ner.model that is not a folder with a config.cfg (a spaCy pipeline) here."""
    out = []
    for name, source in spec.data.sources.items():
        ner = source.curate.ner
        if ner is None:
            continue
        config = os.path.join(os.path.expanduser(ner.model), "config.cfg")
        problem = None if os.path.isdir(os.path.expanduser(ner.model)) else f"{ner.model!r} is not a folder here"
        if problem is None and _problem(config) is not None:
            problem = f"{ner.model!r} holds no config.cfg, so it is not a spaCy pipeline folder"
        if problem is not None:
            out.append(
                Refusal(
                    "RUN012",
                    f"data.sources.{name}.curate.ner.model",
                    ner.model,
                    f"{problem}: curate_shard loads the model with spaCy, so its jobs would fail",
                    "give the folder that spaCy's nlp.to_disk wrote, or an installed model's data folder "
                    "(en_core_web_sm/en_core_web_sm-3.8.0); relative paths are read from where the workflow runs",
                )
            )
    return out


def named_file_refusals(spec: RunSpec) -> list[Refusal]:
    """RUN012: the files the spec names that are not here (tokenizer.pretrained, eval task files, the
    named-entity model's folder)."""
    return tokenizer_refusals(spec.tokenizer.pretrained) + task_refusals(spec.eval.tasks) + ner_model_refusals(spec)
