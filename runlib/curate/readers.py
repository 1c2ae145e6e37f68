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

from runlib.errors import UserError
from runlib.spec.models import SourceSpec

_MAGIC = re.compile(r"[*?[]")


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
        raise UserError(
            f"{field}.format: warc input is not supported yet: convert to jsonl (one JSON object per line with a text field)"
        )
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
    opener = gzip.open if file.endswith(".gz") else open
    try:
        with opener(file, "rb") as f:
            for lineno, raw in enumerate(f, start=1):
                try:
                    line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
                except UnicodeDecodeError as exc:
                    raise UserError(
                        f"{file}:{lineno}: not UTF-8 text ({exc.reason} at byte {exc.start} of the line); "
                        "re-encode the file as UTF-8"
                    ) from None
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise UserError(
                        f"{file}:{lineno}: not a JSON object ({exc.msg} at column {exc.colno}); "
                        f"a jsonl file holds one JSON object per line with the text in field {text_field!r}"
                    ) from None
                if not isinstance(obj, dict):
                    raise UserError(
                        f"{file}:{lineno}: a JSON {type(obj).__name__}, not an object; "
                        f"each line must be an object with the text in field {text_field!r}"
                    )
                if text_field not in obj:
                    present = ", ".join(sorted(map(str, obj))) or "none"
                    raise UserError(
                        f"{file}:{lineno}: no field {text_field!r} (fields present: {present}); "
                        f"set {field_path} to the field that holds the text"
                    )
                text = obj[text_field]
                if not isinstance(text, str):
                    kind = "null" if text is None else type(text).__name__
                    raise UserError(
                        f"{file}:{lineno}: field {text_field!r} is {kind}, not a string; check {field_path}"
                    )
                yield f"{name}:{lineno}", text
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise UserError(f"{file}: not a valid gzip file ({exc}); a .gz input must be gzip-compressed jsonl") from None
    except OSError as exc:
        raise _open_error(file, exc) from None


def _read_parquet(
    source_name: str, source: SourceSpec, file: str, name: str, repairs: Counter[str]
) -> Iterator[tuple[str, str]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    text_field = source.input.text_field
    field_path = f"data.sources.{source_name}.input.text_field"
    try:
        pf = pq.ParquetFile(file)
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
    for batch in pf.iter_batches(batch_size=8192, columns=[text_field]):
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
    try:
        data = Path(file).read_bytes()
    except OSError as exc:
        raise _open_error(file, exc) from None
    text, replaced = decode_repairing(data)
    if replaced:
        repairs["invalid_utf8"] += 1
        repairs["invalid_utf8_sequences"] += replaced
    yield name, text
