"""Curate and tokenize one source at 1x and 4x its size through the real workflow, and read each data job's
peak RSS and CPU time from Snakemake's benchmark files: the issue-23 goal (the largest data job grows by at
most 1.3x from 1x to 4x, at the same shard size) and the per-stage rates `runlib plan --input-bytes` uses
(runlib.graph.scale).

    python -m runlib.bench.data_scale [--base-mb 16] [--shard-mb 4] [--scales 1 4] [--cores 2] [--work DIR]
                                      [--format jsonl|warc]

The source: jsonl files of runlib.bench.dedup_scale's documents (150 words each; one in ten a near-duplicate,
one in thirty an exact copy), --base-mb x scale MB in files of about 1 MB, grouped into shards of --shard-mb
by input.shard_bytes; curation normalizes, filters by length, dedups exactly and by MinHash (20 x 5,
verified at 0.72) within and across shards, and holds out 200 documents; the tokenizer (a 3,840-id BPE on
400 KB) is trained once per scale. With --format warc the source is copies of runlib sample-web's crawl
(write_crawl) curated with FineWeb's rules (Gopher, C4, FineWeb) as well. Snakemake runs every stage up to tokenize with --cores; each job's
benchmark file (work/benchmarks/<stage>/<key>.tsv) gives max_rss (MB, sampled by Snakemake's psutil poll)
and the job's wall seconds, and its manifest the seconds of the stage function itself (its
Timings.wall_seconds: without the interpreter's start; every job is single-threaded, tokenize's encoder
included, RAYON_NUM_THREADS=1). Snakemake's cpu_time is not used: it is the sum of polls, and the CPU of
the last second before a process exits is never polled. Printed per scale and stage: jobs, the largest
max_rss, the job and stage seconds summed over the jobs, the MB the stage reads and its rate in MB per
core-second of the stage function; then the ratio of the largest job's RSS at the largest scale to the
smallest.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from runlib.bench.dedup_scale import documents

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "fixtures" / "tiny.yaml"
DATA_STAGES = ("curate_shard", "dedup_partition", "curate_source", "filter_shard", "train_tokenizer", "tokenize")
DOC_BYTES = 1_000  # about: 150 words of 6 letters and a space, in a JSON line


def write_source(folder: Path, mb: int, seed: int) -> int:
    """Files of about 1 MB of documents, mb of them in all; returns the bytes written."""
    folder.mkdir(parents=True, exist_ok=True)
    docs = documents(mb * 2**20 // DOC_BYTES, seed)
    per_file = 2**20 // DOC_BYTES
    total = 0
    for k in range(0, len(docs), per_file):
        path = folder / f"{k // per_file:05d}.jsonl"
        with open(path, "w", encoding="utf-8") as f:
            for i, text in enumerate(docs[k : k + per_file], k):
                f.write(json.dumps({"id": f"d{i}", "text": text}) + "\n")
        total += path.stat().st_size
    return total


def write_crawl(folder: Path, mb: int) -> int:
    """WARC files of runlib sample-web's crawl (0.67 MB of .warc.gz: pydoc pages, with its planted cases),
    copied until they hold mb MB; returns the bytes written. The copies' pages are exact duplicates of the
    first's: they cost what distinct pages cost up to the dedup, which then drops them."""
    import shutil

    from runlib.curate.sample_web import DEMO_MODULES, DEMO_TOPICS, sample_crawl

    crawl = sample_crawl(folder / "crawl", 1, DEMO_MODULES, topics=DEMO_TOPICS)[0]
    folder.mkdir(parents=True, exist_ok=True)
    total, k = 0, 0
    while total < mb * 2**20:
        path = folder / f"{k:05d}.warc.gz"
        shutil.copyfile(crawl, path)
        total, k = total + path.stat().st_size, k + 1
    shutil.rmtree(folder / "crawl")
    return total


def write_spec(path: Path, source_glob: str, shard_mb: int, fmt: str = "jsonl") -> None:
    """The tiny test spec with one jsonl (or warc) source in place of its three."""
    from ruamel.yaml import YAML

    spec = YAML(typ="safe").load(TINY.read_text())
    spec["name"] = "data-scale"
    spec["tokenizer"] |= {"vocab_size": 3840, "train_on": {"web": 1.0}, "train_bytes": "400K"}
    spec["model"]["vocab_size"] = 4096
    spec["data"]["sources"] = {
        "web": {
            "domain": "web",
            "input": {"format": "jsonl", "path": source_glob, "shard_bytes": f"{shard_mb}Mi"},
            "tokens": "10M",
            "curate": {"min_chars": 200, "dedup": {"exact": True, "minhash": {}}},
        }
    }
    if fmt == "warc":  # FineWeb's rules (the letters-only jsonl documents would all fail them)
        web = spec["data"]["sources"]["web"]
        web["input"]["format"] = "warc"
        web["curate"]["quality"] = ["gopher", "c4", "fineweb"]
        spec["data"]["heldout_docs"] = 5
    if fmt != "warc":
        spec["data"]["heldout_docs"] = 200
    for phase in spec["phases"]:
        phase["mixture"] = {"web": 1.0}
    spec["audit"]["ignore"].pop("MIX006")
    path.write_text(json.dumps(spec, indent=1))  # JSON is YAML


