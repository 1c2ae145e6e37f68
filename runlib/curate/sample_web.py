"""A sample web crawl made on this machine (nothing can be downloaded): pydoc's HTML pages of the standard
library's modules (the HTML Python's own `pydoc -w` writes), wrapped in a site's chrome (header,
navigation, sidebar, footer), written as WARC/1.0 response records (ISO 28500, one gzip member per record
as Common Crawl writes them), with planted cases beside them (`sample_crawl`): mirrored and
near-duplicate pages, a blocklisted domain, banned words in a URL, personal data, a page in another
language and another charset, and the records a crawl holds besides pages (warcinfo, request, 404, 301,
PDF, truncated). `runlib sample-web DIR` writes it for specs/variants/demo-web.yaml; the tests use it too.

Records are written by hand, not by a WARC library, so that a test can plant what a library would refuse
to write: a Content-Length that lies, a cut gzip member, a record of 2 GB announced and never sent."""

from __future__ import annotations

import gzip
import pydoc
import uuid
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path

MODULES = ("json", "csv", "textwrap", "fractions", "heapq", "bisect", "string", "difflib", "statistics", "shlex")
DEMO_MODULES = tuple(
    """abc argparse ast base64 bisect bz2 calendar cmath codecs collections configparser contextlib copy csv
    dataclasses datetime decimal difflib dis email enum filecmp fnmatch fractions functools getopt gettext glob
    gzip hashlib heapq hmac html http inspect io ipaddress itertools json keyword linecache locale logging lzma
    mailbox math mimetypes numbers operator optparse pathlib pickle platform plistlib pprint queue quopri random
    re reprlib sched secrets selectors shelve shlex shutil sqlite3 statistics string struct subprocess tarfile
    tempfile textwrap threading timeit tokenize traceback types typing unicodedata uuid warnings wave weakref
    zipfile zlib""".split()
)
"""The modules of `runlib sample-web`: pure-library modules whose import has no side effect (no window, no
print), about a hundred pages."""
NAV_WORDS = ("HomeSiteBrand", "MenuEntryAlpha", "MenuEntryBeta", "SidebarRelatedLink", "CopyrightFooterNotice")
CONTENT_LIST_ITEM = "Each module page lists its classes, functions and data in the order pydoc finds them"


def module_page(name: str) -> str:
    """pydoc's HTML page of the standard library module `name`, inside a site's chrome."""
    doc = pydoc.HTMLDoc()
    body = doc.docmodule(import_module(name))
    return (
        f"<!DOCTYPE html><html><head><title>{name}</title></head><body>\n"
        f'<header class="site-header"><a href="/">{NAV_WORDS[0]}</a></header>\n'
        f'<nav><ul><li><a href="/a">{NAV_WORDS[1]}</a></li><li><a href="/b">{NAV_WORDS[2]}</a></li></ul></nav>\n'
        f'<div class="sidebar"><ul><li><a href="/r">{NAV_WORDS[3]}</a></li></ul></div>\n'
        f"<main><article><h1>The {name} module</h1>\n"
        f"<p>This page documents the Python standard library module {name}, rendered by pydoc from its "
        f"docstrings; what follows is the module's reference as the interpreter sees it.</p>\n"
        f"<ul><li>{CONTENT_LIST_ITEM}.</li><li>Names that start with an underscore are left out.</li></ul>\n"
        f"{body}\n</article></main>\n"
        f'<footer class="site-footer">{NAV_WORDS[4]} 2024</footer>\n</body></html>\n'
    )


def _topics() -> tuple[str, ...]:
    from pydoc_data.topics import topics

    return tuple(sorted(name for name, text in topics.items() if len(text) > 1500))


DEMO_TOPICS = _topics()
"""The language reference's longer topics (pydoc_data.topics, the text of `help('assert')`): prose pages, where
the module pages are mostly signatures, so that the quality rules have pages to keep."""


_MARKUP = str.maketrans("", "", "\"'`*()[]{}=:<>|")


def topic_page(name: str) -> str:
    """The reference topic `name` as a page of its paragraphs, in the site's chrome."""
    from html import escape
    from pydoc_data.topics import topics

    # the prose only, as plain prose: the grammar and code blocks (indented) and the quotes and brackets around
    # names are punctuation that Gopher's rules count against a page (a token without a letter)
    blocks = [b.translate(_MARKUP) for b in topics[name].split("\n\n") if b.strip() and not b.startswith(" ")]
    body = "\n".join(f"<p>{escape(' '.join(b.split()))}</p>" for b in blocks if b.strip())
    return (
        f"<!DOCTYPE html><html><head><title>{name}</title></head><body>\n"
        f'<header class="site-header"><a href="/">{NAV_WORDS[0]}</a></header>\n'
        f'<nav><ul><li><a href="/a">{NAV_WORDS[1]}</a></li><li><a href="/b">{NAV_WORDS[2]}</a></li></ul></nav>\n'
        f"<main><article><h1>{escape(name)}</h1>\n{body}\n</article></main>\n"
        f'<footer class="site-footer">{NAV_WORDS[4]} 2024</footer>\n</body></html>\n'
    )


