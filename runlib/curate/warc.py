"""WARC input (data.sources.*.input.format: warc): the HTML pages of a crawl's response records.

Files are `.warc` or `.warc.gz` (ISO 28500:2017, WARC/1.0 and 1.1; Common Crawl writes one gzip member
per record), read with FastWARC (resiliparse project, `fastwarc.warc.ArchiveIterator`). A record becomes
a page when it is a response (WARC-Type: response) with HTTP status 200 and an HTML content type
(text/html or application/xhtml+xml; a response without one is sniffed for an HTML start). Every other
record is skipped and counted by reason:
    not_response   warcinfo, request, metadata, revisit, resource, conversion records
    not_200        any other HTTP status (redirects, errors)
    not_html       another content type (PDF, images, JSON, plain text)
    truncated      a payload shorter than its Content-Length (a cut file), or marked WARC-Truncated by the
                   crawler (Common Crawl cuts payloads at 1 MiB: the page is incomplete)
    too_large      a payload over MAX_HTML_BYTES: skipped without being read into memory
    undecodable    no charset among the HTTP header's, the page's meta tag's and the detected one decodes it
    malformed      a response with no parseable HTTP headers, or a record whose Content-Length lies: the
                   reader resynchronizes at the next record start (the next gzip member, or the next
                   "WARC/1." line of an uncompressed file) and goes on
The charset: the HTTP Content-Type's, else the page's `<meta charset>` or `http-equiv` declaration in its
first 1024 bytes (the WHATWG HTML prescan window), else resiliparse's detection; labels are mapped as the
WHATWG Encoding Standard maps them (iso-8859-1 and us-ascii are windows-1252), and the first that decodes
the whole payload wins.
A page keeps its WARC-Target-URI (the document's id), WARC-Date and WARC-Record-ID.
"""

from __future__ import annotations

import codecs
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from fastwarc.warc import ArchiveIterator, WarcRecord, WarcRecordType
from resiliparse.parse.encoding import detect_encoding

from runlib.errors import UserError
from runlib.util.userfile import open_regular

MAX_HTML_BYTES = 8 << 20
"""An HTML payload over 8 MiB is skipped (too_large) unread: Common Crawl's pages are at most 1 MiB (its
crawler truncates there) and the median page is tens of KiB; a bigger one is a dump, not a page."""

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
SKIP_REASONS = ("not_response", "not_200", "not_html", "truncated", "too_large", "undecodable", "malformed")
PRESCAN_BYTES = 1024  # WHATWG HTML, "prescan a byte stream to determine its encoding": the first 1024 bytes
MAX_RESYNCS = 10_000  # per file: a file that is corrupt everywhere stops with an error, not a slow scan
_RESYNC_CHUNK = 1 << 20

