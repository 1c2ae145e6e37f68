"""Benchmark the data stages: tokenization against raw `encode_batch`, and curation docs/s.

    python -m runlib.bench.data_speed [--repeats 5] [--vocab 4096]

Corpus: the standard library's own .py files (sysconfig's stdlib, without tests, idlelib and
site-packages: ~700 files, ~11 MB) and the pydoc_data topics, written as one curated source.
A byte-level BPE of --vocab learned tokens is trained on it (runlib.tokenizer.train), then, interleaved,
--repeats times each (median reported):
    raw       tokenizer.encode_batch(all texts) on texts already in memory (the ids are not even read)
    runlib    runlib.data.tokenize.tokenize_part: read the JSONL, encode, write the shards
Goal: runlib >= 0.9x raw. Curation: runlib.curate.stage.curate_shard over the same documents as one
jsonl shard with the demo's `code` settings, docs/s (skipped, with a note, when the stage fails).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from runlib.curate.stage import curate_shard
from runlib.data.config import TokenizeConfig
from runlib.data.tokenize import tokenize_part
from runlib.graph.configs import curate_shard_configs
from runlib.spec.loader import load_spec, validate_data
from runlib.spec.models import TokenizerSpec
from runlib.tokenizer.config import TokenizerConfig
from runlib.tokenizer.train import load_tokenizer, train_tokenizer

SKIP_PARTS = {"site-packages", "test", "tests", "idlelib", "__pycache__"}


def corpus() -> list[str]:
    """Texts of the stdlib .py files (sorted by path) then the pydoc topics (sorted by name)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(f for f in root.rglob("*.py") if not SKIP_PARTS & set(f.relative_to(root).parts))
    texts = [f.read_bytes().decode("utf-8", "replace") for f in files]
    try:
        from pydoc_data.topics import topics

        texts += [topics[k] for k in sorted(topics)]
    except ImportError:
        pass
    return [t for t in texts if t.strip()]


def write_curated(texts: list[str], out: Path, heldout_every: int = 20) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with (
        open(out / "train.jsonl", "w", encoding="utf-8") as train,
        open(out / "heldout.jsonl", "w", encoding="utf-8") as held,
    ):
        for i, text in enumerate(texts):
            row = {"id": f"doc{i}", "text": text, "sha256": hashlib.sha256(text.encode()).hexdigest()}
            (held if i % heldout_every == 0 else train).write(json.dumps(row) + "\n")


def _tokenizer_config(vocab: int, train_bytes: int) -> TokenizerConfig:
    """The benchmark's tokenizer: the spec section's defaults but these, as runlib.graph.configs builds it."""
    tok = TokenizerSpec(
        vocab_size=vocab, reserved_tokens=256, digits="single", train_on={"code": 1.0}, train_bytes=train_bytes
    )
    return TokenizerConfig(**tok.model_dump())


def bench_tokenize(texts: list[str], work: Path, repeats: int, vocab: int) -> None:
    curated = work / "curated" / "code"
    write_curated(texts, curated)
    config = TokenizeConfig(token_dtype="auto")
    start = time.perf_counter()
    summary = train_tokenizer(_tokenizer_config(vocab, 4 << 20), {"code": curated}, work / "tokenizer")
    print(
        f"tokenizer: {summary['counts']['vocab_size']} ids trained on {summary['counts']['train_bytes'] / 1e6:.1f} MB "
        f"in {time.perf_counter() - start:.1f} s; held-out {summary['compression']['code']['bytes_per_token']:.2f} bytes/token"
    )
    tok = load_tokenizer(work / "tokenizer" / "tokenizer.json")
    all_texts = [
        json.loads(line)["text"]
        for name in ("train", "heldout")
        for line in open(curated / f"{name}.jsonl", encoding="utf-8")
    ]
    mb = sum(len(t.encode()) for t in all_texts) / 1e6
    tok.encode_batch(all_texts[:50])  # warm the thread pool
    raw, fast, ours = [], [], []
    for i in range(repeats):  # interleaved, so drift in machine load hits all alike
        start = time.perf_counter()
        tok.encode_batch(all_texts)
        raw.append(time.perf_counter() - start)
        start = time.perf_counter()
        tok.encode_batch_fast(all_texts)
        fast.append(time.perf_counter() - start)
        start = time.perf_counter()
        result = tokenize_part(config, curated, work / "tokenizer", work / f"tokens{i}")
        ours.append(time.perf_counter() - start)
    raw_rate, fast_rate, our_rate = (mb / statistics.median(x) for x in (raw, fast, ours))
    tokens = result["counts"]["tokens_train"] + result["counts"]["tokens_heldout"]
    print(f"corpus: {len(all_texts)} documents, {mb:.1f} MB, {tokens / 1e6:.2f} M tokens ({result['dtype']})")
    print(f"raw encode_batch        {raw_rate:6.2f} MB/s (median of {repeats})")
    print(f"raw encode_batch_fast   {fast_rate:6.2f} MB/s (no offsets; what tokenize_part calls)")
    print(f"runlib tokenize_part  {our_rate:6.2f} MB/s (JSONL in, shards out)")
    print(f"ratio tokenize_part / raw encode_batch: {our_rate / raw_rate:.2f} (goal >= 0.90)")


def bench_curate(texts: list[str], work: Path, repeats: int) -> None:
    raw = work / "raw.jsonl"
    with open(raw, "w", encoding="utf-8") as f:
        for text in texts:
            f.write(json.dumps({"text": text}) + "\n")
    root = Path(__file__).resolve().parents[2]
    data = load_spec(root / "specs" / "demo.yaml").data
    source = data["data"]["sources"]["code"]
    source["input"] = {"format": "jsonl", "path": str(raw)}
    times = []
    try:
        config = curate_shard_configs(validate_data(data).spec)["code"][0]
        for i in range(repeats):
            start = time.perf_counter()
            stats = curate_shard(config, work / f"curate{i}", "code")
            times.append(time.perf_counter() - start)
    except Exception as exc:  # another engineer's stage, still moving: report, do not fail the benchmark
        print(f"curation: skipped, curate_shard failed: {type(exc).__name__}: {exc}")
        return
    elapsed = statistics.median(times)
    counts = stats.get("counts", {}) if isinstance(stats, dict) else {}
    kept = counts.get("docs", counts.get("docs_out", "?"))
    print(
        f"curation (curate_shard, demo 'code' settings): {len(texts) / elapsed:,.0f} docs/s, "
        f"{sum(len(t) for t in texts) / 1e6 / elapsed:.1f} M chars/s (median of {repeats}; {len(texts)} docs in, {kept} kept)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--vocab", type=int, default=4096, help="learned tokens of the benchmark tokenizer")
    args = parser.parse_args()
    texts = corpus()
    print(f"python {sys.version.split()[0]}, corpus of {len(texts)} texts from {sysconfig.get_paths()['stdlib']}")
    with tempfile.TemporaryDirectory(prefix="runlib-data-speed-") as tmp:
        work = Path(tmp)
        bench_tokenize(texts, work, args.repeats, args.vocab)
        bench_curate(texts, work, args.repeats)


if __name__ == "__main__":
    main()
