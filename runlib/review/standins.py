"""How many training tokens a shrunk spec's source holds, before anything is curated or tokenized.

`runlib shrink` declares each source's `tokens` from the documents the shrunk run will actually curate (a
builtin stand-in's first max_docs documents, or the first max_docs documents of a file source that is
here), so the audit's epochs before the run are those the run then measures (MIX003 sees the repetition).

The estimate: the UTF-8 bytes of those documents, less the held-out documents' share (curate_source takes
data.heldout_docs documents out of training), over the bytes per token of the shrunk 1,024-id byte-level
BPE. BYTES_PER_TRAIN_TOKEN was measured on the shrunk OLMo 2 7B (`runlib shrink specs/olmo2-7b.yaml
--minutes 3`, CPython 3.11, snakemake --until tokenize; train bytes / tokens_train of each tokenize
manifest): python_docs 2.59-2.61 (six sources), python_code 2.49, arithmetic 1.12 (tokenizer.digits:
triplets; digits split into single ones give about as many tokens, as a 1,024-id BPE learns few of the
1,000 triplets). Curation filters that drop documents make the source smaller than this estimate.
"""

from __future__ import annotations

import ast
import glob
import itertools
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runlib.curate import builtin
from runlib.curate.extract import Extractor, extract_text
from runlib.curate.readers import read_documents
from runlib.curate.warc import read_warc
from runlib.errors import UserError
from runlib.util.globs import match_files

BYTES_PER_TRAIN_TOKEN = {"python_docs": 2.60, "python_code": 2.49, "arithmetic": 1.12}
CODE_DOMAIN = "code"


def bytes_per_token(kind: str, domain: str) -> float:
    """The measured figure of a builtin stand-in; a file source gets its domain's nearest stand-in's
    (code: python_code; any other text: python_docs)."""
    if kind in BYTES_PER_TRAIN_TOKEN:
        return BYTES_PER_TRAIN_TOKEN[kind]
    return BYTES_PER_TRAIN_TOKEN["python_code" if domain == CODE_DOMAIN else "python_docs"]


def train_tokens(doc_bytes: list[int], heldout_docs: int, per_token: float) -> int:
    """Training tokens of documents of these sizes once heldout_docs of them are held out (at their mean
    size: curate_source draws them at random)."""
    if not doc_bytes:
        return 0
    kept = max(0, len(doc_bytes) - heldout_docs) / len(doc_bytes)
    return max(1, round(sum(doc_bytes) * kept / per_token))


def _python_docs_iter() -> Iterator[str]:
    """python_docs' documents in runlib.curate.builtin's order (the pydoc topics sorted by name, then each
    standard-library module's docstrings), parsing each module only when its document is asked for (the
    first 150 documents parse ~70 modules of ~600: 0.3 s instead of 5)."""
    root = builtin.stdlib_root()
    topics = builtin._pydoc_topics(root)
    yield from (topics[name] for name in sorted(topics))
    for path in builtin.stdlib_files(root):
        rel = path.relative_to(root).as_posix()
        try:
            tree = ast.parse(builtin._decode_source(path.read_bytes()), rel)
        except (SyntaxError, ValueError):
            continue
        text = builtin._module_document(builtin.module_name(rel), tree)
        if text:
            yield text


def _builtin_iter(name: str) -> Iterator[str]:
    if name == "arithmetic":
        return (builtin.arithmetic_document(i) for i in itertools.count())
    if name == "python_code":
        return (builtin._decode_source(p.read_bytes()) for p in builtin.stdlib_files(builtin.stdlib_root()))
    if name == "python_docs":
        return _python_docs_iter()
    raise UserError(f"input.name: unknown builtin source {name!r}; known kinds: {', '.join(builtin.KINDS)}")


_read: dict[str, tuple[Iterator[str], list[str]]] = {}  # builtin name -> (its documents, those read so far)


def builtin_texts(name: str, count: int) -> list[str]:
    """The first `count` documents of builtin source `name`, as runlib.curate.builtin.builtin_documents
    lists them (tests/review/test_shrink.py compares the two); read once per process, as far as asked."""
    if name not in _read:
        _read[name] = (_builtin_iter(name), [])
    documents, texts = _read[name]
    texts.extend(itertools.islice(documents, max(0, count - len(texts))))
    return texts[:count]


def file_texts(source_name: str, source: Any, count: int) -> list[str]:
    """The first `count` documents of a file source that is here, read as curate_shard reads them (one
    shard; runlib.curate.readers), nothing hashed."""
    pattern = source.input.path
    field = f"data.sources.{source_name}.input.path"
    if source.input.format == "text" and Path(pattern).is_dir():
        matches = match_files(os.path.join(glob.escape(pattern), "**", "*"), field, include_hidden=True)
    else:
        matches = match_files(pattern, field)
    if source.input.format == "warc":
        return _web_texts([m.path for m in matches], source.input.extract or "resiliparse", count)
    capped = source.model_copy(update={"input": source.input.model_copy(update={"max_docs": count})})
    docs = read_documents(source_name, capped, [m.path for m in matches])
    return [text for _, text in itertools.islice(docs, count)]


def _web_texts(paths: list[str], extractor: Extractor, count: int) -> list[str]:
    """The text of the first `count` HTML pages of the WARC files, extracted as curate_shard does (before the
    URL filter: an estimate, which curation only makes smaller)."""
    skipped: Counter[str] = Counter()
    pages = (page for path in paths for page in read_warc(path, skipped))
    return [extract_text(page.html, extractor) for page in itertools.islice(pages, count)]


def source_train_tokens(source_name: str, source: Any, shrunk_input: dict[str, Any], heldout_docs: int) -> int:
    """The training tokens of one shrunk source (its input as the shrunk spec writes it)."""
    count = int(shrunk_input["max_docs"])
    if shrunk_input["format"] == "builtin":
        kind = shrunk_input["name"]
        texts = builtin_texts(kind, count)
    else:
        kind = ""
        texts = file_texts(source_name, source, count)
    sizes = [len(t.encode("utf-8", errors="surrogatepass")) for t in texts]
    return train_tokens(sizes, heldout_docs, bytes_per_token(kind, source.domain))
