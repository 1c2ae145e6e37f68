"""Token shards on disk: one flat file of token ids per split, and the offsets of its documents.

    <split>.bin      every document's token ids, end to end (raw uint16 or uint32, native byte order, no header)
    <split>.idx.npy  np.int64 offsets, n_docs + 1 of them: document i is tokens[offsets[i]:offsets[i + 1]]

The dtype is not written down: it is the .bin size divided by the token count (offsets[-1]).
`write_shard` writes both files under temporary names and renames them into place, .idx.npy last,
so a reader that finds the index finds a complete shard. `TokenShard` reads one by memory map.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
from numpy.typing import DTypeLike, NDArray

from runlib.errors import UserError
from runlib.util.atomic import atomic_file

TokenDtype = np.dtype[np.uint16] | np.dtype[np.uint32]
DTYPES: dict[str, TokenDtype] = {"uint16": np.dtype(np.uint16), "uint32": np.dtype(np.uint32)}
FLUSH_TOKENS = 1 << 22  # write in pieces of ~4M tokens (8-16 MB)


def token_dtype(spec_dtype: str, max_id: int) -> TokenDtype:
    """The storage dtype for ids up to max_id: data.token_dtype, or with auto the smallest that holds them."""
    if spec_dtype == "auto":
        return DTYPES["uint16"] if max_id <= np.iinfo(np.uint16).max else DTYPES["uint32"]
    if spec_dtype not in DTYPES:
        raise UserError(f"data.token_dtype: {spec_dtype!r} is not one of auto, uint16, uint32")
    dtype = DTYPES[spec_dtype]
    if max_id > np.iinfo(dtype).max:
        raise UserError(
            f"data.token_dtype: {spec_dtype} holds ids up to {np.iinfo(dtype).max}, but the tokenizer's largest id "
            f"is {max_id}; use uint32 or auto"
        )
    return dtype


def bin_path(out_dir: Path, split: str) -> Path:
    return Path(out_dir) / f"{split}.bin"


def idx_path(out_dir: Path, split: str) -> Path:
    return Path(out_dir) / f"{split}.idx.npy"


class ShardWriter:
    """Appends documents to a shard; `close()` puts the files in place. Use as a context manager."""

    def __init__(self, out_dir: Path, split: str, dtype: DTypeLike):
        self.dtype = np.dtype(dtype)
        if self.dtype not in DTYPES.values():
            raise ValueError(f"token dtype must be uint16 or uint32, got {self.dtype}")
        self.out_dir, self.split = Path(out_dir), split
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._tmp_bin = self.out_dir / f".{split}.bin.{os.getpid()}.tmp"
        self._file = open(self._tmp_bin, "wb")
        self._lengths: list[np.ndarray] = []
        self._pending: list[Sequence[int]] = []
        self._pending_tokens = 0
        self.n_docs = 0
        self.n_tokens = 0

    def add(self, doc: Sequence[int]) -> None:
        """Append one document (a sequence of ids, written as given)."""
        self._pending.append(doc)
        self._pending_tokens += len(doc)
        if self._pending_tokens >= FLUSH_TOKENS:
            self._flush_pending()

    def add_chunk(self, tokens: np.ndarray, lengths: np.ndarray) -> None:
        """Append many documents at once: their ids end to end (already of this shard's dtype) and their lengths."""
        self._flush_pending()
        tokens = np.asarray(tokens)
        lengths = np.asarray(lengths, dtype=np.int64)
        if tokens.dtype != self.dtype:
            raise ValueError(f"add_chunk: tokens are {tokens.dtype}, the shard is {self.dtype}")
        if int(lengths.sum()) != tokens.size:
            raise ValueError(f"add_chunk: lengths sum to {int(lengths.sum())}, but {tokens.size} tokens were given")
        tokens.tofile(self._file)
        self._lengths.append(lengths)
        self.n_docs += lengths.size
        self.n_tokens += tokens.size

    def _flush_pending(self) -> None:
        if not self._pending:
            return
        lengths = np.fromiter((len(d) for d in self._pending), dtype=np.int64, count=len(self._pending))
        flat = (
            np.concatenate([np.asarray(d, dtype=np.int64).reshape(-1) for d in self._pending])
            if lengths.sum()
            else np.zeros(0, np.int64)
        )
        limit = np.iinfo(self.dtype).max
        if flat.size and (flat.min() < 0 or flat.max() > limit):
            bad = int(flat.max()) if flat.max() > limit else int(flat.min())
            raise ValueError(f"token id {bad} does not fit {self.dtype} (0..{limit})")
        self._pending, self._pending_tokens = [], 0
        self.add_chunk(flat.astype(self.dtype), lengths)

    def close(self) -> dict[str, Any]:
        self._flush_pending()
        # the .bin is streamed chunk by chunk from the constructor on, so it cannot sit inside atomic_file;
        # the same fsync-then-rename by hand
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        offsets = np.zeros(self.n_docs + 1, dtype=np.int64)
        if self._lengths:
            np.cumsum(np.concatenate(self._lengths), out=offsets[1:])
        os.replace(self._tmp_bin, bin_path(self.out_dir, self.split))
        with atomic_file(idx_path(self.out_dir, self.split)) as tmp_idx, open(tmp_idx, "wb") as f:
            np.save(f, offsets)  # to a file object: np.save would add ".npy" to the temporary name
        return {
            "split": self.split,
            "docs": self.n_docs,
            "tokens": self.n_tokens,
            "dtype": self.dtype.name,
            "bin": bin_path(self.out_dir, self.split).name,
            "idx": idx_path(self.out_dir, self.split).name,
        }

    def abort(self) -> None:
        self._file.close()
        self._tmp_bin.unlink(missing_ok=True)

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is not None:
            self.abort()


def write_shard(out_dir: Path, split: str, docs_token_ids: Iterable[Sequence[int]], dtype: DTypeLike) -> dict[str, Any]:
    """Write out_dir/<split>.bin and <split>.idx.npy from the documents' token ids; returns the counts."""
    with ShardWriter(out_dir, split, dtype) as writer:
        for doc in docs_token_ids:
            writer.add(doc)
        return writer.close()


class _Documents:
    """len(), doc(i) and doc_lengths() over `offsets` (n_docs + 1) and `tokens`, for a shard or a source's parts."""

    offsets: NDArray[np.int64]
    tokens: Any

    def __len__(self) -> int:
        return self.offsets.size - 1

    def doc(self, i: int) -> np.ndarray:
        """The token ids of document i."""
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"document {i} out of range (shard of {n})")
        ids: np.ndarray = self.tokens[int(self.offsets[i]) : int(self.offsets[i + 1])]
        return ids

    def doc_lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


