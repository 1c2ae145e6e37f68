"""Benchmark web curation: runlib's stages against datatrove 0.10's FineWeb pipeline on the same WARC files.

    python -m runlib.bench.curate_web [--files 4] [--modules 87] [--repeats 3] [--work DIR] [--profile] [--quick]

The crawl: runlib.curate.sample_web.sample_crawl, the pydoc pages of the first --modules of DEMO_MODULES
with the planted cases (an exact mirror and a near-duplicate copy of the first page, a blocklisted host, a
banned word in a URL, a page in German, warcinfo/request/404/301/PDF/truncated records), dealt over --files
WARC files, and its blocklist. Both sides run the same steps on it, on one core (the process, and the
subprocesses it starts, pinned to one CPU), each into a folder of its own:
  runlib     curate_shard on one shard of all the files (url_filter, extract, normalize, length, the quality
             rule sets gopher, c4, fineweb, exact_dedup, MinHash signatures), then dedup_partition, curate_source
             and filter_shard (MinHash near-duplicates: LSH candidates verified by exact Jaccard, clustered,
             the kept pages written out); the stage functions called directly,
             as the workflow's jobs call them, with curate.keep_dropped on (every dropped page recorded)
  datatrove  examples/fineweb.py of huggingface/datatrove at 7024aec (the 0.10.0 release): WarcReader,
             URLFilter, Trafilatura(favour_precision=True), GopherRepetitionFilter, GopherQualityFilter,
             C4QualityFilter, FineWebQualityFilter, JsonlWriter, each filter with an exclusion_writer as there;
             then MinhashDedupSignature, MinhashDedupBuckets, MinhashDedupCluster, MinhashDedupFilter, each
             through LocalPipelineExecutor(tasks=1, workers=1) (stage 2: tasks = bands, as it requires)
Kept the same for both: the crawl's blocklist and banned word (datatrove's bundled lists, which ship in its
wheel and need no download, are off: use_integrated_lists=False); MinHash of word 5-grams, 20 bands x 5
rows (runlib's MinhashSpec defaults; datatrove's signatures are FineWeb's sha1 64-bit hashes, its LSH
candidates are not verified, runlib's are at Jaccard >= 0.72); C4 with datatrove's defaults, which runlib
implements (fineweb.py turned filter_no_terminal_punct off). Language identification is left out of both:
datatrove's LanguageFilter downloads its fastText model at run time. tldextract (datatrove's URL parsing)
reads its bundled public suffix list (no fetch) and takes the crawl's reserved TLD "example" as a suffix.

Two configurations: (a) each side's default extractor (runlib: resiliparse; datatrove: trafilatura), (b)
both trafilatura. datatrove's pipeline is the same in both, so each round runs runlib (resiliparse),
runlib (trafilatura), datatrove, --repeats rounds after an untimed warm-up on a small crawl (imports: spaCy,
which datatrove's word tokenizer loads, takes seconds); medians. docs/s/core: the crawl's WARC records over
the wall seconds of the whole pipeline on one core. Agreement: Jaccard of the kept URL sets; for each URL
kept by one side only, the step of the other side that dropped it (runlib's dropped.jsonl, datatrove's
exclusion files; pages datatrove read but neither excluded nor kept went at its extractor: no text, or past
its 1 s timeout per page). Goals, printed beside the figures and not asserted: (a) runlib >= 5x datatrove
docs/s/core; (b) agreement >= 0.95 and runlib no slower than datatrove. --profile: runlib's side once more
per extractor under cProfile, the functions with the most own time; --quick: a small crawl, one round.
datatrove and what its steps import: `pip install datatrove==0.10.0 warcio faust-cchardet python-magic
tldextract pyahocorasick fasteners orjson spacy`; without them the datatrove side is reported and skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gzip
import importlib
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastwarc.warc import ArchiveIterator, WarcRecordType

from runlib.curate.config import (
    CurateShardConfig,
    CurateSourceConfig,
    DedupPartitionConfig,
    FilterShardConfig,
    InputFile,
)
from runlib.curate.extract import EXTRACTORS, Extractor, extractor_version
from runlib.curate.files import DROPPED_FILE, HELDOUT_FILE, TRAIN_FILE
from runlib.curate.filter_shard import filter_shard
from runlib.curate.partition import dedup_partition
from runlib.curate.sample_web import BANNED_WORD, DEMO_MODULES, DEMO_TOPICS, sample_crawl
from runlib.curate.source import curate_source
from runlib.curate.stage import curate_shard
from runlib.curate.urlfilter import read_blocklist
from runlib.curate.warc import MAX_HTML_BYTES, _classify  # read_warc's own verdict on one record
from runlib.errors import UserError
from runlib.spec.models import CurateSpec, DedupSpec, InputSpec, MinhashSpec, UrlFilterSpec
from runlib.util.hashing import file_digest

MINHASH = MinhashSpec()
KEEP_ALL = 10_000  # curate.keep_dropped's maximum: every dropped page of this crawl is recorded
RESERVED_TLDS = ("example",)  # RFC 2606: the crawl's hosts; not in the public suffix list
STAGES = ("read", "url_filter", "extract", "gopher", "c4", "fineweb", "dedup")
RUNLIB_STAGE = {
    "warc_records": "read",
    "url_filter": "url_filter",
    "extract": "extract",
    "normalize": "extract",
    "length": "extract",
    "gopher_quality": "gopher",
    "gopher_repetition": "gopher",
    "c4_quality": "c4",
    "fineweb_quality": "fineweb",
    "exact_dedup": "dedup",
    "cross_shard_dedup": "dedup",
    "minhash_dedup": "dedup",
}
# datatrove's steps with an exclusion writer: (the folder it writes, the stage, its class)
DATATROVE_EXCLUDED = (
    ("url", "url_filter", "URLFilter"),
    ("gopher_rep", "gopher", "GopherRepetitionFilter"),
    ("gopher_qual", "gopher", "GopherQualityFilter"),
    ("c4", "c4", "C4QualityFilter"),
    ("fineweb_qual", "fineweb", "FineWebQualityFilter"),
    ("minhash", "dedup", "MinhashDedupFilter"),
)
# what datatrove's steps import: its extras io and processing, and spaCy, its English word tokenizer (every
# step's _requires_dependencies and src/datatrove/utils/word_tokenizers.py at 7024aec)
DATATROVE_NEEDS = tuple("datatrove warcio cchardet magic tldextract ahocorasick fasteners orjson spacy".split())
KEPT = ("kept", "")
QUICK_MODULES = ("bisect", "fnmatch", "glob", "linecache")  # small pages of DEMO_MODULES, for --quick
Fate = tuple[str, str]  # (stage, "step: reason") or KEPT


# ---------------------------------------------------------------------------------------------- crawl


@dataclass(frozen=True)
class Crawl:
    directory: Path
    warcs: list[Path]
    blocklist: Path
    modules: tuple[str, ...]
    records: int
    html_bytes: int


def write_crawl(directory: Path, files: int, modules: tuple[str, ...]) -> Crawl:
    """sample_crawl of the pages of `modules` into `files` WARC files, and its figures."""
    warcs = sample_crawl(directory, files, modules, topics=DEMO_TOPICS)
    records = html = 0
    for path in warcs:
        with open(path, "rb") as f:
            for record in ArchiveIterator(f, record_types=WarcRecordType.any_type, parse_http=False):
                records += 1
                html += int(record.content_length)
    return Crawl(directory, warcs, directory / "blocklist", modules, records, html)


def runlib_record_fates(crawl: Crawl) -> tuple[set[str], dict[str, Fate]]:
    """(the URLs of the pages runlib's reader makes, why it skips each other record's URL): the classification
    read_warc applies to each record (runlib.curate.warc)."""
    pages: set[str] = set()
    skipped: dict[str, Fate] = {}
    for path in crawl.warcs:
        with open(path, "rb") as f:
            for record in ArchiveIterator(f, record_types=WarcRecordType.any_type, parse_http=True):
                url = record.headers.get("WARC-Target-URI") or ""
                page, reason = _classify(record, MAX_HTML_BYTES)
                if page is not None:
                    pages.add(page.url)
                elif url:
                    skipped[url] = ("read", f"warc_records: {reason}")
    return pages, {url: fate for url, fate in skipped.items() if url not in pages}


def datatrove_record_fates(crawl: Crawl) -> tuple[set[str], dict[str, Fate]]:
    """The same for datatrove's WarcReader: its own process_record over warcio's records (datatrove 0.10.0
    src/datatrove/pipeline/readers/warc.py), which skips a record without saying why."""
    iterator = _datatrove("warcio.archiveiterator", "ArchiveIterator")
    process_record = _datatrove("datatrove.pipeline.readers.warc", "process_record")
    pages: set[str] = set()
    skipped: dict[str, Fate] = {}
    for path in crawl.warcs:
        with open(path, "rb") as f:
            for record in iterator(f):
                url = record.rec_headers.get("WARC-Target-URI") or ""
                if process_record(record):
                    pages.add(url)
                elif url:
                    why = "not a response" if record.rec_type != "response" else "not HTML, or undecodable"
                    skipped[url] = ("read", f"WarcReader: {why}")
    return pages, {url: fate for url, fate in skipped.items() if url not in pages}


def _jsonl_rows(where: Path) -> Iterator[dict[str, Any]]:
    """The rows of a JSONL file, or of every (gzipped) JSONL file under a folder; none when it does not exist."""
    paths = sorted(where.rglob("*.jsonl*")) if where.is_dir() else [where] if where.exists() else []
    for path in paths:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    yield json.loads(line)


# ------------------------------------------------------------------------------------------------ runs


@dataclass
class Side:
    """One side of one configuration: its timed rounds and the fate of each URL in its latest round."""

    name: str
    extractor: str
    parts: dict[str, list[float]] = field(default_factory=dict)
    pages: set[str] = field(default_factory=set)
    kept_per_round: list[frozenset[str]] = field(default_factory=list)
    fates: dict[str, Fate] = field(default_factory=dict)

    @property
    def seconds(self) -> list[float]:
        return [sum(p) for p in zip(*self.parts.values(), strict=True)]

    def add_round(self, parts: dict[str, float], kept: set[str], fates: dict[str, Fate]) -> None:
        for part, s in parts.items():
            self.parts.setdefault(part, []).append(s)
        self.kept_per_round.append(frozenset(kept))
        unaccounted = dict.fromkeys(self.pages - kept - set(fates), ("unaccounted", "no record of its drop"))
        self.fates = fates | unaccounted | dict.fromkeys(kept, KEPT)


def _input_file(path: Path) -> InputFile:
    return InputFile(path=str(path), bytes=path.stat().st_size, digest=file_digest(path))


def runlib_configs(crawl: Crawl, extractor: Extractor) -> tuple[CurateShardConfig, CurateSourceConfig]:
    """One shard of every WARC file (as runlib.graph.configs builds it, without the digest cache) and the join."""
    curate = CurateSpec(
        quality=["gopher", "c4", "fineweb"],
        url_filter=UrlFilterSpec(blocklist=str(crawl.blocklist), banned_words=[BANNED_WORD]),
        dedup=DedupSpec(exact=True, minhash=MINHASH),
        keep_dropped=KEEP_ALL,
    )
    shard = CurateShardConfig(
        input=InputSpec(
            format="warc",
            path=str(crawl.directory / "*.warc.gz"),
            extract=None if extractor == "resiliparse" else extractor,  # (a): input.extract's default
        ),
        curate=curate,
        shard=0,
        shards=1,
        files=[_input_file(p) for p in crawl.warcs],
        extractor=extractor_version(extractor),
        url_blocklist=[_input_file(p) for p in sorted(crawl.blocklist.rglob("*")) if p.is_file()],
    )
    return shard, CurateSourceConfig(dedup=curate.dedup, heldout_docs=0)


def run_runlib(configs: tuple[CurateShardConfig, CurateSourceConfig], out: Path) -> tuple[dict[str, float], set[str]]:
    """(seconds of curate_shard and of dedup_partition + curate_source + filter_shard, the URLs in train.jsonl
    and heldout.jsonl)."""
    shard_config, source_config = configs
    started = time.perf_counter()
    curate_shard(shard_config, out / "shard")
    shard_done = time.perf_counter()
    partition = DedupPartitionConfig(dedup=source_config.dedup, partition=0, partitions=1)
    dedup_partition(partition, [out / "shard"], out / "partition")
    try:
        curate_source(source_config, [out / "shard"], out / "source", partition_dirs=[out / "partition"])
        kept_config = FilterShardConfig(shard=0, perplexity=False, classifier=False, keep_dropped=KEEP_ALL)
        filter_shard(kept_config, {"shard": out / "shard", "source": out / "source"}, out / "part")
    except UserError:  # no document left: nothing kept
        pass
    parts = {"curate_shard": shard_done - started, "curate_source": time.perf_counter() - shard_done}
    kept = {
        row.get("url", row["id"]) for name in (TRAIN_FILE, HELDOUT_FILE) for row in _jsonl_rows(out / "part" / name)
    }
    return parts, kept


def runlib_fates(out: Path, skipped: dict[str, Fate]) -> dict[str, Fate]:
    """Each dropped page's (stage, 'step: reason') from the shard's and the join's dropped.jsonl."""
    fates = dict(skipped)
    for path in (out / "shard" / DROPPED_FILE, out / "part" / DROPPED_FILE):
        for row in _jsonl_rows(path):
            url = row.get("url", row["id"])
            fates.setdefault(url, (RUNLIB_STAGE.get(row["step"], row["step"]), f"{row['step']}: {row['reason']}"))
    return fates


