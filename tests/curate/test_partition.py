"""Dedup across shards in slices (runlib.curate.partition, then curate_source): the documents kept and held
out are those of the single-process reference (runlib.curate.minhash's functions on every document at once,
in rank order), and the same whatever the number of shards and the order of the files. The corpus plants
exact copies and near-duplicates across shards, and buckets larger than the pairing window."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import numpy as np
import pytest

from runlib.curate.minhash import first_of_clusters, signatures, verified_pairs
from runlib.curate.partition import HASHES_FILE, SHARD_SHIFT, band_mix, slice_bounds
from runlib.spec.models import MinhashSpec
from tests.curate import jsonl_source, make_spec, read_lines, run_source, write_jsonl

_LETTERS = random.Random(3)
VOCAB = ["".join(_LETTERS.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(6)) for _ in range(800)]  # no
# digits: MinHash's simplify_text makes every digit run "0"
FILES = 5
HELDOUT = 3


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def corpus() -> list[list[str]]:
    """FILES files of documents: distinct ones, exact copies across files, near-duplicates (one word
    changed), texts that share 60% of another's words (some MinHash candidates, below the threshold), and one
    family of 45 variants whose buckets outgrow the pairing window (32)."""
    rng = random.Random(7)
    base = [" ".join(rng.choice(VOCAB) for _ in range(120)) for _ in range(60)]
    docs = list(base)
    docs += [base[i] for i in (1, 7, 7, 30)]  # exact copies (one text three times)
    for i in (2, 11, 40):
        words = base[i].split()
        words[rng.randrange(len(words))] = "changed"
        docs.append(" ".join(words))
    for i in range(12, 30):  # candidates below the threshold: the first 60% of a text, then other words
        words = base[i].split()
        docs.append(" ".join(words[:72] + [rng.choice(VOCAB) for _ in range(48)]))
    family = base[50].split()
    for k in range(45):
        variant = list(family)
        variant[k] = "variant" + "abcdefghijklmnopqrstuvwxyz"[k % 26] * (1 + k // 26)
        docs.append(" ".join(variant))
    rng.shuffle(docs)
    return [docs[i::FILES] for i in range(FILES)]


def reference(
    texts: list[str], exact: bool, minhash: MinhashSpec | None
) -> tuple[tuple[list[str], list[str]], set[tuple[str, str]]]:
    """((train, heldout) texts, the candidate pairs as (hash, hash)) of the single-process reference, from the
    documents in input order."""
    candidates: set[tuple[str, str]] = set()
    kept = list(range(len(texts)))
    if exact:
        seen: set[str] = set()
        kept = [i for i in kept if not (texts[i] in seen or seen.add(texts[i]))]  # type: ignore[func-returns-value]
    if minhash is not None:
        ranked = sorted(kept, key=lambda i: (_sha(texts[i]), i))
        sigs = signatures([texts[i] for i in ranked], minhash.ngram, minhash.bands * minhash.rows)
        pairs, _ = verified_pairs(
            sigs, minhash.bands, minhash.rows, minhash.threshold, minhash.ngram, lambda w: [texts[ranked[j]] for j in w]
        )
        gone = {ranked[j] for j in np.flatnonzero(first_of_clusters(len(ranked), pairs))}
        everything, _ = verified_pairs(sigs, minhash.bands, minhash.rows, 0.0, minhash.ngram, lambda w: [])
        candidates = {(_sha(texts[ranked[a]]), _sha(texts[ranked[b]])) for a, b in everything.tolist()}
        kept = [i for i in kept if i not in gone]
    heldout = sorted(kept, key=lambda i: (_sha(texts[i]), i))[:HELDOUT]
    held = {_sha(texts[i]) for i in heldout}
    train = [i for i in kept if i not in heldout and _sha(texts[i]) not in held]
    return (sorted(texts[i] for i in train), sorted(texts[i] for i in heldout)), candidates


def sharded_pairs(out: str, shards: int) -> set[tuple[str, str]]:
    """The candidate pairs of every dedup_partition of a run, as (hash, hash)."""
    digests = {}
    for shard in range(shards):
        for line, row in enumerate(read_lines(f"{out}/shard{shard}/docs.jsonl")):
            digests[(shard << SHARD_SHIFT) | line] = row["sha256"]
    pairs = np.concatenate([np.load(p) for p in sorted(Path(out).glob("partition*/pairs.npy"))])
    return {(digests[int(a)], digests[int(b)]) for a, b in pairs}


def sharded(shards: int, dedup: dict, out: str) -> tuple[list[str], list[str]]:
    """(train, heldout) texts of the workflow's path with `shards` shards (files dealt as the workflow deals
    them: shard i takes files i, i + shards, ...)."""
    spec = make_spec({"web": jsonl_source(dedup=dedup)}, heldout_docs=HELDOUT)
    files = [f"data/{i}.jsonl" for i in range(FILES)]
    run_source(spec, "web", [files[i::shards] for i in range(shards)], out=out)
    return tuple(sorted(r["text"] for r in read_lines(f"{out}/source/{split}.jsonl")) for split in ("train", "heldout"))


@pytest.mark.parametrize(
    "dedup",
    [{"minhash": {}}, {"minhash": {"threshold": 0.0}}, {"exact": False, "minhash": {}}, {}, {"exact": False}],
    ids=["exact+minhash", "unverified", "minhash", "exact", "none"],
)
def test_the_sharded_join_keeps_what_one_process_keeps_for_any_shard_count(dedup):
    files = corpus()
    for i, texts in enumerate(files):
        write_jsonl(f"data/{i}.jsonl", texts)
    in_order = [t for texts in files for t in texts]  # one shard reads the files in order
    minhash = MinhashSpec(**dedup["minhash"]) if "minhash" in dedup else None
    expected, candidates = reference(in_order, dedup.get("exact", True), minhash)
    assert len(expected[0]) < len(in_order) - HELDOUT or dedup == {"exact": False}  # something was removed
    if minhash is not None and minhash.threshold > 0:  # the verification matters: unverified keeps fewer
        unverified, _ = reference(in_order, dedup.get("exact", True), MinhashSpec(threshold=0.0))
        assert len(unverified[0]) < len(expected[0])
    for shards in (1, 2, 3, 5):
        assert sharded(shards, dedup, f"out{shards}") == expected, shards
        if minhash is not None:  # the same candidates, windows of large buckets included
            assert sharded_pairs(f"out{shards}", shards) == candidates, shards


def test_every_partition_holds_only_its_slice():
    files = corpus()
    for i, texts in enumerate(files):
        write_jsonl(f"data/{i}.jsonl", texts)
    sharded(3, {"minhash": {}}, "out")
    table = np.load(Path("out/shard0") / HASHES_FILE)
    assert np.all(np.diff(table["sha"][:, 0].astype(np.float64)) >= 0)  # sorted by hash: a slice is a range
    mixes = band_mix(np.arange(3000, dtype=np.uint64).reshape(-1, 3))
    counts = [np.count_nonzero((mixes >= lo) & (mixes < hi)) for lo, hi in (slice_bounds(q, 4) for q in range(4))]
    assert sum(counts) == 1000 and min(counts) > 200  # the mix spreads buckets evenly over the slices


def test_verification_in_chunks_keeps_the_same(monkeypatch):
    """dedup_partition verifies its candidates VERIFY_CHUNK_PAIRS at a time (the texts it holds do not grow with
    the source): chunks of 2 pairs keep what one chunk keeps."""
    from runlib.curate import partition

    files = corpus()
    for i, texts in enumerate(files):
        write_jsonl(f"data/{i}.jsonl", texts)
    whole = sharded(3, {"minhash": {}}, "whole")
    monkeypatch.setattr(partition, "VERIFY_CHUNK_PAIRS", 2)
    assert sharded(3, {"minhash": {}}, "chunked") == whole
    reads = sum(
        json.loads(p.read_text())["counts"]["docs_verified"] for p in Path("chunked").glob("partition*/stats.json")
    )
    once = sum(
        json.loads(p.read_text())["counts"]["docs_verified"] for p in Path("whole").glob("partition*/stats.json")
    )
    assert reads > once  # the chunks really were smaller than the whole
