"""RUN012: a file the spec names (tokenizer.pretrained, an eval task's path, curate.ner.model) that is not here.

Why it matters:
    A spec imported from another framework (runlib import) carries a placeholder
    tokenizer.pretrained path, and a published spec names a tokenizer file that is not shipped. The
    tokenizer stage copies that file, and the eval stage reads each multiple_choice or answer_loglik
    task file after every phase: a missing file, or a tokenizer in a format the stage does not read
    (a SentencePiece .model, a tiktoken file), passed the audit and failed in a job, possibly after
    hours of training. curate.ner.model must be a spaCy pipeline folder (its config.cfg), which every
    curate_shard job of the source loads. Missing data files are SRC001's; lm_eval task files are
    checked by the workflow gate's harness check.

Flagged:
    tokenizer: {pretrained: tokenizers/llama2/tokenizer.model, reserved_tokens: 3}

Preferred:
    tokenizer: {pretrained: tokenizers/llama2/tokenizer.json, reserved_tokens: 3}
    # a Hugging Face tokenizers file, there, relative to where the workflow runs

How to fix:
    Put the file there (relative paths are read from the directory snakemake runs in), point the
    field at it, or train a tokenizer instead (tokenizer.vocab_size without pretrained) / build the
    task from held-out documents (from_heldout). A warning in `runlib audit` (a spec planned here may
    run elsewhere); the workflow gate refuses it.
"""

from collections.abc import Iterator
from pathlib import Path

from runlib.audit.checks._refusals import REFUSED
from runlib.audit.registry import Context, Finding, case

CODE = "RUN012"
NAME = "named-file-missing"
SEVERITY = "warning"


def check(ctx: Context) -> Iterator[Finding]:
    for r in ctx.files.named_file_refusals:
        yield ctx.finding(r.field, f"{r.reason}{REFUSED}", r.fix)


_ROOT = Path(__file__).resolve().parents[3]
_JSON = str(_ROOT / "specs" / "runspec.schema.json")  # a JSON object that exists wherever the tests run
_HERE = str(Path(__file__).resolve())
_NOWHERE = "/nonexistent-runlib-case/tokenizer.json"
_PRETRAINED = {"tokenizer.vocab_size": "__delete__", "model.vocab_size": 32768}

PASS = [
    {},
    {**_PRETRAINED, "tokenizer.pretrained": _JSON},
    {"eval.tasks": [{"name": "file-task", "kind": "multiple_choice", "path": _HERE}]},
]
FAIL = [
    case({**_PRETRAINED, "tokenizer.pretrained": _NOWHERE}, "warning"),
    case({**_PRETRAINED, "tokenizer.pretrained": _HERE}, "warning"),  # not a tokenizer.json
    case(
        {"eval.tasks": [{"name": "file-task", "kind": "answer_loglik", "path": "/nonexistent-runlib-case/t.jsonl"}]},
        "warning",
    ),
    case(
        {"data.sources.web.curate.pii": "ner", "data.sources.web.curate.ner": {"model": "/nonexistent-runlib-case"}},
        "warning",
    ),
    case(
        {"data.sources.web.curate.pii": "ner", "data.sources.web.curate.ner": {"model": str(_ROOT / "specs")}},
        "warning",
    ),
]
