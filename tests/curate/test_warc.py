"""WARC input: records that become pages and records skipped by reason, charsets, malformed files, and
the web source's shard through curate_shard (URL as id, metadata beside the text, the funnel's rows)."""

import gzip
import json
import time
from collections import Counter
from pathlib import Path

import pytest

from runlib.curate.counts import validate_counts
from runlib.curate.extract import EXTRACTORS, extract_text, keep_content_lists
from runlib.curate.sample_web import (
    CONTENT_LIST_ITEM,
    MODULES,
    NAV_WORDS,
    Record,
    html_record,
    module_page,
    site_pages,
    write_warc,
)
from runlib.curate.stage import curate_shard
from runlib.curate.warc import read_warc
from runlib.errors import UserError
from runlib.graph.configs import curate_shard_configs
from tests.curate import make_spec, read_lines

LATIN = "<html><head><meta charset='iso-8859-1'></head><body><p>Caf\xe9 cr\xe8me br\xfbl\xe9e, na\xefve fa\xe7ade.</p></body></html>"
JAPANESE = "<html><body><p>" + "日本語の文章です。これはテストのためのページです。" * 8 + "</p></body></html>"


def planted() -> list[Record]:
    """Every kind of record a crawl holds, each once, around the good pages."""
    good = site_pages()
    return [
        Record("", b"software: test\r\nformat: WARC File Format 1.0\r\n", warc_type="warcinfo"),
        good[0],
        Record("https://docs.example.org/json.html", b"GET /json.html HTTP/1.1\r\n\r\n", warc_type="request"),
        Record("https://docs.example.org/missing.html", b"<html>gone</html>", status=404),
        Record("http://docs.example.org/", b"", status=301),
        Record("https://docs.example.org/manual.pdf", b"%PDF-1.4 binary", content_type="application/pdf"),
        Record(
            "https://docs.example.org/cut.html", module_page("csv").encode(), extra_headers={"WARC-Truncated": "length"}
        ),
        html_record("https://latin.example.org/cafe.html", LATIN, charset="latin-1", declared=None),
        html_record("https://jp.example.org/page.html", JAPANESE, charset="shift_jis", declared="x-no-such-charset"),
        *good[1:],
    ]


def test_pages_and_skips_by_reason(tmp_path):
    path = write_warc(tmp_path / "crawl.warc.gz", planted())
    counts: Counter[str] = Counter()
    pages = list(read_warc(str(path), counts))
    assert [p.url for p in pages] == [
        "https://docs.example.org/json.html",
        "https://latin.example.org/cafe.html",
        "https://jp.example.org/page.html",
        *[f"https://docs.example.org/{m}.html" for m in MODULES[1:]],
    ]
    assert counts == Counter(records=18, not_response=2, not_200=2, not_html=1, truncated=1)
    latin, japanese = pages[1], pages[2]
    assert "Café crème brûlée, naïve façade." in latin.html and latin.charset == "cp1252"  # the meta tag's
    assert "日本語の文章です" in japanese.html and japanese.charset == "shift_jis"  # an unknown label: detected
    assert pages[0].date == "2024-05-01T10:00:00Z" and pages[0].record_id.startswith("<urn:uuid:")
    assert len({p.record_id for p in pages}) == len(pages)


def test_a_plain_warc_reads_as_the_gzipped_one(tmp_path):
    records = planted()
    a, b = Counter[str](), Counter[str]()
    gz = [p.url for p in read_warc(str(write_warc(tmp_path / "a.warc.gz", records)), a)]
    plain = [p.url for p in read_warc(str(write_warc(tmp_path / "a.warc", records, gz=False)), b)]
    assert gz == plain and a == b


@pytest.mark.parametrize("gz", [True, False])
def test_a_lying_content_length_costs_that_record_only(tmp_path, gz):
    good = site_pages()
    liar = html_record("https://liar.example.org/", "<html><body><p>short</p></body></html>")
    liar.lie_length = 12
    path = write_warc(tmp_path / ("l.warc.gz" if gz else "l.warc"), [good[0], liar, *good[1:3]], gz=gz)
    counts: Counter[str] = Counter()
    urls = [p.url for p in read_warc(str(path), counts)]
    assert urls == [good[0].url, good[1].url, good[2].url]
    assert counts["malformed"] == 1 and counts["records"] == 4


def test_a_cut_file_counts_its_last_record_truncated(tmp_path):
    good = site_pages()
    data = b"".join(gzip.compress(r.to_bytes(), mtime=0) for r in good[:3])
    path = tmp_path / "cut.warc.gz"
    path.write_bytes(data[: len(data) - 200])
    counts: Counter[str] = Counter()
    urls = [p.url for p in read_warc(str(path), counts)]
    assert urls == [good[0].url, good[1].url]
    assert counts["truncated"] == 1


def test_a_2_gb_record_is_skipped_unread_and_fast(tmp_path):
    huge = html_record("https://big.example.org/", "<html><body>" + "x" * 1000 + "</body></html>")
    huge.lie_length = 2 << 30  # announced, never sent: a reader that allocates or waits for it fails
    path = write_warc(tmp_path / "big.warc.gz", [site_pages()[0], huge])
    counts: Counter[str] = Counter()
    started = time.monotonic()
    urls = [p.url for p in read_warc(str(path), counts)]
    assert urls == ["https://docs.example.org/json.html"]
    assert counts["too_large"] == 1
    assert time.monotonic() - started < 30  # bounded, whatever the load: a read of 2 GB would not be