def _datatrove(module: str, name: str) -> Any:
    """An attribute of an installed module, imported when first needed (datatrove ships no type information)."""
    return getattr(importlib.import_module(module), name)


def datatrove_missing() -> list[str]:
    """The modules the datatrove side needs that are not installed."""
    missing = []
    for name in DATATROVE_NEEDS:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def _url_filter(crawl: Crawl, writer: Any) -> Any:
    blocklist = read_blocklist([crawl.blocklist], "blocklist")
    url_filter = _datatrove("datatrove.pipeline.filters", "URLFilter")(
        extra_domains=sorted(blocklist.domains),
        extra_urls=sorted(blocklist.urls),
        banned_words=[BANNED_WORD],
        use_integrated_lists=False,
        exclusion_writer=writer,
    )
    # its TLDExtract() fetches the public suffix list on first use (src/datatrove/pipeline/filters/url_filter.py at
    # 7024aec): tldextract's bundled snapshot instead, with the crawl's reserved TLD, no cache
    url_filter.tldextractor = _datatrove("tldextract", "TLDExtract")(
        cache_dir=None, suffix_list_urls=(), extra_suffixes=RESERVED_TLDS
    )
    return url_filter


def _step(module: str, name: str) -> Any:
    return _datatrove(f"datatrove.pipeline.{module}", name)


