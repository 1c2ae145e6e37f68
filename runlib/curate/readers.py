"""Readers of raw documents for file-based sources: jsonl (plain or .gz), parquet and text.

Every reader yields (doc_id, text). A doc_id is "<file>:<n>" where <file> is the file's path relative to
the fixed part of the source's glob (input.path up to its first wildcard; the directory itself for a
`text` source given as a directory), so ids do not depend on the working directory:
- jsonl: n is the 1-based line number;
- parquet: n is the 0-based row index in the file;
- text: each file is one document and its id is the relative path alone.

Bad input is a UserError naming the file (and line or row) and the spec field to fix; nothing is skipped
silently (blank jsonl lines are the one exception: they hold no document).

Text that is not valid Unicode. A container whose format requires UTF-8 and holds bytes that are not is
a broken file, refused with its file:line (jsonl: RFC 8259 section 8.1) or file and row (parquet: a
STRING column is UTF-8 by the format's definition). A `text` source's files are raw text, not a
container: their invalid UTF-8 sequences are each replaced by U+FFFD and counted (`repairs`:
invalid_utf8 = documents repaired, invalid_utf8_sequences = sequences replaced), and the curation
counts carry the numbers (the normalize step's reasons). JSON escapes of lone surrogates ("\\ud800") are
valid JSON but not Unicode scalar values: curate_shard's normalize step replaces and counts them
(runlib.curate.stage.repair_surrogates).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runlib.errors import UserError
from runlib.spec.models import SourceSpec
from runlib.util.userfile import open_regular

_MAGIC = re.compile(r"[*?[]")

MAX_DOCUMENT_BYTES = 64 << 20
"""One jsonl line, or one `text` file: a document of 64 MiB is a whole book series (War and Peace is
3.2 MB); a longer one is a file without newlines, a wrong format or a decompression bomb, refused with
its file:line before it is held in memory (a 1 GiB line ended in MemoryError)."""

MAX_GZIP_RATIO = 100
"""Decompressed bytes per compressed byte of a .gz input: text compresses 3-10x with gzip, deflate's
best case is ~1032x (runs of one byte: 258-byte matches in ~2 bits, RFC 1951 section 3.2.5); a file
that inflates more than 100x past its first MiB is refused as a bomb."""

_GZIP_GRACE_BYTES = 1 << 20


def id_root(pattern: str | None) -> Path | None:
    """The directory that doc ids are relative to: the part of the glob before its first wildcard."""
    if not pattern:
        return None
    path = Path(pattern)
    if path.is_dir():
        return path
    fixed: list[str] = []
    for part in path.parts:
        if _MAGIC.search(part):
            return Path(*fixed) if fixed else Path(".")
        fixed.append(part)
    return path.parent  # no wildcard: a single file


def relative_name(file: str, root: Path | None) -> str:
    """`file` relative to `root` with forward slashes; the path as given when it is not under root."""
    if root is not None:
        try:
            rel = os.path.relpath(file, root)
        except ValueError:  # another drive (Windows)
            rel = file
        if not rel.startswith(".."):
            return Path(rel).as_posix()
    return Path(file).as_posix()


def shard_limit(max_docs: int | None, shards: int) -> int | None:
    """A file source's per-shard cap: ceil(max_docs / shards) (so the source reads at most ~max_docs)."""
    if max_docs is None:
        return None
    return math.ceil(max_docs / max(1, shards))


def read_documents(
    source_name: str, source: SourceSpec, files: list[str], shards: int = 1, repairs: Counter[str] | None = None
) -> Iterator[tuple[str, str]]:
    """Yield (doc_id, text) for every document of `files`, in file order then line/row order.

    input.max_docs caps the documents read. For a file source it is applied per curation shard as
    ceil(max_docs / shards): pass the source's shard count when `files` are one shard's files (the
    default 1 treats `files` as the whole source). A shard whose files hold fewer documents than its
    share does not hand the rest to another shard, so the source may read fewer than max_docs.
    Text repaired on reading (see the module docstring) is counted into `repairs`.
    """
    fmt = source.input.format
    field = f"data.sources.{source_name}.input"
    if fmt == "warc":
        raise ValueError(f"{field}.format: a warc source is read by runlib.curate.web.read_web_shard")
    if fmt == "builtin":
        raise UserError(f"{field}.format: a builtin source has no files to read (see runlib.curate.builtin)")
    limit = shard_limit(source.input.max_docs, shards)
    if limit is not None and limit <= 0:
        return
    readers = {"jsonl": _read_jsonl, "parquet": _read_parquet, "text": _read_text}
    root = id_root(source.input.path)
    repairs = Counter() if repairs is None else repairs
    count = 0
    for file in files:
        for doc in readers[fmt](source_name, source, file, relative_name(file, root), repairs):
            yield doc
            count += 1
            if limit is not None and count >= limit:
                return


