"""Dedup across a source's shards without a job that holds the source: the tables each curate_shard writes,
and the stage dedup_partition, one job per slice of the hash space.

Each shard writes, beside docs.jsonl, two tables sorted so that a slice of the hash space is a contiguous
range of each (read by memory map, nothing else of the file is touched):
    hashes.npy  one row per document: its text's SHA-256 (four big-endian 64-bit words), its line, its
                characters; sorted by hash, then line. Read by the exact-only partitions (a slice of the
                first word) and by curate_source's held-out choice (the smallest hashes, in order).
    bands.npy   with curate.dedup.minhash, (bands, docs) rows: a 64-bit mix of the band's `rows` MinHash
                values (the slice key), the values themselves, the document's hash and line; each band
                sorted by mix, values, hash, line.
A document's global id is (shard << 40) | line: the order of the shards' concatenation, the order in which
"first occurrence" is meant.

dedup_partition q of Q takes the slice [q * 2^64 / Q, (q + 1) * 2^64 / Q) of every shard's table. With
MinHash: in each band, the documents with equal values form a bucket (all of a bucket falls in one slice);
in band 0, a bucket's copies of one text (equal hashes) are the exact duplicates, all but the first
occurrence (the whole source's exact dedup, since every document is in band 0 and copies share every
bucket); in every band, those copies are left out and each remaining document is paired with the
BUCKET_WINDOW before it in rank order (its hash, then its id). Without MinHash: equal hashes in the slice
of hashes.npy. The candidates' texts are then read (by seeking: each shard's offsets.npy) for the exact
shingle Jaccard check, and the pairs at or above the threshold written with their documents' hashes.
Memory: the slice, about 1/Q of the source's tables (Q is the source's shard count, so about one shard's
tables per job), and the texts of VERIFY_CHUNK_PAIRS candidate pairs at a time.

The rank order (hash, then id) rather than the input order makes the documents kept a function of the texts:
the same whatever the number of shards or the order of the files (runlib.curate.source: the verified pairs'
clusters keep their lowest-ranked document). tests/curate/test_partition.py holds the result against the
single-process reference (runlib.curate.minhash's functions on all documents at once, in rank order).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from runlib.curate.config import DedupPartitionConfig
from runlib.curate.files import DOCS_FILE, OFFSETS_FILE, read_lines_at, save_npy, write_json
from runlib.curate.minhash import BUCKET_WINDOW, pair_jaccard, shingle_sets, splitmix64
from runlib.curate.npyfile import NpyFile, sorted_range
from runlib.spec.models import MinhashSpec

HASHES_FILE = "hashes.npy"
BANDS_FILE = "bands.npy"
EXACT_FILE = "exact_duplicates.npy"  # a partition's exact duplicates: sorted global ids (uint64)
PAIRS_FILE = "pairs.npy"  # a partition's candidate pairs: (k, 2) global ids, the lower-ranked first
VERIFIED_FILE = "verified.npy"  # those of them at or above the Jaccard threshold (all of them at threshold 0)
PAIR_DOCS_FILE = "pair_docs.npy"  # the verified pairs' documents: PAIR_DOC_DTYPE rows, sorted by id
SHARD_SHIFT = 40  # a global id: shard << 40 | line (2^40 lines per shard, 2^24 shards)
HASH_DTYPE = np.dtype([("sha", "<u8", (4,)), ("line", "<u8"), ("chars", "<u8")])
VERIFY_CHUNK_PAIRS = 2048
"""Candidate pairs verified together: their texts are what a dedup_partition job holds beyond its slice."""
PAIR_DOC_DTYPE = np.dtype([("id", "<u8"), ("sha", "<u8", (4,))])
_MIX = np.uint64(0x100000001B3)  # FNV-1a's 64-bit prime: the band mix's multiplier before each value


def band_dtype(rows: int) -> np.dtype[Any]:
    return np.dtype([("mix", "<u8"), ("key", "<u4", (rows,)), ("sha", "<u8", (4,)), ("line", "<u8")])


def sha_words(hex_digests: list[str]) -> NDArray[np.uint64]:
    """(n, 4) uint64: each SHA-256 as four big-endian words, so that sorting the rows sorts the digests."""
    raw = b"".join(bytes.fromhex(h) for h in hex_digests)
    return np.frombuffer(raw, dtype=">u8").astype(np.uint64).reshape(-1, 4)


def band_mix(values: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """A 64-bit mix of each row of (n, rows) values, spread evenly over the 64-bit range (the slice key)."""
    mix = np.zeros(len(values), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for column in values.T:
            mix = splitmix64(mix * _MIX + column.astype(np.uint64))
    return mix


def row_order(*columns: NDArray[Any]) -> NDArray[np.intp]:
    """Indices sorting rows by the columns in order (each a 1-D or 2-D array: its columns in order)."""
    keys: list[NDArray[Any]] = []
    for column in columns:
        keys.extend(column.T if column.ndim == 2 else [column])
    return np.lexsort(keys[::-1])


def hash_table(hex_digests: list[str], chars: list[int]) -> NDArray[Any]:
    table = np.empty(len(hex_digests), dtype=HASH_DTYPE)
    table["sha"] = sha_words(hex_digests) if hex_digests else np.empty((0, 4), dtype=np.uint64)
    table["line"] = np.arange(len(hex_digests), dtype=np.uint64)
    table["chars"] = chars
    return table[row_order(table["sha"], table["line"])]


def band_table(sigs: NDArray[np.uint64], hex_digests: list[str], minhash: MinhashSpec) -> NDArray[Any]:
    """(bands, docs) rows of bands.npy, each band sorted."""
    n, rows = len(sigs), minhash.rows
    table = np.empty((minhash.bands, n), dtype=band_dtype(rows))
    words = sha_words(hex_digests) if n else np.empty((0, 4), dtype=np.uint64)
    for band in range(minhash.bands):
        values = sigs[:, band * rows : (band + 1) * rows]
        row = table[band]
        row["mix"] = band_mix(values)
        row["key"] = values.astype(np.uint32)  # MinHash values are below 2^32 (runlib.curate.minhash)
        row["sha"] = words
        row["line"] = np.arange(n, dtype=np.uint64)
        table[band] = row[row_order(row["mix"], row["key"], row["sha"], row["line"])]
    return table


def write_shard_tables(
    out_dir: Path,
    hex_digests: list[str],
    chars: list[int],
    sigs: NDArray[np.uint64] | None,
    minhash: MinhashSpec | None,
) -> None:
    save_npy(out_dir / HASHES_FILE, hash_table(hex_digests, chars))
    if sigs is not None and minhash is not None:
        save_npy(out_dir / BANDS_FILE, band_table(sigs, hex_digests, minhash))
    else:
        (out_dir / BANDS_FILE).unlink(missing_ok=True)


def slice_bounds(partition: int, partitions: int) -> tuple[int, int]:
    """[lo, hi) of partition q of Q over the 64-bit range (hi = 2^64 for the last)."""
    return partition * (1 << 64) // partitions, (partition + 1) * (1 << 64) // partitions


def _load(path: Path, source_name: str) -> NpyFile:
    if not path.exists():
        raise ValueError(
            f"dedup_partition {source_name}: {path} is missing (not a current curate_shard output); rebuild"
        )
    return NpyFile(path)


def _band_slice(table: NpyFile, band: int, field: str, lo: int, hi: int) -> NDArray[Any]:
    """The rows of a band whose key (the first element of `field`, sorted) is in [lo, hi)."""
    return table.rows(band, *sorted_range(table, band, field, lo, hi))


def global_ids(shard: int, lines: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """The global ids of these lines of shard `shard`: (shard << SHARD_SHIFT) | line."""
    return (np.uint64(shard) << np.uint64(SHARD_SHIFT)) | lines.astype(np.uint64)


def _gathered(parts: list[tuple[int, NDArray[Any]]]) -> tuple[NDArray[Any], NDArray[np.uint64]]:
    """The rows of every shard's slice, concatenated, and their global ids."""
    rows = [np.array(part) for _, part in parts]
    ids = [global_ids(shard, part["line"]) for (shard, _), part in zip(parts, rows, strict=True)]
    if not rows:
        return np.empty(0), np.empty(0, dtype=np.uint64)
    return np.concatenate(rows), np.concatenate(ids).astype(np.uint64)