def datatrove_executors(crawl: Crawl, out: Path) -> dict[str, Any]:
    """examples/fineweb.py's executors (datatrove at 7024aec), local, one task at a time; name -> executor.
    Everywhere the one MinhashConfig (fineweb.py gives stage 2 its default 14 x 8 buckets with the same hashes);
    stage 2 runs tasks = bands tasks, one after the other, as src/datatrove/pipeline/dedup/minhash.py requires
    (world_size % num_buckets == 0). Trafilatura keeps its default timeout of 1 s per page: each page goes to a
    sandbox subprocess and is dropped past it (src/datatrove/pipeline/extractors/base.py, ExtractorSandbox)."""
    step = _step
    writer = step("writers.jsonl", "JsonlWriter")
    removed = {folder: writer(str(out / "removed" / folder)) for folder, _, _ in DATATROVE_EXCLUDED}
    config = _datatrove("datatrove.pipeline.dedup.minhash", "MinhashConfig")(
        hash_config=_datatrove("datatrove.utils.hashing", "HashConfig")(hash_fc="sha1", precision=64),
        num_buckets=MINHASH.bands,
        hashes_per_bucket=MINHASH.rows,
        n_grams=MINHASH.ngram,
    )
    filtered, folder = str(out / "filtered"), out / "minhash"
    (out / "filtered").mkdir(parents=True, exist_ok=True)
    pipelines: dict[str, tuple[list[Any], int]] = {
        "filtering": (
            [
                step("readers", "WarcReader")(str(crawl.directory), glob_pattern="*.warc.gz"),
                _url_filter(crawl, removed["url"]),
                step("extractors", "Trafilatura")(favour_precision=True),
                step("filters", "GopherRepetitionFilter")(exclusion_writer=removed["gopher_rep"]),
                step("filters", "GopherQualityFilter")(exclusion_writer=removed["gopher_qual"]),
                step("filters", "C4QualityFilter")(exclusion_writer=removed["c4"]),
                step("filters", "FineWebQualityFilter")(exclusion_writer=removed["fineweb_qual"]),
                writer(filtered),
            ],
            1,
        ),
        "minhash 1": (
            [
                step("readers", "JsonlReader")(filtered),
                step("dedup", "MinhashDedupSignature")(str(folder / "sigs"), config),
            ],
            1,
        ),
        "minhash 2": (
            [step("dedup", "MinhashDedupBuckets")(str(folder / "sigs"), str(folder / "buckets"), config=config)],
            MINHASH.bands,
        ),
        "minhash 3": (
            [step("dedup", "MinhashDedupCluster")(str(folder / "buckets"), str(folder / "remove"), config=config)],
            1,
        ),
        "minhash 4": (
            [
                step("readers", "JsonlReader")(filtered),
                step("dedup", "MinhashDedupFilter")(str(folder / "remove"), exclusion_writer=removed["minhash"]),
                writer(str(out / "deduped")),
            ],
            1,
        ),
    }
    executor = _datatrove("datatrove.executor", "LocalPipelineExecutor")
    return {
        name: executor(pipeline, tasks=tasks, workers=1, logging_dir=str(out / "logs" / name.replace(" ", "_")))
        for name, (pipeline, tasks) in pipelines.items()
    }