def _open_error(file: str, exc: Exception) -> UserError:
    return UserError(f"{file}: cannot read the file: {exc}")


def _read_jsonl(
    source_name: str, source: SourceSpec, file: str, name: str, repairs: Counter[str]
) -> Iterator[tuple[str, str]]:
    text_field = source.input.text_field
    field_path = f"data.sources.{source_name}.input.text_field"
    gz = file.endswith(".gz")
    try:
        with open_regular(file, "a jsonl file") as raw_file:
            f = gzip.GzipFile(fileobj=raw_file, mode="rb") if gz else raw_file
            lineno = 0
            while True:
                raw = f.readline(MAX_DOCUMENT_BYTES + 1)  # bounded: never a whole 1 GiB line in memory
                if not raw:
                    break
                lineno += 1
                if len(raw) > MAX_DOCUMENT_BYTES and not raw.endswith(b"\n"):
                    raise UserError(
                        f"{file}:{lineno}: a line longer than {MAX_DOCUMENT_BYTES >> 20} MiB; a jsonl file holds one "
                        "document per line: split the document, or check that the file is jsonl"
                        + (" (and not a decompression bomb)" if gz else "")
                    )
                if gz:
                    _check_ratio(file, lineno, f.tell(), raw_file.tell())
                doc = _jsonl_document(raw, file, lineno, name, text_field, field_path)
                if doc is not None:  # a blank line holds no document
                    yield doc
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise UserError(f"{file}: not a valid gzip file ({exc}); a .gz input must be gzip-compressed jsonl") from None
    except OSError as exc:
        raise _open_error(file, exc) from None


def _check_ratio(file: str, lineno: int, inflated_bytes: int, compressed_bytes: int) -> None:
    if inflated_bytes > _GZIP_GRACE_BYTES and inflated_bytes > MAX_GZIP_RATIO * max(compressed_bytes, 1):
        raise UserError(
            f"{file}:{lineno}: {compressed_bytes:,} compressed bytes inflate to {inflated_bytes:,} (over "
            f"{MAX_GZIP_RATIO}x; text compresses under 10x): a decompression bomb or not text; check the file"
        )


def _jsonl_document(
    raw: bytes, file: str, lineno: int, name: str, text_field: str, field_path: str
) -> tuple[str, str] | None:
    """(doc_id, text) of one jsonl line (None: blank); UserError with file:line for anything but an object
    with the text."""
    try:
        line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(
            f"{file}:{lineno}: not UTF-8 text ({exc.reason} at byte {exc.start} of the line); "
            "re-encode the file as UTF-8"
        ) from None
    if not line.strip():
        return None
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise UserError(
            f"{file}:{lineno}: not a JSON object ({exc.msg} at column {exc.colno}); "
            f"a jsonl file holds one JSON object per line with the text in field {text_field!r}"
        ) from None
    except RecursionError:  # json's scanner recurses per nesting level
        raise UserError(
            f"{file}:{lineno}: JSON nested too deeply to read; a document is an object with the text in field "
            f"{text_field!r}: flatten the line or drop it"
        ) from None
    except ValueError as exc:  # an integer past Python's int() digit limit (sys.get_int_max_str_digits)
        raise UserError(
            f"{file}:{lineno}: a JSON value Python cannot read ({str(exc)[:100]}); "
            "drop the field or write the number as a string"
        ) from None
    if not isinstance(obj, dict):
        raise UserError(
            f"{file}:{lineno}: a JSON {type(obj).__name__}, not an object; "
            f"each line must be an object with the text in field {text_field!r}"
        )
    if text_field not in obj:
        present = ", ".join(sorted(map(str, obj))[:20]) or "none"
        raise UserError(
            f"{file}:{lineno}: no field {text_field!r} (fields present: {present[:300]}); "
            f"set {field_path} to the field that holds the text"
        )
    text = obj[text_field]
    if not isinstance(text, str):
        kind = "null" if text is None else type(text).__name__
        raise UserError(f"{file}:{lineno}: field {text_field!r} is {kind}, not a string; check {field_path}")
    return f"{name}:{lineno}", text