def _copies(sha: NDArray[np.uint64], same_group: NDArray[np.bool_]) -> NDArray[np.bool_]:
    """True for each row (sorted by group, hash, id) whose group and hash equal its predecessor's: every copy
    of a text but its first occurrence."""
    out = np.zeros(len(sha), dtype=bool)
    if len(sha) > 1:
        out[1:] = same_group & np.all(sha[1:] == sha[:-1], axis=1)
    return out


def _window_pairs(ids: NDArray[np.uint64], same_bucket_at: list[NDArray[np.bool_]]) -> list[NDArray[np.uint64]]:
    found = []
    for lag, same in enumerate(same_bucket_at, start=1):
        if same.any():
            found.append(np.stack((ids[:-lag][same], ids[lag:][same]), axis=1))
    return found


def _same_bucket(rows: NDArray[Any]) -> NDArray[np.bool_]:
    """For rows sorted by mix then values: True where a row is in its predecessor's bucket."""
    same: NDArray[np.bool_] = (rows["mix"][1:] == rows["mix"][:-1]) & np.all(
        rows["key"][1:] == rows["key"][:-1], axis=1
    )
    return same


def minhash_partition(
    tables: list[NpyFile], lo: int, hi: int, exact: bool
) -> tuple[NDArray[np.uint64], NDArray[np.uint64], NDArray[Any]]:
    """(exact duplicates, candidate pairs, the pairs' documents as PAIR_DOC_DTYPE rows sorted by id) of the
    buckets whose mix is in [lo, hi), over the shards' band tables."""
    bands = tables[0].shape[0] if tables else 0
    duplicates: NDArray[np.uint64] = np.empty(0, dtype=np.uint64)
    found: list[NDArray[np.uint64]] = []
    docs: list[NDArray[Any]] = []
    for band in range(bands):
        rows, ids = _gathered([(s, _band_slice(t, band, "mix", lo, hi)) for s, t in enumerate(tables)])
        if not len(ids):
            continue
        order = row_order(rows["mix"], rows["key"], rows["sha"], ids)
        rows, ids = rows[order], ids[order]
        same = _same_bucket(rows)
        if exact:
            copies = _copies(rows["sha"], same)
            if band == 0:
                duplicates = np.sort(ids[copies])
            keep = ~copies
            rows, ids = rows[keep], ids[keep]
            same = _same_bucket(rows)
        bucket = np.concatenate(([0], np.cumsum(~same))) if len(ids) else np.empty(0, dtype=np.int64)
        lags = [bucket[lag:] == bucket[:-lag] for lag in range(1, min(BUCKET_WINDOW, len(ids) - 1) + 1)]
        found.extend(_window_pairs(ids, lags))
        paired = np.zeros(len(ids), dtype=bool)
        for lag, same in enumerate(lags, start=1):
            paired[:-lag] |= same
            paired[lag:] |= same
        docs.append(_pair_docs(ids[paired], rows["sha"][paired]))
    pairs = np.unique(np.concatenate(found), axis=0) if found else np.empty((0, 2), dtype=np.uint64)
    table = np.concatenate(docs) if docs else np.empty(0, dtype=PAIR_DOC_DTYPE)
    _, first = np.unique(table["id"], return_index=True)
    return duplicates, pairs.astype(np.uint64), table[first]