def run_datatrove(crawl: Crawl, out: Path) -> tuple[dict[str, float], set[str]]:
    """(seconds of each executor, the URLs of the deduplicated output). Each task adds a sink on sys.stderr
    (add_task_logger, src/datatrove/utils/logging.py at 7024aec): stderr goes to out/log.txt meanwhile. With
    workers=1 LocalPipelineExecutor runs its tasks in this process, one after the other (executor/local.py)."""
    logger = _datatrove("loguru", "logger")
    executors = datatrove_executors(crawl, out)
    parts: dict[str, float] = {}
    with open(out / "log.txt", "w", encoding="utf-8") as log, contextlib.redirect_stderr(log):
        try:
            for name, executor in executors.items():
                if name == "minhash 1" and not any((out / "filtered").iterdir()):
                    # nothing passed the filters: an empty file for JsonlReader, which raises on an empty folder
                    # (src/datatrove/pipeline/readers/base.py at 7024aec), so that the MinHash stages still run
                    with gzip.open(out / "filtered" / "00000.jsonl.gz", "wt"):
                        pass
                started = time.perf_counter()
                executor.run()
                parts[name] = time.perf_counter() - started
        finally:
            logger.remove()  # its sinks write to the log file, closed next
    return parts, {row["metadata"]["url"] for row in _jsonl_rows(out / "deduped")}