def test_undecodable_page_is_counted(tmp_path):
    body = b"<html><body><p>" + bytes([0x81, 0x8D, 0x8F, 0x90, 0x9D, 0xFF, 0xFE]) * 40 + b"</p></body></html>"
    record = Record("https://bytes.example.org/", body, content_type="text/html; charset=utf-8")
    counts: Counter[str] = Counter()
    pages = list(read_warc(str(write_warc(tmp_path / "u.warc.gz", [record])), counts))
    assert (len(pages), counts["undecodable"]) in {(0, 1), (1, 0)}  # counted when no charset decodes it
    if pages:  # a detector's single-byte guess decoded it: then every byte became a character
        assert len(pages[0].html) >= len(body) // 2


@pytest.mark.parametrize("content", [b"", b"this is not a WARC file\n" * 50, b"\x1f\x8b\x08garbage"])
def test_not_a_warc_file_is_a_clear_error(tmp_path, content):
    path = tmp_path / "bad.warc.gz"
    path.write_bytes(content)
    counts: Counter[str] = Counter()
    if not content:  # an empty file holds no record: nothing to read, nothing wrong
        assert list(read_warc(str(path), counts)) == []
        return
    with pytest.raises(UserError, match="not a WARC file"):
        list(read_warc(str(path), counts))


@pytest.mark.parametrize("extractor", ["resiliparse", "trafilatura"])
def test_extraction_keeps_content_and_drops_the_site_chrome(extractor):
    text = extract_text(module_page("json"), extractor).replace("\xa0", " ")  # pydoc writes &nbsp;
    assert "The json module" in text
    assert "JSON (JavaScript Object Notation)" in text  # pydoc's module docstring
    assert CONTENT_LIST_ITEM in text  # a list of the content
    assert not [w for w in NAV_WORDS if w in text]


def test_content_lists_become_ordered_and_menus_stay_as_they_are():
    html = (
        '<html><body><nav><ul><li>a</li></ul></nav><div class="main-menu"><ul><li>b</li></ul></div>'
        "<main><ul><li>kept</li></ul></main></body></html>"
    )
    out = keep_content_lists(html)
    assert out.count("<ol>") == 1 and out.count("<ul>") == 2
    assert keep_content_lists("") == "" and keep_content_lists("<p>no list</p>") == "<p>no list</p>"


def _web_spec(tmp_path: Path, **curate):
    source = {"domain": "web", "input": {"format": "warc", "path": "crawl/*.warc.gz"}, "curate": curate}
    return make_spec({"web": source})


def test_a_web_shard_through_curate_shard(tmp_path):
    (tmp_path / "crawl").mkdir()
    write_warc(tmp_path / "crawl" / "a.warc.gz", planted())
    (tmp_path / "blocked").write_text("# blocked hosts\nlatin.example.org\n")
    spec = _web_spec(tmp_path, url_filter={"blocklist": "blocked", "banned_words": ["textwrap"]}, min_chars=100)
    (config,) = curate_shard_configs(spec)["web"]
    assert config.extractor.startswith("resiliparse ") and [f.path for f in config.url_blocklist] == ["blocked"]
    stats = curate_shard(config, tmp_path / "out", "web")
    steps = {row["step"]: row for row in stats["steps"]}
    assert [row["step"] for row in stats["steps"]][:4] == ["warc_records", "url_filter", "extract", "normalize"]
    assert steps["warc_records"]["docs_in"] == 18 and steps["warc_records"]["docs_out"] == 12
    assert steps["warc_records"]["reasons"]["not_response"] == 2
    assert steps["url_filter"]["reasons"]["blocked_domain"] == 1 and steps["url_filter"]["reasons"]["banned_word"] == 1
    validate_counts(stats["steps"])
    assert stats["counts"]["docs_read"] == 18
    rows = read_lines(tmp_path / "out" / "docs.jsonl")
    urls = [r["id"] for r in rows]
    assert "https://docs.example.org/json.html" in urls
    assert "https://latin.example.org/cafe.html" not in urls and "https://docs.example.org/textwrap.html" not in urls
    first = rows[urls.index("https://docs.example.org/json.html")]
    assert set(first) == {"id", "text", "sha256", "url", "date", "warc_record_id"}
    assert first["url"] == first["id"] and first["date"] == "2024-05-01T10:00:00Z"
    assert not [w for w in NAV_WORDS if w in first["text"]]
    assert json.loads((tmp_path / "out" / "stats.json").read_text())["steps"] == stats["steps"]


def test_the_extractor_and_the_blocklist_are_in_the_key(tmp_path):
    (tmp_path / "crawl").mkdir()
    write_warc(tmp_path / "crawl" / "a.warc.gz", site_pages()[:2])
    (tmp_path / "blocked").write_text("a.example\n")
    base = curate_shard_configs(_web_spec(tmp_path))["web"][0]
    other = curate_shard_configs(
        make_spec(
            {"web": {"domain": "web", "input": {"format": "warc", "path": "crawl/*.warc.gz", "extract": "trafilatura"}}}
        )
    )["web"][0]
    listed = curate_shard_configs(_web_spec(tmp_path, url_filter={"blocklist": "blocked"}))["web"][0]
    (tmp_path / "blocked").write_text("b.example\n")
    edited = curate_shard_configs(_web_spec(tmp_path, url_filter={"blocklist": "blocked"}))["web"][0]
    dumps = {c.model_dump_json() for c in (base, other, listed, edited)}
    assert len(dumps) == 4


@pytest.mark.parametrize("extractor", EXTRACTORS)
def test_extraction_does_not_depend_on_the_pages_extracted_before(extractor):
    """trafilatura's own deduplicate option remembers every page the process saw: the fourth extraction of a
    page came back empty with it on."""
    page = module_page("heapq")
    texts = {extract_text(page, extractor) for _ in range(5)}
    assert len(texts) == 1 and len(texts.pop()) > 500