def _read_parquet(
    source_name: str, source: SourceSpec, file: str, name: str, repairs: Counter[str]
) -> Iterator[tuple[str, str]]:
    text_field = source.input.text_field
    field_path = f"data.sources.{source_name}.input.text_field"
    with open_regular(file, "a parquet file") as handle:
        yield from _parquet_rows(handle, file, name, text_field, field_path)


def _parquet_rows(handle: Any, file: str, name: str, text_field: str, field_path: str) -> Iterator[tuple[str, str]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(handle)
    except (OSError, pa.ArrowException) as exc:
        raise UserError(f"{file}: not a readable parquet file ({exc})") from None
    schema = pf.schema_arrow
    if text_field not in schema.names:
        raise UserError(
            f"{file}: no column {text_field!r} (columns present: {', '.join(schema.names) or 'none'}); "
            f"set {field_path} to the column that holds the text"
        )
    kind = schema.field(text_field).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)):
        raise UserError(f"{file}: column {text_field!r} is of type {kind}, not a string; check {field_path}")
    row = 0
    batches = pf.iter_batches(batch_size=8192, columns=[text_field])
    while True:
        try:  # a corrupt page (bad compression, a bad header) is an Arrow or OS error of the read
            batch = next(batches, None)
        except (OSError, pa.ArrowException) as exc:
            raise UserError(
                f"{file}: rows from {row}: a corrupt parquet page ({str(exc)[:200]}); re-export the file"
            ) from None
        if batch is None:
            break
        try:
            texts = batch.column(0).to_pylist()
        except UnicodeDecodeError as exc:
            bad = _first_invalid_utf8(batch.column(0).view(pa.binary()).to_pylist())
            raise UserError(
                f"{file}: row {row + bad}: column {text_field!r} is not UTF-8 ({exc.reason}); a parquet string "
                "column must hold UTF-8: re-encode the column"
            ) from None
        for text in texts:
            if text is None:
                raise UserError(f"{file}: row {row}: column {text_field!r} is null; drop such rows or fill them")
            yield f"{name}:{row}", text
            row += 1


def _first_invalid_utf8(values: list[bytes | None]) -> int:
    for i, value in enumerate(values):
        try:
            if value is not None:
                value.decode("utf-8")
        except UnicodeDecodeError:
            return i
    return 0


def decode_repairing(data: bytes) -> tuple[str, int]:
    """(data as UTF-8 with each invalid sequence replaced by U+FFFD, how many sequences were replaced).

    Python's "replace" handler; the count is the U+FFFD characters it produced less those the bytes
    encoded themselves (EF BF BD: never part of an invalid sequence, as EF is no continuation byte)."""
    try:
        return data.decode("utf-8"), 0
    except UnicodeDecodeError:
        text = data.decode("utf-8", errors="replace")
        return text, text.count("\ufffd") - data.count(b"\xef\xbf\xbd")


def _read_text(
    source_name: str, source: SourceSpec, file: str, name: str, repairs: Counter[str]
) -> Iterator[tuple[str, str]]:
    try:  # a FIFO, a device or /proc/kmsg is refused, not waited on
        with open_regular(file, "a text file") as f:
            data = f.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as exc:
        raise _open_error(file, exc) from None
    if len(data) > MAX_DOCUMENT_BYTES:
        raise UserError(
            f"{file}: over {MAX_DOCUMENT_BYTES >> 20} MiB; a `text` source's file is one document: split it into "
            "several files, or use format jsonl"
        )
    text, replaced = decode_repairing(data)
    if replaced:
        repairs["invalid_utf8"] += 1
        repairs["invalid_utf8_sequences"] += replaced
    yield name, text
