"""Text extraction from HTML (data.sources.*.input.extract): the page's main content as plain text.

resiliparse (the default): `extract_plain_text(main_content=True)` from resiliparse.extract.html2text, the
extractor DCLM uses on Common Crawl (Li et al. 2024, arXiv 2406.11794, section 3.1 and appendix H: resiliparse
text in place of Common Crawl's WET files). Its main-content mode drops navigation, headers, footers,
sidebars and forms by element and class heuristics; paragraphs, code blocks (<pre>, formatting kept) and
tables (cells separated) stay as text. Alt texts and link targets are left out.
Lists: resiliparse 2.0.1's main-content mode drops every <ul>, content or not (measured: a list of prose
items inside <main> or <article> is gone; an <ol> stays), because navigation menus are made of them. Before
it runs, each <ul> with no navigation container around it (nav, header, footer, aside, menu, form, or a class
or id that names a menu, sidebar, footer, header, breadcrumb, banner, toolbar, pagination, share or social
block) becomes an <ol>, so a content list is kept, as numbered lines, and menus still go.

trafilatura: `trafilatura.extract` as FineWeb's pipeline calls it through datatrove's Trafilatura step
(Penedo et al. 2024, arXiv 2406.17557, section 3.2: favour precision, no comments), tables included, but
without its `deduplicate`: that option counts the text segments of every page the process extracted before
(a process-wide LRU cache, trafilatura/deduplication.py), so the fourth extraction of the same page came back
empty (measured with trafilatura 2.3.1), and a page's text depended on which pages its job saw first. The
dedup steps do that work here, by content.

Both are deterministic for the same HTML and library version (a test extracts a page five times); the
version is part of the stage's key (runlib.curate.config.CurateShardConfig.extractor).
"""

from __future__ import annotations

import re
from importlib.metadata import version
from typing import Literal

import lxml.html
from lxml import etree
from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import HTMLTree

Extractor = Literal["resiliparse", "trafilatura"]
EXTRACTORS: tuple[Extractor, ...] = ("resiliparse", "trafilatura")
_PACKAGES = {"resiliparse": "resiliparse", "trafilatura": "trafilatura"}


def extractor_version(extractor: Extractor) -> str:
    """'resiliparse 2.0.1': the library and version whose output a curated shard holds."""
    return f"{extractor} {version(_PACKAGES[extractor])}"


_NAVIGATION_NAME = re.compile(
    r"nav|menu|sidebar|footer|header|breadcrumb|banner|masthead|toolbar|pagination|share|social", re.IGNORECASE
)
_NAVIGATION_TAGS = frozenset({"nav", "header", "footer", "aside", "menu", "form"})


def _is_navigation(element: lxml.html.HtmlElement) -> bool:
    names = f"{element.get('class') or ''} {element.get('id') or ''}"
    return element.tag in _NAVIGATION_TAGS or bool(_NAVIGATION_NAME.search(names))


def keep_content_lists(html: str) -> str:
    """`html` with each <ul> outside navigation turned into an <ol> (see the module docstring)."""
    if "<ul" not in html and "<UL" not in html:
        return html
    try:
        root = lxml.html.document_fromstring(html)
    except (etree.ParserError, ValueError):  # no document (empty, or only a comment): nothing to keep
        return html
    changed = False
    for ul in root.iter("ul"):
        if not _is_navigation(ul) and not any(_is_navigation(a) for a in ul.iterancestors()):
            ul.tag = "ol"
            changed = True
    return lxml.html.tostring(root, encoding="unicode") if changed else html


def extract_text(html: str, extractor: Extractor) -> str:
    """The main content of `html` as plain text ('' when the extractor finds none)."""
    if extractor == "resiliparse":
        text: str = extract_plain_text(
            HTMLTree.parse(keep_content_lists(html)),
            main_content=True,
            alt_texts=False,
            links=False,
            list_bullets=True,
            preserve_formatting=True,
        )
        return text.strip()
    import trafilatura  # lxml and its html cleaner: loaded only by a source that asks for it

    found = trafilatura.extract(
        html, favor_precision=True, include_comments=False, include_tables=True, deduplicate=False
    )
    return (found or "").strip()