def datatrove_fates(out: Path, pages: set[str], skipped: dict[str, Fate], kept: set[str]) -> dict[str, Fate]:
    """Each page's (stage, 'step: reason') from the exclusion files; a page read, never excluded and not in
    the filtering output went at the extractor."""
    fates = dict(skipped)
    for folder, stage, step in DATATROVE_EXCLUDED:
        for row in _jsonl_rows(out / "removed" / folder):
            reason = row["metadata"].get("filter_reason", "cluster member")
            fates.setdefault(row["metadata"]["url"], (stage, f"{step}: {reason}"))
    passed = {row["metadata"]["url"] for row in _jsonl_rows(out / "filtered")}
    for url in pages - passed - kept - set(fates):
        fates[url] = ("extract", "Trafilatura: no text, or past its 1 s timeout")
    return fates


# ------------------------------------------------------------------------------------------ one core


@contextlib.contextmanager
def one_core() -> Iterator[int | None]:
    """Pin this process (and what it starts from now on) to one CPU; the CPU, or None where not supported."""
    if not hasattr(os, "sched_setaffinity"):
        yield None
        return
    before = os.sched_getaffinity(0)
    cpu = max(before)
    os.sched_setaffinity(0, {cpu})
    try:
        yield cpu
    finally:
        os.sched_setaffinity(0, before)


