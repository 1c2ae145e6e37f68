"""The tokenize stage: one curated shard's documents -> token shards "train" and "heldout".

    tokenize_part(config, curated_dir, tokenizer_dir, out_dir) -> summary

A source is tokenized by one job per curated shard (its filter_shard outputs, runlib.curate.filter_shard);
the loader reads the parts in order as one stream (runlib.data.shards.open_split).
Each document of curated_dir/{train,heldout}.jsonl is encoded with the run's tokenizer (special-token
strings inside the text stay text) and followed by the end-of-document id; the ids go to
out_dir/<split>.bin + <split>.idx.npy (runlib.data.shards), in the dtype config.token_dtype asks for
(runlib.data.config.TokenizeConfig: data.token_dtype of the spec).

Speed: documents are encoded in batches of about 1 MB with `encode_batch_fast` (all cores, no offsets),
a few batches in flight at once, and the ids of a batch become one numpy array at once; the
per-document Python work is a list extend, never a loop over tokens.
"""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from runlib.data.config import TokenizeConfig
from runlib.data.shards import ShardWriter, token_dtype
from runlib.tokenizer.train import TOKENIZER_FILE, eos_id, load_tokenizer

if TYPE_CHECKING:  # tokenizers is imported where it is used (runlib.tokenizer.train), not at import
    from tokenizers import Encoding, Tokenizer

BATCH_BYTES = 1 << 20
"""Characters of text per encode call: enough documents to share among the cores, few enough to bound memory."""
IN_FLIGHT = 3
"""Batches being encoded at once: one finishing while the next starts keeps every core busy."""
SPLITS = ("train", "heldout")


def _batches(path: Path) -> Iterator[list[str]]:
    """The texts of the documents of a curated file, in file order, in lists of about BATCH_BYTES characters."""
    batch: list[str] = []
    size = 0
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                text = json.loads(line)["text"]
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{lineno}: not a curated document ({{'text': ...}}): {exc}") from exc
            batch.append(text)
            size += len(text)
            if size >= BATCH_BYTES:
                yield batch
                batch, size = [], 0
    if batch:
        yield batch


def _count(texts: list[str]) -> tuple[int, int]:
    """(characters, UTF-8 bytes) of texts; a lone surrogate (which tokenizers refuses) is replaced in place."""
    chars = nbytes = 0
    for i, text in enumerate(texts):
        chars += len(text)
        try:
            nbytes += len(text.encode("utf-8"))
        except UnicodeEncodeError:  # e.g. from a "\ud800" escape in the JSON
            texts[i] = text.encode("utf-8", "replace").decode("utf-8")
            nbytes += len(texts[i].encode("utf-8"))
    return chars, nbytes


def tokenize_file(tok: Tokenizer, path: Path, writer: ShardWriter, eos: int) -> dict[str, int]:
    """Encode every document of a curated JSONL file into writer, each followed by eos; return the counts.

    Up to IN_FLIGHT batches are encoded at once (tokenizers releases the GIL; its thread pool, sized by
    RAYON_NUM_THREADS, does the work), so the cores stay busy while this thread parses the next batch
    and writes the previous one; the output order is the file's.
    """
    docs = tokens = chars = nbytes = 0
    dtype = writer.dtype

    def encode(texts: list[str]) -> list[Encoding]:
        return tok.encode_batch_fast(texts, add_special_tokens=False)

    def write(future: Future[list[Encoding]]) -> int:
        encodings = future.result()
        flat: list[int] = []
        lengths = np.empty(len(encodings), dtype=np.int64)
        for j, enc in enumerate(encodings):
            ids = enc.ids
            flat += ids
            flat.append(eos)
            lengths[j] = len(ids) + 1
        writer.add_chunk(np.array(flat, dtype=dtype), lengths)
        return len(flat)

    # with TOKENIZERS_PARALLELISM off, each call encodes on its own thread: keep to one at a time
    in_flight = 1 if os.environ.get("TOKENIZERS_PARALLELISM", "").lower() in ("0", "false", "off", "no") else IN_FLIGHT
    pending: deque[Future[list[Encoding]]] = deque()
    with ThreadPoolExecutor(max_workers=in_flight, thread_name_prefix="runlib-tokenize") as pool:
        try:
            for texts in _batches(path):
                c, b = _count(texts)
                chars, nbytes, docs = chars + c, nbytes + b, docs + len(texts)
                pending.append(pool.submit(encode, texts))
                if len(pending) >= in_flight:
                    tokens += write(pending.popleft())
            while pending:
                tokens += write(pending.popleft())
        finally:
            for future in pending:
                future.cancel()
    return {"docs": docs, "tokens": tokens, "chars": chars, "bytes": nbytes}


def tokenize_part(config: TokenizeConfig, curated_dir: Path, tokenizer_dir: Path, out_dir: Path) -> dict[str, Any]:
    """Write out_dir/{train,heldout}.{bin,idx.npy} for one curated shard (curated_dir: its filter_shard
    output); return counts and compression."""
    curated_dir, out_dir = Path(curated_dir), Path(out_dir)
    tok = load_tokenizer(Path(tokenizer_dir) / TOKENIZER_FILE)
    eos = eos_id(tok)
    max_id = tok.get_vocab_size(with_added_tokens=True) - 1
    dtype = token_dtype(config.token_dtype, max_id)
    for split in SPLITS:
        if not (curated_dir / f"{split}.jsonl").exists():
            raise FileNotFoundError(f"curated source {curated_dir}: {split}.jsonl is missing")
    stats = {}
    for split in SPLITS:
        with ShardWriter(out_dir, split, dtype) as writer:
            stats[split] = tokenize_file(tok, curated_dir / f"{split}.jsonl", writer, eos)
            writer.close()
    train = stats["train"]
    text_tokens = train["tokens"] - train["docs"]  # without the EOS after each document
    return {
        "counts": {
            "docs_train": train["docs"],
            "tokens_train": train["tokens"],
            "docs_heldout": stats["heldout"]["docs"],
            "tokens_heldout": stats["heldout"]["tokens"],
            "chars_train": train["chars"],
            "bytes_train": train["bytes"],
            "chars_heldout": stats["heldout"]["chars"],
            "bytes_heldout": stats["heldout"]["bytes"],
        },
        "compression": {
            "chars_per_token": train["chars"] / text_tokens if text_tokens else None,
            "bytes_per_token": train["bytes"] / text_tokens if text_tokens else None,
        },
        "dtype": dtype.name,
        "eos_id": eos,
    }
