"""A warc source's shard up to plain text: records -> HTML pages -> URL filter -> extraction, streamed.

Three count rows come before curate_shard's normalize step, so that the funnel starts at the crawl:
    warc_records  filter     records read (docs_in) -> HTML pages (docs_out), skips by reason
                             (runlib.curate.warc); characters are the pages' decoded HTML on both sides
                             (a skipped record is never decoded)
    url_filter    filter     curate.url_filter: blocked_domain, blocked_url, banned_word, bad_url
                             (runlib.curate.urlfilter); characters of HTML
    extract       transform  HTML -> the main content's text (input.extract; runlib.curate.extract);
                             a page with no text stays, as '' (the length step drops it as empty)
Only one page's HTML is in memory at a time. A document's id in docs.jsonl is its URL; its WARC-Date and
WARC-Record-ID travel beside it (`meta`), keyed inside the shard by the record id, which is unique where a
URL may be crawled twice.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from runlib.curate.config import CurateShardConfig
from runlib.curate.dropped import DroppedSample
from runlib.curate.extract import extract_text
from runlib.curate.urlfilter import Blocklist, read_blocklist, url_reason
from runlib.curate.warc import SKIP_REASONS, read_warc

Doc = tuple[str, str]  # (record id, text)
URL_REASONS = ("bad_url", "blocked_domain", "blocked_url", "banned_word")


def _row(
    step: str, kind: str, docs: tuple[int, int], chars: tuple[int, int], reasons: dict[str, int]
) -> dict[str, Any]:
    return {
        "step": step,
        "kind": kind,
        "docs_in": docs[0],
        "docs_out": docs[1],
        "chars_in": chars[0],
        "chars_out": chars[1],
        "reasons": reasons,
    }


def read_web_shard(
    source_name: str, config: CurateShardConfig, paths: list[str], limit: int | None, dropped: DroppedSample
) -> tuple[list[Doc], dict[str, dict[str, str]], list[dict[str, Any]]]:
    """(docs, meta by record id, the three count rows) of one shard's WARC files; `limit`: at most this
    many HTML pages (input.max_docs' share of the shard). A page the URL filter drops goes to `dropped` with
    its URL and an empty text (it is never extracted)."""
    url_filter = config.curate.url_filter
    field = f"data.sources.{source_name}.curate.url_filter"
    blocklist = (
        read_blocklist([Path(f.path) for f in config.url_blocklist], f"{field}.blocklist")
        if config.url_blocklist
        else Blocklist(frozenset(), frozenset())
    )
    banned = frozenset(w.lower() for w in url_filter.banned_words) if url_filter is not None else frozenset()
    extractor = config.input.extract or "resiliparse"
    records: Counter[str] = Counter()
    url_reasons: Counter[str] = Counter()
    docs: list[Doc] = []
    meta: dict[str, dict[str, str]] = {}
    pages = html_chars = kept_html_chars = text_chars = 0
    for path in paths:
        for page in read_warc(path, records):
            if limit is not None and pages >= limit:
                records["records"] -= 1  # read past the limit, not taken: as if never read
                break
            pages += 1
            html_chars += len(page.html)
            reason = url_reason(page.url, blocklist, banned) if url_filter is not None else None
            fields = {"id": page.url, "url": page.url, "date": page.date, "warc_record_id": page.record_id}
            if reason is not None:
                url_reasons[reason] += 1
                dropped.add("url_filter", reason, page.url, "", fields)
                continue
            kept_html_chars += len(page.html)
            text = extract_text(page.html, extractor)
            text_chars += len(text)
            docs.append((page.record_id, text))
            meta[page.record_id] = fields
        if limit is not None and pages >= limit:
            break
    rows = [
        _row(
            "warc_records",
            "filter",
            (records["records"], pages),
            (html_chars, html_chars),
            {reason: records[reason] for reason in SKIP_REASONS},
        )
    ]
    if url_filter is not None:
        rows.append(
            _row(
                "url_filter",
                "filter",
                (pages, len(docs)),
                (html_chars, kept_html_chars),
                {reason: url_reasons[reason] for reason in URL_REASONS},
            )
        )
    rows.append(_row("extract", "transform", (len(docs), len(docs)), (kept_html_chars, text_chars), {}))
    rows[-1]["extractor"] = config.extractor
    return docs, meta, rows