def _pair_docs(ids: NDArray[np.uint64], sha: NDArray[np.uint64]) -> NDArray[Any]:
    out = np.empty(len(ids), dtype=PAIR_DOC_DTYPE)
    out["id"], out["sha"] = ids, sha
    return out


def _texts(shard_dirs: list[Path], ids: NDArray[np.uint64], source_name: str) -> list[str]:
    """The texts of the documents with these sorted global ids, each read by seeking to its line (offsets.npy)."""
    texts: list[str] = []
    shards = (ids >> np.uint64(SHARD_SHIFT)).astype(np.int64)
    lines = (ids & np.uint64((1 << SHARD_SHIFT) - 1)).astype(np.int64)
    for shard in np.unique(shards).tolist():
        directory = Path(shard_dirs[shard])
        offsets_file = _load(directory / OFFSETS_FILE, source_name)
        wanted = lines[shards == shard]
        if len(wanted) and int(wanted.max()) + 1 >= offsets_file.rows_per_band:
            raise ValueError(
                f"dedup_partition {source_name}: {directory / OFFSETS_FILE} is shorter than its tables; rebuild"
            )
        spans = [tuple(offsets_file.rows(0, line, line + 2).tolist()) for line in wanted.tolist()]
        texts += [json.loads(line)["text"] for line in read_lines_at(directory / DOCS_FILE, spans)]
    return texts