class TokenShard(_Documents):
    """A written shard, memory-mapped: len(shard) documents, shard.doc(i) the ids of document i (a read-only
    view into the memory map)."""

    def __init__(self, out_dir: Path, split: str):
        self.path = bin_path(out_dir, split)
        self.offsets: NDArray[np.int64] = np.load(idx_path(out_dir, split), mmap_mode="r")
        if self.offsets.ndim != 1 or self.offsets.size < 1 or self.offsets[0] != 0:
            raise ValueError(f"{idx_path(out_dir, split)}: not a shard index (int64 offsets starting at 0)")
        self.n_tokens = int(self.offsets[-1])
        size = self.path.stat().st_size
        if self.n_tokens == 0:
            if size:
                raise ValueError(f"{self.path}: {size} bytes, but the index holds no tokens")
            self.dtype: TokenDtype = DTYPES["uint16"]
            self.tokens: NDArray[np.unsignedinteger[Any]] = np.zeros(0, dtype=self.dtype)
            return
        itemsize, rest = divmod(size, self.n_tokens)
        dtype = {2: DTYPES["uint16"], 4: DTYPES["uint32"]}.get(itemsize)
        if rest or dtype is None:
            raise ValueError(f"{self.path}: {size} bytes do not hold {self.n_tokens} uint16 or uint32 tokens")
        self.dtype = dtype
        self.tokens = np.memmap(self.path, dtype=dtype, mode="r", shape=(self.n_tokens,))