@dataclass
class Record:
    url: str
    body: bytes
    status: int = 200
    content_type: str | None = "text/html; charset=utf-8"
    warc_type: str = "response"
    lie_length: int | None = None  # a WARC Content-Length other than the block's
    extra_headers: dict[str, str] = field(default_factory=dict)
    record_id: str = field(default_factory=lambda: f"<urn:uuid:{uuid.uuid4()}>")

    def to_bytes(self) -> bytes:
        head = f"HTTP/1.1 {self.status} {'OK' if self.status == 200 else 'Other'}\r\n"
        if self.content_type is not None:
            head += f"Content-Type: {self.content_type}\r\n"
        http = (head + f"Content-Length: {len(self.body)}\r\n\r\n").encode("latin-1") + self.body
        block = http if self.warc_type in ("response", "revisit") else self.body
        length = len(block) if self.lie_length is None else self.lie_length
        warc = (
            f"WARC/1.0\r\nWARC-Type: {self.warc_type}\r\nWARC-Target-URI: {self.url}\r\n"
            f"WARC-Date: 2024-05-01T10:00:00Z\r\nWARC-Record-ID: {self.record_id}\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in self.extra_headers.items())
            + "Content-Type: "
            + ("application/http; msgtype=response" if self.warc_type == "response" else "application/warc-fields")
            + f"\r\nContent-Length: {length}\r\n\r\n"
        )
        return warc.encode("latin-1") + block + b"\r\n\r\n"


def html_record(url: str, html: str, charset: str = "utf-8", declared: str | None = "utf-8") -> Record:
    content_type = "text/html" + (f"; charset={declared}" if declared else "")
    return Record(url, html.encode(charset), content_type=content_type)


def write_warc(path: Path, records: list[Record], gz: bool = True) -> Path:
    """One gzip member per record (as Common Crawl writes them), or a plain .warc."""
    data = b"".join(gzip.compress(r.to_bytes(), mtime=0) if gz else r.to_bytes() for r in records)
    path.write_bytes(data)
    return path


def site_pages(host: str = "docs.example.org") -> list[Record]:
    """One page per module of MODULES, at https://<host>/<module>.html."""
    return [html_record(f"https://{host}/{name}.html", module_page(name)) for name in MODULES]


GERMAN = (
    "<html><head><meta charset='iso-8859-1'></head><body><main><p>Die Stadt liegt an einem großen Fluss, und "
    "die Menschen, die dort wohnen, gehen jeden Morgen über die alte Brücke zur Arbeit. Im Sommer sitzen sie "
    "am Ufer, lesen Zeitungen und trinken Kaffee, während die Schiffe langsam vorbeifahren. Viele Häuser sind "
    "über dreihundert Jahre alt und wurden aus dem Stein der nahen Berge gebaut.</p></main></body></html>"
)
PII_PARAGRAPH = (
    "For questions about this module write to maintainer.name@python-docs.example.com or call +1 415-555-0132 "
    "(or +44 20 7946 0958 from Europe); the build server is at 203.0.113.77 and 2606:4700:4700::1111. Orders "
    "were paid with card 4539 1488 0343 6467. "
)
BLOCKED_HOST = "ads.tracker-network.example"
BANNED_WORD = "casino"


def _near_duplicate(html: str) -> str:
    """The page with a few words changed, as a mirror that stamps its own date does."""
    return html.replace("rendered by pydoc from its docstrings", "rendered by pydoc from its docstrings (mirror 2)")


def sample_records(modules: tuple[str, ...] = MODULES, topics: tuple[str, ...] = ()) -> list[Record]:
    """One crawl's records: the pages of `modules` and of `topics` (at /reference/<topic>.html) and every
    planted case (module docstring)."""
    pages = {name: module_page(name) for name in modules}
    first = modules[0]
    pii_page = pages[modules[1]].replace("<main><article>", f"<main><article><p>{PII_PARAGRAPH}</p>", 1)
    return [
        Record("", b"software: runlib sample-web\r\nformat: WARC File Format 1.0\r\n", warc_type="warcinfo"),
        *[html_record(f"https://docs.example.org/{n}.html", pages[n]) for n in modules if n != modules[1]],
        html_record(f"https://docs.example.org/{modules[1]}.html", pii_page),
        html_record(f"https://mirror.example.net/{first}.html", pages[first]),  # an exact mirror
        html_record(f"https://copy.example.com/{first}.html", _near_duplicate(pages[first])),
        # pages of their own, so that only the URL filter can drop them
        html_record(f"https://{BLOCKED_HOST}/colorsys.html", module_page("colorsys")),
        html_record(f"https://games.example.org/{BANNED_WORD}-bonus/graphlib.html", module_page("graphlib")),
        html_record("https://stadt.example.de/fluss.html", GERMAN, charset="latin-1", declared=None),
        Record(f"https://docs.example.org/{first}.html", b"GET / HTTP/1.1\r\n\r\n", warc_type="request"),
        Record("https://docs.example.org/gone.html", b"<html>gone</html>", status=404),
        Record("http://docs.example.org/", b"", status=301),
        Record("https://docs.example.org/manual.pdf", b"%PDF-1.4 binary", content_type="application/pdf"),
        Record("https://docs.example.org/cut.html", pages[first].encode(), extra_headers={"WARC-Truncated": "length"}),
        *[html_record(f"https://docs.example.org/reference/{t}.html", topic_page(t)) for t in topics],
    ]


def sample_crawl(
    directory: Path, files: int = 2, modules: tuple[str, ...] = DEMO_MODULES, topics: tuple[str, ...] = ()
) -> list[Path]:
    """Write the sample crawl into `directory`: `files` WARC files (records dealt round-robin) and a
    UT1-style blocklist folder (blocklist/ads/domains). Returns the WARC files."""
    directory.mkdir(parents=True, exist_ok=True)
    records = sample_records(modules, topics)
    paths = []
    for i in range(files):
        paths.append(write_warc(directory / f"crawl-{i:05d}.warc.gz", records[i::files]))
    blocklist = directory / "blocklist" / "ads"
    blocklist.mkdir(parents=True, exist_ok=True)
    (blocklist / "domains").write_text("# sample blocklist\ntracker-network.example\n", encoding="utf-8")
    return paths