def verify_pairs(
    minhash: MinhashSpec, shard_dirs: list[Path], pairs: NDArray[np.uint64], docs: NDArray[Any], source_name: str
) -> tuple[NDArray[np.uint64], NDArray[Any], dict[str, int]]:
    """(the pairs whose exact shingle Jaccard is at least minhash.threshold, their documents, the figures):
    the candidates' texts only are read, VERIFY_CHUNK_PAIRS pairs' at a time, so the texts held do not grow
    with the source (a document in pairs of several chunks is read once per chunk: docs_verified counts
    reads). A pair two bands make candidates in two slices is verified in each."""
    stats = {"candidate_pairs": len(pairs), "verified_pairs": len(pairs), "docs_verified": 0}
    if minhash.threshold > 0 and len(pairs):
        kept = []
        for start in range(0, len(pairs), VERIFY_CHUNK_PAIRS):  # pairs are sorted: a chunk's documents are near
            chunk = pairs[start : start + VERIFY_CHUNK_PAIRS]
            needed = np.unique(chunk)
            offsets, hashes = shingle_sets(_texts(shard_dirs, needed, source_name), minhash.ngram)
            kept.append(chunk[pair_jaccard(offsets, hashes, np.searchsorted(needed, chunk)) >= minhash.threshold])
            stats["docs_verified"] += len(needed)
        pairs = np.concatenate(kept)
        stats["verified_pairs"] = len(pairs)
    docs = docs[np.isin(docs["id"], pairs)] if len(pairs) else docs[:0]
    return pairs, docs, stats


def exact_partition(tables: list[NpyFile], lo: int, hi: int) -> NDArray[np.uint64]:
    """The exact duplicates (all copies of a text but its first occurrence) among the hashes in [lo, hi)."""
    rows, ids = _gathered([(s, _band_slice(t, 0, "sha", lo, hi)) for s, t in enumerate(tables)])
    if not len(ids):
        return np.empty(0, dtype=np.uint64)
    order = row_order(rows["sha"], ids)
    rows, ids = rows[order], ids[order]
    return np.sort(ids[_copies(rows["sha"], np.ones(len(ids) - 1, dtype=bool))])


def dedup_partition(
    config: DedupPartitionConfig, shard_dirs: list[Path], out_dir: Path, source_name: str = "source"
) -> dict[str, Any]:
    """Partition config.partition of config.partitions: its exact duplicates and candidate pairs, into
    out_dir/exact_duplicates.npy and out_dir/pairs.npy (and stats.json)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    lo, hi = slice_bounds(config.partition, config.partitions)
    minhash = config.dedup.minhash
    if minhash is not None:
        tables = [_load(Path(d) / BANDS_FILE, source_name) for d in shard_dirs]
        for path, table in zip(shard_dirs, tables, strict=True):
            if table.ndim != 2 or table.shape[0] != minhash.bands or table.dtype != band_dtype(minhash.rows):
                raise ValueError(
                    f"dedup_partition {source_name}: {Path(path) / BANDS_FILE} does not hold {minhash.bands} bands "
                    f"of {minhash.rows} rows; rebuild the shards"
                )
        duplicates, pairs, docs = minhash_partition(tables, lo, hi, config.dedup.exact)
        verified, docs, verification = verify_pairs(minhash, shard_dirs, pairs, docs, source_name)
    else:
        tables = [_load(Path(d) / HASHES_FILE, source_name) for d in shard_dirs]
        duplicates, pairs = exact_partition(tables, lo, hi), np.empty((0, 2), dtype=np.uint64)
        verified, docs = pairs, np.empty(0, dtype=PAIR_DOC_DTYPE)
        verification = {"candidate_pairs": 0, "verified_pairs": 0, "docs_verified": 0}
    save_npy(out_dir / EXACT_FILE, duplicates)
    save_npy(out_dir / PAIRS_FILE, pairs)
    save_npy(out_dir / VERIFIED_FILE, verified)
    save_npy(out_dir / PAIR_DOCS_FILE, docs)
    result = {
        "counts": {"exact_duplicates": len(duplicates), **verification},
        "partition": config.partition,
        "partitions": config.partitions,
    }
    write_json(out_dir / "stats.json", result)
    return result