TokenDirs = Path | Sequence[Path]
"""A source's token shards: one tokenize artifact's folder, or its parts' folders in part order."""


class _PartTokens:
    """The parts' token memory maps as one array for integer-array indexing (what the loader gathers)."""

    def __init__(self, parts: list[TokenShard]):
        self.parts = parts
        self.starts = np.cumsum([0] + [p.n_tokens for p in parts], dtype=np.int64)
        self.dtype = parts[0].dtype
        self.shape = (int(self.starts[-1]),)

    def __len__(self) -> int:
        return self.shape[0]

    def __array__(self, dtype: Any = None, copy: Any = None) -> NDArray[Any]:
        whole = np.concatenate([np.asarray(p.tokens) for p in self.parts])
        return whole if dtype is None else whole.astype(dtype)

    def __getitem__(self, index: Any) -> NDArray[np.unsignedinteger[Any]]:
        if isinstance(index, slice):
            return self[np.arange(*index.indices(len(self)), dtype=np.int64)]
        positions = np.asarray(index, dtype=np.int64)
        if positions.size and (positions.min() < 0 or positions.max() >= len(self)):
            raise IndexError(f"token position out of range (0 .. {len(self) - 1})")
        part = np.searchsorted(self.starts, positions, side="right") - 1
        out = np.empty(positions.shape, dtype=self.dtype)
        for p in np.unique(part).tolist():
            sel = part == p
            out[sel] = self.parts[p].tokens[positions[sel] - self.starts[p]]
        return out


class SourceShard(_Documents):
    """A source's split over its parts, as one TokenShard: the parts' documents in part order (offsets and
    tokens renumbered into one stream), so what reads it is the same whether the source was tokenized in
    one part or many."""

    def __init__(self, dirs: Sequence[Path], split: str):
        if not dirs:
            raise ValueError(f"no token shard folders for the {split} split")
        parts = [TokenShard(Path(d), split) for d in dirs]
        dtypes = {p.dtype for p in parts if p.n_tokens}
        if len(dtypes) > 1:
            raise ValueError(f"the parts of {dirs[0]} store tokens as {sorted(map(str, dtypes))}: rebuild them alike")
        self.path = parts[0].path
        with_tokens = [p for p in parts if p.n_tokens] or parts[:1]
        self.dtype = with_tokens[0].dtype
        self.n_tokens = sum(p.n_tokens for p in parts)
        starts = np.cumsum([0] + [p.n_tokens for p in parts[:-1]], dtype=np.int64)
        self.offsets: NDArray[np.int64] = np.concatenate(
            [np.zeros(1, dtype=np.int64)] + [np.asarray(p.offsets[1:]) + s for p, s in zip(parts, starts, strict=True)]
        )
        self.tokens = _PartTokens(with_tokens) if len(with_tokens) > 1 else with_tokens[0].tokens


def open_split(dirs: TokenDirs, split: str) -> TokenShard | SourceShard:
    """One source's split: its only tokenize folder as a TokenShard, or its parts' folders as one SourceShard."""
    if isinstance(dirs, (str, Path)):
        return TokenShard(Path(dirs), split)
    dirs = list(dirs)
    return TokenShard(Path(dirs[0]), split) if len(dirs) == 1 else SourceShard(dirs, split)


def token_inputs(inputs: dict[str, Path]) -> dict[str, list[Path]]:
    """Source -> its token folders in part order, from a stage's input roles `tokens:<source>/<part>`."""
    parts: dict[str, dict[int, Path]] = {}
    for role, directory in inputs.items():
        if role.startswith("tokens:"):
            source, _, part = role.removeprefix("tokens:").rpartition("/")
            parts.setdefault(source, {})[int(part)] = Path(directory)
    out = {}
    for source, by_part in parts.items():
        if sorted(by_part) != list(range(len(by_part))):
            raise ValueError(f"source {source!r}: token parts {sorted(by_part)}, not 0 .. {len(by_part) - 1}")
        out[source] = [by_part[i] for i in range(len(by_part))]
    return out