# ------------------------------------------------------------------------------------------- rounds


@dataclass
class Bench:
    crawl: Crawl
    runlib: dict[Extractor, Side]  # extractor -> runlib's side
    datatrove: Side | None
    warmup: dict[str, float] = field(default_factory=dict)


def _fresh(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def _round(bench: Bench, work: Path, i: int) -> None:
    crawl = bench.crawl
    runlib_pages, runlib_skipped = runlib_record_fates(crawl)
    for extractor, side in bench.runlib.items():
        out = _fresh(work / f"round{i}" / f"runlib-{extractor}")
        parts, kept = run_runlib(runlib_configs(crawl, extractor), out)
        side.pages = runlib_pages
        side.add_round(parts, kept, runlib_fates(out, runlib_skipped))
    if bench.datatrove is not None:
        out = _fresh(work / f"round{i}" / "datatrove")
        parts, kept = run_datatrove(crawl, out)
        pages, skipped = datatrove_record_fates(crawl)
        bench.datatrove.pages = pages
        bench.datatrove.add_round(parts, kept, datatrove_fates(out, pages, skipped, kept))


def run_bench(crawl: Crawl, warmup: Crawl | None, work: Path, repeats: int, with_datatrove: bool) -> Bench:
    bench = Bench(
        crawl,
        {e: Side("runlib", e) for e in EXTRACTORS},
        Side("datatrove", "trafilatura") if with_datatrove else None,
    )
    if warmup is not None:  # untimed: imports and first calls (spaCy for datatrove's word tokenizer)
        first = Bench(
            warmup, {e: Side("runlib", e) for e in bench.runlib}, Side("datatrove", "") if with_datatrove else None
        )
        _round(first, work / "warmup", 0)
        bench.warmup = {f"runlib {e}": sum(s.seconds) for e, s in first.runlib.items()}
        if first.datatrove is not None:
            bench.warmup["datatrove"] = sum(first.datatrove.seconds)
    for i in range(repeats):
        _round(bench, work, i)
        shutil.rmtree(work / f"round{i - 1}", ignore_errors=True)  # the latest round stays, for the fates
    return bench


# -------------------------------------------------------------------------------------------- compare


def jaccard(a: set[str] | frozenset[str], b: set[str] | frozenset[str]) -> float | None:
    """|a & b| / |a | b|; None when both are empty (nothing to agree on)."""
    return len(a & b) / len(a | b) if a | b else None


def _figure(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def survivors(side: Side) -> list[set[str]]:
    """The URLs left after each stage of STAGES (a fate outside STAGES counts as dropped at the end)."""
    order = {stage: i for i, stage in enumerate(STAGES)}
    return [
        {url for url, (stage, _) in side.fates.items() if stage == "kept" or order.get(stage, len(STAGES) - 1) > k}
        for k in range(len(STAGES))
    ]


def _kept(side: Side) -> frozenset[str]:
    return side.kept_per_round[-1] if side.kept_per_round else frozenset()


def differences(ours: Side, theirs: Side) -> list[tuple[int, str, list[str]]]:
    """For the URLs `ours` kept and `theirs` did not: (how many, the fate `theirs` gave them, the URLs), most first."""
    only = sorted(_kept(ours) - _kept(theirs))
    by_fate: dict[str, list[str]] = {}
    for url in only:
        stage, detail = theirs.fates.get(url, ("absent", "not a record of its crawl"))
        by_fate.setdefault(f"{stage:<10} {detail}", []).append(url)
    return sorted(((len(urls), fate, urls) for fate, urls in by_fate.items()), key=lambda t: (-t[0], t[1]))


# ---------------------------------------------------------------------------------------------- print


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def print_header(crawl: Crawl, cpu: int | None, repeats: int, warmup: bool) -> None:
    print(
        f"crawl: {len(crawl.warcs)} WARC files, {crawl.records} records ({len(crawl.modules)} pydoc module pages, {len(DEMO_TOPICS)} reference topic pages and the "
        f"planted cases of runlib.curate.sample_web), {crawl.html_bytes / 1e6:.1f} MB of record blocks; {crawl.directory}"
    )
    print(
        "steps, both sides: URL filter (the crawl's blocklist, banned word "
        f"{BANNED_WORD!r}), extraction, Gopher repetition + quality, C4, FineWeb quality, MinHash {MINHASH.ngram}-grams "
        f"{MINHASH.bands} bands x {MINHASH.rows} rows (runlib: + exact dedup, candidates verified at Jaccard >= "
        f"{MINHASH.threshold}; datatrove: sha1 64-bit, unverified); no language identification on either side "
        "(datatrove's LanguageFilter downloads its fastText model at run time)"
    )
    where = f"pinned to CPU {cpu}" if cpu is not None else "not pinned (no sched_setaffinity here)"
    print(
        f"one core: the process and its subprocesses {where}; rounds interleaved runlib (resiliparse), "
        f"runlib (trafilatura), datatrove; median of {repeats}" + ("" if warmup else "; no warm-up: imports included")
    )


def _side_row(label: str, side: Side, records: int, ratio: str) -> str:
    wall = _median(side.seconds)
    pages = len(side.pages)
    return (
        f"{label:<26} {side.name:<10} {side.extractor:<12} {pages:>6} {len(_kept(side)):>5} {wall:>8.2f} "
        f"{records / wall:>12.1f} {ratio:>17}"
    )


def print_table(bench: Bench) -> None:
    records, dt = bench.crawl.records, bench.datatrove
    print(
        f"\n{'configuration':<26} {'side':<10} {'extractor':<12} {'pages':>6} {'kept':>5} {'wall s':>8} "
        f"{'docs/s/core':>12} {'runlib/datatrove':>17}"
    )
    labels = {"resiliparse": "(a) each side's default", "trafilatura": "(b) both trafilatura"}
    for extractor, side in bench.runlib.items():
        ratio = f"{_median(dt.seconds) / _median(side.seconds):.2f}x" if dt is not None else "-"
        print(_side_row(labels[extractor], side, records, ratio))
        if dt is not None:
            print(_side_row("", dt, records, ""))
    print(
        f"(pages: what each reader makes of the {records} records; docs/s/core: records / median wall s on one core; "
        "the datatrove rows are one run, shared by (a) and (b))"
    )
    parts = [f"runlib {e}: " + _parts(s) for e, s in bench.runlib.items()]
    if dt is not None:
        parts.append("datatrove: " + _parts(dt))
    print("median s per part: " + "; ".join(parts))
    if bench.warmup:
        print("warm-up (untimed above), s: " + ", ".join(f"{k} {v:.1f}" for k, v in bench.warmup.items()))


def _parts(side: Side) -> str:
    return ", ".join(f"{name} {_median(s):.2f}" for name, s in side.parts.items())


def print_agreement(bench: Bench) -> dict[str, float | None]:
    """The agreement of each configuration, its stage-by-stage funnel and what differs; Jaccard by extractor."""
    dt = bench.datatrove
    if dt is None:
        return {}
    out: dict[str, float | None] = {}
    for extractor, side in bench.runlib.items():
        agreement = out[extractor] = jaccard(_kept(side), _kept(dt))
        label = "(a)" if extractor == "resiliparse" else "(b)"
        both = len(_kept(side) & _kept(dt))
        print(
            f"\n{label} kept-URL agreement (Jaccard): {_figure(agreement)}; kept by both {both}, runlib only "
            f"{len(_kept(side) - _kept(dt))}, datatrove only {len(_kept(dt) - _kept(side))}"
        )
        for name, s in (("runlib", side), ("datatrove", dt)):
            if len(set(s.kept_per_round)) > 1:
                print(f"  {name}'s kept set differed between rounds: {sorted(map(len, s.kept_per_round))} URLs")
        print(f"  {'after stage':<12} {'runlib':>7} {'datatrove':>9} {'Jaccard':>8}")
        for stage, ours, theirs in zip(STAGES, survivors(side), survivors(dt), strict=True):
            print(f"  {stage:<12} {len(ours):>7} {len(theirs):>9} {_figure(jaccard(ours, theirs)):>8}")
        for one, other in ((side, dt), (dt, side)):
            rows = differences(one, other)
            print(
                f"  kept by {one.name} only: {sum(n for n, _, _ in rows)}"
                + (", dropped by " + other.name if rows else "")
            )
            for n, fate, urls in rows:
                more = f" (+{len(urls) - 2})" if len(urls) > 2 else ""
                print(f"    {n:>4}  {fate}   e.g. {', '.join(urls[:2])}{more}")
    return out


def print_goals(bench: Bench, agreement: dict[str, float | None]) -> None:
    dt = bench.datatrove
    if dt is None:
        print("\ngoals: not measured (no datatrove)")
        return
    ratio = {e: _median(dt.seconds) / _median(s.seconds) for e, s in bench.runlib.items()}
    met = {True: "met", False: "missed"}
    agree = agreement["trafilatura"]
    print("\ngoals (not asserted):")
    print(f"  (a) runlib >= 5x datatrove docs/s/core: {ratio['resiliparse']:.2f}x, {met[ratio['resiliparse'] >= 5]}")
    print(
        f"  (b) agreement >= 0.95: {_figure(agree)}, {'not measured' if agree is None else met[agree >= 0.95]}; "
        f"runlib no slower than datatrove: {ratio['trafilatura']:.2f}x, {met[ratio['trafilatura'] >= 1]}"
    )


def print_profile(crawl: Crawl, work: Path, top: int = 14) -> None:
    """runlib's side once more per extractor under cProfile: the functions with the most own time."""
    for extractor in EXTRACTORS:
        profile = cProfile.Profile()
        started = time.perf_counter()
        profile.runcall(run_runlib, runlib_configs(crawl, extractor), _fresh(work / f"profile-{extractor}"))
        total = time.perf_counter() - started
        print(f"\nprofile, runlib {extractor} ({total:.2f} s under cProfile): own s, cumulative s, calls, function")
        for entry in sorted(profile.getstats(), key=lambda e: -e.inlinetime)[:top]:
            code = entry.code
            where = (
                code
                if isinstance(code, str)
                else f"{code.co_name} ({Path(code.co_filename).name}:{code.co_firstlineno})"
            )
            print(f"  {entry.inlinetime:8.3f} {entry.totaltime:8.3f} {entry.callcount:>9}  {where}")


# ----------------------------------------------------------------------------------------------- main


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--files", type=int, default=4, help="WARC files the crawl's records are dealt over")
    parser.add_argument("--modules", type=int, default=len(DEMO_MODULES), help="pages: the first M of DEMO_MODULES")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", type=Path, default=None, help="folder for the crawl and the outputs (kept)")
    parser.add_argument("--profile", action="store_true", help="profile runlib's side after the rounds")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"1 file, the {len(QUICK_MODULES)} small pages of QUICK_MODULES, 1 round, no warm-up",
    )
    args = parser.parse_args(argv)
    if not 2 <= args.modules <= len(DEMO_MODULES):
        parser.error(f"--modules: 2 .. {len(DEMO_MODULES)}")
    args.pages = QUICK_MODULES if args.quick else DEMO_MODULES[: args.modules]
    if args.quick:
        args.files, args.repeats = 1, 1
    return args


@contextlib.contextmanager
def _work_dir(path: Path | None) -> Iterator[Path]:
    if path is not None:
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="runlib-curate-web-") as tmp:
        yield Path(tmp)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    missing = datatrove_missing()
    if missing:
        print(f"datatrove: skipped, not installed: {', '.join(missing)} (see this module's docstring)")
    with _work_dir(args.work) as work, one_core() as cpu:
        crawl = write_crawl(_fresh(work / "crawl"), args.files, args.pages)
        warmup = None if args.quick else write_crawl(_fresh(work / "warmup-crawl"), 1, QUICK_MODULES[:2])
        print_header(crawl, cpu, args.repeats, warmup is not None)
        bench = run_bench(crawl, warmup, work, args.repeats, not missing)
        print_table(bench)
        agreement = print_agreement(bench)
        print_goals(bench, agreement)
        if args.profile:
            print_profile(crawl, work)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
