"""Benchmark the two HTML extractors of input.extract on the same pages: speed, and how far their texts agree.

    python -m runlib.bench.extract_compare [--repeats 3] [--quick]

The pages: `runlib sample-web`'s (runlib.curate.sample_web: pydoc's module pages and the language reference's
topics, each in a site's chrome of header, navigation, sidebar and footer). Each round extracts every page with
resiliparse, then with trafilatura (runlib.curate.extract.extract_text, as curate_shard calls it), on one
process; the medians of --repeats rounds give pages per second. Agreement per page: the Jaccard of the two
texts' word sets (lowercased runs of letters and digits), and whether the site chrome (NAV_WORDS) is gone from
each. Peer: each extractor is the other's; DCLM uses resiliparse, FineWeb trafilatura.
"""

from __future__ import annotations

import argparse
import re
import statistics
import time

from runlib.curate.extract import EXTRACTORS, extract_text
from runlib.curate.sample_web import DEMO_MODULES, DEMO_TOPICS, NAV_WORDS, module_page, topic_page

_WORD_RE = re.compile(r"[^\W_]+")


def pages(quick: bool) -> list[str]:
    modules, topics = (DEMO_MODULES[:6], DEMO_TOPICS[:6]) if quick else (DEMO_MODULES, DEMO_TOPICS)
    return [module_page(m) for m in modules] + [topic_page(t) for t in topics]


def word_jaccard(a: str, b: str) -> float:
    left, right = set(_WORD_RE.findall(a.lower())), set(_WORD_RE.findall(b.lower()))
    return len(left & right) / len(left | right) if left | right else 1.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runlib.bench.extract_compare", description=__doc__)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--quick", action="store_true", help="12 pages and one round (the test suite's smoke run)")
    args = parser.parse_args(argv)
    html = pages(args.quick)
    repeats = 1 if args.quick else max(1, args.repeats)
    seconds: dict[str, list[float]] = {e: [] for e in EXTRACTORS}
    texts: dict[str, list[str]] = {}
    for _ in range(repeats):
        for extractor in EXTRACTORS:
            started = time.perf_counter()
            texts[extractor] = [extract_text(page, extractor) for page in html]
            seconds[extractor].append(time.perf_counter() - started)
    megabytes = sum(len(page.encode()) for page in html) / 1e6
    print(f"{len(html)} pages, {megabytes:.1f} MB of HTML; median of {repeats} interleaved round(s), one process")
    print(f"{'extractor':<12} {'pages/s':>9} {'MB/s':>7} {'chars out':>10} {'chrome left':>12}")
    rates = {}
    for extractor in EXTRACTORS:
        wall = statistics.median(seconds[extractor])
        rates[extractor] = len(html) / wall
        chrome = sum(any(w in text for w in NAV_WORDS) for text in texts[extractor])
        chars = sum(map(len, texts[extractor]))
        print(f"{extractor:<12} {rates[extractor]:>9.1f} {megabytes / wall:>7.2f} {chars:>10,} {chrome:>12}")
    ratio = rates["resiliparse"] / rates["trafilatura"]
    jaccards = [word_jaccard(a, b) for a, b in zip(texts["resiliparse"], texts["trafilatura"], strict=True)]
    print(f"resiliparse / trafilatura pages/s: {ratio:.2f}x")
    print(
        f"word-set Jaccard per page: median {statistics.median(jaccards):.3f}, min {min(jaccards):.3f}; "
        f"pages >= 0.9: {sum(j >= 0.9 for j in jaccards)} of {len(jaccards)}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
