"""Benchmark the whole MinHash dedup as sharded jobs: runlib's stages against datatrove 0.10's four MinHash
stages on the same documents, at several multiples of a base size with the same shard size.

    python -m runlib.bench.dedup_scale [--base-docs 1000] [--shard-docs 500] [--scales 1 4 16] [--work DIR]

The documents: --base-docs x scale documents of 150 words (a letter vocabulary: MinHash's simplify_text makes
every digit run "0"), of which one in ten is a near-duplicate (one word changed) and one in thirty an exact
copy of an earlier one, dealt over files of --shard-docs documents. Each job runs in a process of its own
(spawned: no memory inherited), one after the other, and reports its wall and CPU seconds (its own call, not
the interpreter's start) and its peak RSS (VmHWM of /proc/self/status: getrusage's ru_maxrss of a spawned
process also counts the parent's pages it was forked from before exec, so it never reads below the parent):
  runlib     curate_shard per file (normalize, SHA-256, MinHash signatures and the sorted tables; no other
             step), dedup_partition per shard (its slice of the hash space and the candidates' verification),
             curate_source (clusters, held-out choice), filter_shard per shard (the copy into train.jsonl):
             runlib.curate.partition, .source and .filter_shard
  datatrove  MinhashDedupSignature per file, MinhashDedupBuckets per band (tasks = bands, as it requires),
             MinhashDedupCluster, MinhashDedupFilter per file: LocalPipelineExecutor with one task per process
             (local_tasks=1, local_rank_offset=rank), JsonlReader in and JsonlWriter out
Both with 20 bands x 5 rows of word 5-grams (runlib's MinhashSpec defaults; datatrove's sha1 64-bit hashes,
its candidates unverified, runlib's verified at Jaccard >= 0.72). Printed per scale and side: jobs, wall and
CPU seconds (sums over the jobs), documents per CPU second, the peak RSS of the largest job, and whether
runlib's kept set equals its single-process reference (runlib.curate.minhash's functions over every document
at once, in rank order) and the Jaccard of datatrove's kept set with runlib's. The goal of issue 23: the largest job's peak RSS grows by
at most 1.3x from 1x to 4x.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import json
import random
import resource
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from runlib.curate.config import (
    CurateShardConfig,
    CurateSourceConfig,
    DedupPartitionConfig,
    FilterShardConfig,
    InputFile,
)
from runlib.curate.filter_shard import filter_shard
from runlib.curate.minhash import first_of_clusters, signatures, verified_pairs
from runlib.curate.partition import dedup_partition
from runlib.curate.source import curate_source
from runlib.curate.stage import curate_shard
from runlib.spec.models import CurateSpec, DedupSpec, InputSpec, MinhashSpec
from runlib.util.hashing import file_digest

MINHASH = MinhashSpec()
DEDUP = DedupSpec(minhash=MINHASH)
WORDS = 150
LETTERS = "abcdefghijklmnopqrstuvwxyz"


# ------------------------------------------------------------------------------------------- documents


def documents(n: int, seed: int = 0) -> list[str]:
    """n documents: distinct ones, one in ten a near-duplicate of an earlier one, one in thirty a copy."""
    rng = random.Random(seed)
    vocab = ["".join(rng.choice(LETTERS) for _ in range(6)) for _ in range(5000)]
    docs: list[str] = []
    for i in range(n):
        if i > 10 and i % 10 == 0:
            words = docs[rng.randrange(i)].split()
            words[rng.randrange(len(words))] = "changed"
            docs.append(" ".join(words))
        elif i > 10 and i % 30 == 7:
            docs.append(docs[rng.randrange(i)])
        else:
            docs.append(" ".join(rng.choice(vocab) for _ in range(WORDS)))
    return docs


def write_files(docs: list[str], shard_docs: int, folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(0, len(docs), shard_docs):
        path = folder / f"{k // shard_docs:05d}.jsonl"
        path.write_text(
            "".join(json.dumps({"id": f"d{k + j}", "text": t}) + "\n" for j, t in enumerate(docs[k : k + shard_docs]))
        )
        paths.append(path)
    return paths


def reference_kept(docs: list[str]) -> list[str]:
    """The documents the single-process reference keeps (no held-out split): exact copies after their first
    occurrence go, then the verified MinHash clusters over all documents at once, in rank order."""
    seen: set[str] = set()
    kept = [t for t in docs if not (t in seen or seen.add(t))]  # type: ignore[func-returns-value]
    ranked = sorted(kept, key=lambda t: hashlib.sha256(t.encode()).hexdigest())
    sigs = signatures(ranked, MINHASH.ngram, MINHASH.bands * MINHASH.rows)
    pairs, _ = verified_pairs(
        sigs, MINHASH.bands, MINHASH.rows, MINHASH.threshold, MINHASH.ngram, lambda w: [ranked[i] for i in w]
    )
    gone = first_of_clusters(len(ranked), pairs)
    return sorted(t for t, g in zip(ranked, gone, strict=True) if not g)


# ------------------------------------------------------------------------------------------------ jobs


def _peak_rss_mb() -> float:
    """This process's peak RSS in MB: VmHWM, its own address space's high-water mark (Linux), else ru_maxrss."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration, ValueError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _measured(call: Callable[..., Any], *args: Any) -> dict[str, float]:
    """Run call(*args) in this (child) process: its wall and CPU seconds, and the process's peak RSS in MB."""
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    call(*args)
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "wall": time.perf_counter() - started,
        "cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "rss_mb": _peak_rss_mb(),
    }