_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([a-zA-Z0-9_.:-]+)""", re.IGNORECASE)
# WHATWG Encoding Standard, section 4.2 "Names and labels": these labels name windows-1252
_WHATWG_1252 = frozenset({"latin_1", "iso8859-1", "ascii", "us-ascii", "iso-8859-1", "cp1252", "windows-1252"})


@dataclass(frozen=True)
class WebPage:
    record_id: str  # WARC-Record-ID, unique per record
    url: str  # WARC-Target-URI
    date: str  # WARC-Date (ISO 8601)
    html: str
    charset: str  # the codec that decoded it


def _codec(label: str | bytes | None) -> str | None:
    if not label:
        return None
    name = label.decode("ascii", "replace") if isinstance(label, bytes) else label
    name = name.strip().strip("\"'").lower()
    if name in _WHATWG_1252:
        return "cp1252"
    try:
        return codecs.lookup(name).name
    except LookupError:  # an unknown label: the next candidate
        return None


def decode_html(body: bytes, http_charset: str | None) -> tuple[str, str] | None:
    """(text, codec) by the first candidate charset that decodes `body` whole; None: none does."""
    meta = _META_CHARSET.search(body[:PRESCAN_BYTES])
    candidates = [_codec(http_charset), _codec(meta.group(1) if meta else None)]
    candidates.append(_codec(detect_encoding(body)))
    for codec in dict.fromkeys(c for c in candidates if c):
        try:
            return body.decode(codec), codec
        except UnicodeDecodeError:
            continue
    return None


def _looks_like_html(body: bytes) -> bool:
    head = body[:512].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html")) or b"<html" in head


def _next_record_start(f: BinaryIO, after: int, gz: bool) -> int | None:
    """The offset of the next record start strictly after `after`: a gzip member header, or a WARC version line."""
    magic = b"\x1f\x8b\x08" if gz else b"WARC/1."
    position = after + 1
    while True:
        f.seek(position)
        chunk = f.read(_RESYNC_CHUNK + len(magic))
        if not chunk:
            return None
        found = chunk.find(magic)
        if found >= 0 and (gz or found == 0 or chunk[found - 1 : found] == b"\n"):
            return position + found
        if found >= 0:  # "WARC/1." inside a line: not a record start
            position += found + 1
            continue
        if len(chunk) <= len(magic):
            return None
        position += len(chunk) - len(magic)


def read_warc(file: str, counts: Counter[str], max_html_bytes: int = MAX_HTML_BYTES) -> Iterator[WebPage]:
    """The HTML pages of one WARC file in record order; skipped records counted into `counts` by reason
    (and every record read under "records")."""
    with open_regular(file, "a WARC file") as f:
        gz = f.read(2) == b"\x1f\x8b"
        start, resyncs, seen = 0, 0, 0
        last, last_reason = -1, None  # the latest record's offset and why it was skipped (None: a page)
        while True:
            f.seek(start)
            records = ArchiveIterator(f, record_types=WarcRecordType.any_type, parse_http=True, fsspec_args=False)
            try:
                for record in records:
                    seen += 1
                    last = record.stream_pos
                    counts["records"] += 1
                    page, last_reason = _classify(record, max_html_bytes)
                    if page is None:
                        counts[last_reason or "malformed"] += 1
                    else:
                        yield page
                return
            except OSError as exc:  # a lying Content-Length or a corrupt member: skip to the next record
                if seen == 0:
                    raise UserError(
                        f"{file}: not a WARC file ({exc}); input.format warc reads .warc and .warc.gz files"
                    ) from None
                _count_break(counts, last_reason)
                last_reason = "malformed"
                resyncs += 1
                if resyncs > MAX_RESYNCS:
                    raise UserError(
                        f"{file}: over {MAX_RESYNCS} malformed records; the file is corrupt: fetch it again"
                    ) from None
                found = _next_record_start(f, max(last, start), gz)
                if found is None:
                    return
                start = found


def _count_break(counts: Counter[str], last_reason: str | None) -> None:
    """A read error after a record means that record's Content-Length was wrong: it counts as malformed
    (instead of the reason it was skipped for); after a page, the unreadable rest counts as one record."""
    if last_reason == "malformed":
        return
    if last_reason is None:
        counts["records"] += 1
    else:
        counts[last_reason] -= 1
    counts["malformed"] += 1


def _classify(record: WarcRecord, max_html_bytes: int) -> tuple[WebPage | None, str | None]:
    """(the page, None), or (None, why the record is skipped)."""
    headers = record.headers
    if record.record_type != WarcRecordType.response:
        return None, "not_response"
    http = record.http_headers
    if http is None:
        return None, "malformed"
    if http.status_code != 200:
        return None, "not_200"
    content_type = (record.http_content_type or "").lower()
    length = int(record.content_length)
    if length > max_html_bytes:
        return None, "too_large"
    if content_type and content_type not in HTML_TYPES:
        return None, "not_html"
    body = record.reader.read(max_html_bytes + 1)
    if len(body) < length or headers.get("WARC-Truncated"):
        return None, "truncated"
    if not content_type and not _looks_like_html(body):
        return None, "not_html"
    decoded = decode_html(body, record.http_charset)
    if decoded is None:
        return None, "undecodable"
    html, charset = decoded
    url = headers.get("WARC-Target-URI") or ""
    return WebPage(headers.get("WARC-Record-ID") or url, url, headers.get("WARC-Date") or "", html, charset), None