def benchmark_rows(work: Path, graph: Any) -> dict[str, list[dict[str, float]]]:
    """Stage -> one row per job of this graph: its benchmark file's max_rss (MB) and wall seconds (s), and
    the seconds of the stage function its manifest records (stage_s)."""
    from runlib.store.manifest import read_manifest

    out: dict[str, list[dict[str, float]]] = {}
    for stage in DATA_STAGES:
        for node in graph.of(stage):
            path = work / "benchmarks" / stage / f"{node.key}.tsv"
            with open(path, encoding="utf-8") as f:
                row = next(csv.DictReader(f, delimiter="\t"))
            stage_s = read_manifest(node.dir).timings.wall_seconds
            out.setdefault(stage, []).append(
                {"max_rss": float(row["max_rss"]), "s": float(row["s"]), "stage_s": stage_s}
            )
    return out


def stage_bytes(graph: Any, stage: str) -> int:
    """The bytes of a stage's work (runlib.graph.scale says which): the input files (curate_shard), the
    documents curate_shard kept (dedup_partition, curate_source, filter_shard), the curated splits (tokenize)."""
    from runlib.curate.config import CurateShardConfig

    if stage == "tokenize":
        return sum(
            (n.dir / f"{split}.jsonl").stat().st_size for n in graph.curated("web") for split in ("train", "heldout")
        )
    if stage in ("dedup_partition", "curate_source", "filter_shard"):
        return sum((n.dir / "docs.jsonl").stat().st_size for n in graph.of("curate_shard"))
    return sum(f.bytes for n in graph.of("curate_shard") for f in n.config_as(CurateShardConfig).files)


def run_scale(root: Path, scale: int, base_mb: int, shard_mb: int, cores: int, fmt: str) -> dict[str, Any]:
    """Build one scale's data stages with Snakemake; its figures per stage."""
    folder = root / f"x{scale}"
    if fmt == "warc":
        source_bytes = write_crawl(folder / "input", base_mb * scale)
    else:
        source_bytes = write_source(folder / "input", base_mb * scale, seed=scale)
    spec_path = folder / "spec.yaml"
    write_spec(spec_path, str(folder / "input" / f"*.{'warc.gz' if fmt == 'warc' else 'jsonl'}"), shard_mb, fmt)
    work = folder / "work"
    env = {**os.environ, "RUNLIB_WORK_DIR": str(work), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    env.pop("MLFLOW_TRACKING_URI", None)
    os.environ["RUNLIB_WORK_DIR"] = str(work)  # the graph below: this scale's artifacts
    from runlib.graph.build import build_graph
    from runlib.spec import load_spec

    graph = build_graph(load_spec(spec_path).spec)
    targets = [str(n.done_path) for n in graph.of("tokenize")]
    snakemake = Path(sys.executable).parent / "snakemake"
    cmd = [str(snakemake), "-s", str(ROOT / "Snakefile"), "--directory", str(folder), "--cores", str(cores)]
    proc = subprocess.run(
        [*cmd, *targets, "--config", f"spec={spec_path}"], capture_output=True, text=True, env=env, check=False
    )
    if proc.returncode:
        raise SystemExit(f"snakemake failed at {scale}x:\n{proc.stderr[-3000:]}")
    rows = benchmark_rows(work, graph)
    read_mb = {stage: stage_bytes(graph, stage) / 2**20 for stage in rows if stage != "train_tokenizer"}
    return {"scale": scale, "source_mb": source_bytes / 2**20, "rows": rows, "read_mb": read_mb, "format": fmt}


def print_scale(result: dict[str, Any]) -> None:
    kept = result["read_mb"]["tokenize"] / result["source_mb"]
    print(
        f"\n{result['scale']}x: {result['source_mb']:.1f} MB of {result['format']} input, {kept:.3g} of its bytes curated"
    )
    print(
        f"  {'stage':<16} {'jobs':>5} {'max RSS MB':>11} {'job s':>8} {'stage s':>8} {'MB read':>8} {'MB/core-s':>10}"
    )
    for stage, rows in result["rows"].items():
        job_s, stage_s = sum(r["s"] for r in rows), sum(r["stage_s"] for r in rows)
        mb = result["read_mb"].get(stage, float("nan"))
        rate = f"{mb / stage_s:10.2f}" if stage_s and mb == mb else f"{'-':>10}"
        rss = max(r["max_rss"] for r in rows)
        print(f"  {stage:<16} {len(rows):>5} {rss:>11.0f} {job_s:>8.1f} {stage_s:>8.1f} {mb:>8.1f} {rate}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m runlib.bench.data_scale", description=__doc__.split("\n")[0])
    parser.add_argument("--base-mb", type=int, default=16, help="MB of input at 1x (default 16)")
    parser.add_argument("--shard-mb", type=int, default=4, help="input.shard_bytes in MiB (default 4)")
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--cores", type=int, default=2, help="snakemake --cores (default 2)")
    parser.add_argument("--format", choices=["jsonl", "warc"], default="jsonl", help="the source's input")
    parser.add_argument("--work", type=Path, help="keep the corpora and artifacts here (default: a temporary folder)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="runlib-data-scale-") as tmp:
        root = args.work or Path(tmp)
        results = [run_scale(root, s, args.base_mb, args.shard_mb, args.cores, args.format) for s in args.scales]
    for result in results:
        print_scale(result)
    peaks = [max(r["max_rss"] for rows in res["rows"].values() for r in rows) for res in results]
    first, last = results[0], results[-1]
    print(
        f"\nlargest data job: {peaks[0]:.0f} MB at {first['scale']}x, {peaks[-1]:.0f} MB at {last['scale']}x: "
        f"{peaks[-1] / peaks[0]:.2f}x (goal <= 1.3x from 1x to 4x)"
    )


if __name__ == "__main__":
    main()