def _in_child(call: Callable[..., Any], *args: Any) -> dict[str, Any]:
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return {"stage": call.__name__.lstrip("_"), **pool.submit(_measured, call, *args).result()}


def _runlib_shard(config: CurateShardConfig, out: Path) -> None:
    curate_shard(config, out, "bench")


def _runlib_partition(config: DedupPartitionConfig, shards: list[Path], out: Path) -> None:
    dedup_partition(config, shards, out, "bench")


def _runlib_source(config: CurateSourceConfig, shards: list[Path], partitions: list[Path], out: Path) -> None:
    curate_source(config, shards, out, "bench", partitions)


def _runlib_filter(config: FilterShardConfig, shard: Path, source: Path, out: Path) -> None:
    filter_shard(config, {"shard": shard, "source": source}, out)


def run_runlib(files: list[Path], out: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Every job's figures, and the texts kept."""
    curate = CurateSpec(dedup=DEDUP)
    source_input = InputSpec(format="jsonl", path=str(files[0].parent / "*.jsonl"))
    shards, jobs = [], []
    for i, path in enumerate(files):
        entry = InputFile(path=str(path), bytes=path.stat().st_size, digest=file_digest(path))
        shard = CurateShardConfig(input=source_input, curate=curate, shard=i, shards=len(files), files=[entry])
        shards.append(out / f"shard{i}")
        jobs.append(_in_child(_runlib_shard, shard, shards[-1]))
    partitions = []
    for q in range(len(files)):
        partitions.append(out / f"partition{q}")
        partition = DedupPartitionConfig(dedup=DEDUP, partition=q, partitions=len(files))
        jobs.append(_in_child(_runlib_partition, partition, shards, partitions[-1]))
    source = CurateSourceConfig(dedup=DEDUP, heldout_docs=0)
    jobs.append(_in_child(_runlib_source, source, shards, partitions, out / "source"))
    kept = []
    for i, shard_dir in enumerate(shards):
        config = FilterShardConfig(shard=i, perplexity=False, classifier=False, keep_dropped=0)
        jobs.append(_in_child(_runlib_filter, config, shard_dir, out / "source", out / f"part{i}"))
        with open(out / f"part{i}" / "train.jsonl", encoding="utf-8") as f:
            kept += [json.loads(line)["text"] for line in f]
    return jobs, sorted(kept)


def _datatrove_task(stage: str, folder: Path, files: Path, tasks: int, rank: int) -> None:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter
    from datatrove.utils.hashing import HashConfig

    config = MinhashConfig(
        hash_config=HashConfig(hash_fc="sha1", precision=64),
        num_buckets=MINHASH.bands,
        hashes_per_bucket=MINHASH.rows,
        n_grams=MINHASH.ngram,
    )
    pipeline = {
        "signatures": lambda: [JsonlReader(str(files)), MinhashDedupSignature(str(folder / "sigs"), config)],
        "buckets": lambda: [MinhashDedupBuckets(str(folder / "sigs"), str(folder / "buckets"), config=config)],
        "cluster": lambda: [MinhashDedupCluster(str(folder / "buckets"), str(folder / "remove"), config=config)],
        "filter": lambda: [
            JsonlReader(str(files)),
            MinhashDedupFilter(str(folder / "remove")),
            JsonlWriter(str(folder / "kept")),
        ],
    }[stage]()
    logs = folder / "logs" / stage
    logs.mkdir(parents=True, exist_ok=True)
    # each task adds a log sink on sys.stderr (datatrove src/datatrove/utils/logging.py at 7024aec): into a file
    with open(logs / f"stderr-{rank}.txt", "w", encoding="utf-8") as log, contextlib.redirect_stderr(log):
        LocalPipelineExecutor(
            pipeline, tasks=tasks, workers=1, local_tasks=1, local_rank_offset=rank, logging_dir=str(logs)
        ).run()


def run_datatrove(files: list[Path], out: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Every task's figures, and the texts datatrove kept."""
    jobs = []
    for stage, tasks in (
        ("signatures", len(files)),
        ("buckets", MINHASH.bands),
        ("cluster", 1),
        ("filter", len(files)),
    ):
        for rank in range(tasks):
            jobs.append({**_in_child(_datatrove_task, stage, out, files[0].parent, tasks, rank), "stage": stage})
    kept = []
    for path in sorted((out / "kept").glob("*.jsonl*")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            kept += [json.loads(line)["text"] for line in f]
    return jobs, sorted(kept)


# ---------------------------------------------------------------------------------------------- report


def _row(scale: int, docs: int, side: str, jobs: list[dict[str, Any]], check: str) -> str:
    wall, cpu = sum(j["wall"] for j in jobs), sum(j["cpu"] for j in jobs)
    peak = max(j["rss_mb"] for j in jobs)
    by_stage: dict[str, float] = {}
    for job in jobs:
        by_stage[job["stage"]] = max(by_stage.get(job["stage"], 0.0), job["rss_mb"])
    stages = ", ".join(f"{stage} {mb:.0f}" for stage, mb in by_stage.items())
    return (
        f"{scale:>5}x {docs:>7} {side:<10} {len(jobs):>5} {wall:>8.1f} {cpu:>8.1f} {docs / cpu:>10.0f} "
        f"{peak:>9.0f}  {check}\n{'':>26}peak MB per stage: {stages}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-docs", type=int, default=1000)
    parser.add_argument("--shard-docs", type=int, default=500)
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--no-datatrove", action="store_true", help="runlib's side only")
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="runlib-dedup-scale-"))
    print(f"documents of {WORDS} words, files of {args.shard_docs} documents; MinHash {MINHASH.bands} x {MINHASH.rows}")
    print(" scale    docs side        jobs   wall s    cpu s  docs/cpu-s  peak MB  check")
    peaks: dict[str, dict[int, float]] = {"runlib": {}, "datatrove": {}}
    for scale in args.scales:
        n = args.base_docs * scale
        docs = documents(n)
        folder = work / f"x{scale}"
        files = write_files(docs, args.shard_docs, folder / "input")
        jobs, kept = run_runlib(files, folder / "runlib")
        same = kept == reference_kept(docs)
        print(_row(scale, n, "runlib", jobs, f"kept {len(kept)}, = reference: {same}"), flush=True)
        peaks["runlib"][scale] = max(j["rss_mb"] for j in jobs)
        if not args.no_datatrove:
            jobs, theirs = run_datatrove(files, folder / "datatrove")
            both = len(set(theirs) & set(kept)) / max(1, len(set(theirs) | set(kept)))
            print(
                _row(scale, n, "datatrove", jobs, f"kept {len(theirs)}, Jaccard with runlib's {both:.3f}"), flush=True
            )
            peaks["datatrove"][scale] = max(j["rss_mb"] for j in jobs)
    for side, by_scale in peaks.items():
        if 1 in by_scale and 4 in by_scale:
            growth = by_scale[4] / by_scale[1]
            print(f"{side}: the largest job's peak RSS grows {growth:.2f}x from 1x to 4x (goal <= 1.3x)")
    print(f"work: {work}")


if __name__ == "__main__":
    main()
