"""Training sequences as a pure function of (seed, phase, step): resumable anywhere, the same on any world size.

Nothing here iterates over steps or keeps a cursor. For data step `s` of phase `i`:

1. Mixture. Of the step's B sequences (B = the phase's tokens per step / seq_len: micro_batch * grad_accum *
   data_parallel), source s takes cum_s(n + 1) - cum_s(n), with the closed form cum_s(n) = floor(n * B * w_s) for
   every source but the one of largest weight (ties: the first by name), which takes the rest, n * B - sum of the
   others. Weights are normalised exactly (Fraction of each weight's decimal repr), so floor is exact integer
   arithmetic. A batch ramp inside a phase (several timeline segments) applies the same rule per segment.
2. Source stream. Each source is its train shard's documents end to end (each ends with EOS), epoch after epoch,
   the order of each epoch a permutation drawn from a Generator seeded by sha256(seed, source, epoch). The k-th
   sequence of source s in the phase is the window [start_s + k*L, start_s + k*L + L + 1) of that stream, where
   start_s is what earlier phases consumed (`stream_starts`, from the plan: sum of cum_s(steps_j) * L_j).
   Consecutive windows share one token (the last target of one is the first input of the next): no token is
   replayed or skipped as a target. Windows cross document and epoch boundaries. With packing `none` the unit is
   documents: the k-th sequence is the k-th document of the stream, truncated to L + 1 tokens and padded.
3. Fill-in-the-middle (sources with fim.rate > 0). Per epoch, exactly round(rate * n) of the n eligible documents
   (non-empty, ending with EOS) are chosen (same Generator as the permutation): every epoch then has the same
   length (original + 3 per FIM document), so a stream position maps to its epoch in O(1). Each chosen
   document's body (its tokens without the final EOS) is cut at two points drawn uniformly in [0, len(body)]
   and, with probability spm_rate, laid out SPM, else PSM (Bavarian et al. 2022, "Efficient Training of Language
   Models to Fill in the Middle"; SPM in the variant StarCoder uses, prefix and middle contiguous):
       PSM: <fim_prefix> prefix <fim_suffix> suffix <fim_middle> middle EOS
       SPM: <fim_prefix> <fim_suffix> suffix <fim_middle> prefix middle EOS
   The per-document draws are a counter-based hash (splitmix64) of (sha256(seed, source, epoch), document): pure,
   vectorised over every token of a window, no per-document Generator.
4. Order. The step's B sequences (sources in name order, then k) are shuffled by a Generator seeded by
   sha256(seed, phase, step); rank r of `world` takes micro-batch m as rows [(m * world + r) * micro, + micro).
5. Packing (`pack_windows`): targets are the window shifted by one; `document` restarts position ids and starts a
   new doc id after every EOS (attention stays inside a document); `stream` keeps one document per row; with
   boundary_targets `masked` the target of a position whose input is EOS (EOS -> next document) is ignored (-100),
   while the EOS itself stays the target of the token before it.

Locating a window: per epoch, the prefix sums of the (transformed) document lengths in stream order are cached
and np.searchsorted finds each position's document; all gathers are vectorised (no Python loop over tokens).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from runlib.data.loader_config import LoaderConfig
from runlib.data.mixture import Mixture, Segment, phase_mixture, stream_starts  # noqa: F401 (re-exported)
from runlib.data.shards import SourceShard, TokenDirs, TokenShard, open_split
from runlib.tokenizer import special

IGNORE_INDEX = -100
PACKINGS = ("document", "stream", "none")
BOUNDARY_TARGETS = ("masked", "kept")
_EPOCH_CACHE = 4  # epochs kept per source (a window touches one, rarely two)


# ------------------------------------------------------------------------------------------------ seeds


def stable_seed(*parts: Any) -> int:
    """A 128-bit seed from the parts' text (sha256; never Python's salted hash())."""
    text = "\x1f".join(str(p) for p in parts)
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:16], "little")


def _rng(*parts: Any) -> np.random.Generator:
    return np.random.default_rng(stable_seed(*parts))


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def _splitmix64(key: int, counters: np.ndarray) -> np.ndarray:
    """splitmix64 output number `counter` of the stream keyed by `key`: uniform uint64, vectorised."""
    with np.errstate(over="ignore"):
        z = np.uint64(key & 0xFFFFFFFFFFFFFFFF) + (counters.astype(np.uint64) + np.uint64(1)) * _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        return z ^ (z >> np.uint64(31))


# ------------------------------------------------------------------------------------------------ packing


def pack_windows(
    tokens: np.ndarray,
    lengths: np.ndarray | None,
    eos_id: int,
    packing: str = "document",
    boundary_targets: str = "masked",
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rows of L + 1 tokens -> (inputs, targets, position_ids, doc_ids), each int64 [n, L].

    lengths[r]: how many leading tokens of row r are real (default all L + 1); the rest is padding: inputs
    there are EOS and every position without a following real token has target -100.
    """
    if packing not in PACKINGS:
        raise ValueError(f"packing must be one of {PACKINGS}, got {packing!r}")
    if boundary_targets not in BOUNDARY_TARGETS:
        raise ValueError(f"boundary_targets must be one of {BOUNDARY_TARGETS}, got {boundary_targets!r}")
    tokens = np.asarray(tokens, dtype=np.int64)
    if tokens.ndim != 2 or tokens.shape[1] < 2:
        raise ValueError(f"pack_windows: rows of L + 1 >= 2 tokens expected, got shape {tokens.shape}")
    n, length = tokens.shape[0], tokens.shape[1] - 1
    col = np.arange(length)
    inputs = tokens[:, :length].copy()
    targets = tokens[:, 1:].copy()
    if lengths is not None:
        lengths = np.asarray(lengths, dtype=np.int64).reshape(n, 1)
        inputs[col[None, :] >= lengths] = eos_id
        targets[col[None, :] >= lengths - 1] = IGNORE_INDEX
    is_eos = inputs == eos_id
    if boundary_targets == "masked":
        targets[is_eos] = IGNORE_INDEX
    if packing == "document":
        starts = np.zeros((n, length), dtype=bool)
        starts[:, 0] = True
        starts[:, 1:] = is_eos[:, :-1]  # a document starts after an EOS
        doc_ids = np.cumsum(starts, axis=1, dtype=np.int64) - 1
        first = np.maximum.accumulate(np.where(starts, col[None, :], 0), axis=1)
        positions = col[None, :] - first
    else:
        doc_ids = np.zeros((n, length), dtype=np.int64)
        positions = np.broadcast_to(col, (n, length)).copy()
    return inputs, targets, positions, doc_ids


def pack_window(
    tokens: np.ndarray,
    eos_id: int,
    packing: str = "document",
    boundary_targets: str = "masked",
    seq_len: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One window -> (inputs, targets, position_ids, doc_ids), each int64 [L].

    tokens: L + 1 ids (L = seq_len, default len(tokens) - 1). Fewer (at least one) are padded: the last real
    token then has no following token and its target is -100, as in an allocation that ends there.
    """
    tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
    length = len(tokens) - 1 if seq_len is None else seq_len
    if not 1 <= len(tokens) <= length + 1 or length < 1:
        raise ValueError(f"pack_window: {len(tokens)} tokens for seq_len {length} (need 1..L+1, L >= 1)")
    row = np.full((1, length + 1), eos_id, dtype=np.int64)
    row[0, : len(tokens)] = tokens
    out = pack_windows(row, np.array([len(tokens)]), eos_id, packing, boundary_targets)
    return tuple(a[0] for a in out)


def document_mask(doc_ids: torch.Tensor) -> torch.Tensor:
    """[n, L] doc ids -> [n, L, L] bool: query i may read key j iff same document and j <= i."""
    length = doc_ids.shape[-1]
    causal = torch.ones(length, length, dtype=torch.bool, device=doc_ids.device).tril()
    return (doc_ids[:, :, None] == doc_ids[:, None, :]) & causal


# the mixture (closed-form counts per source) lives in runlib.data.mixture (no torch)


# ------------------------------------------------------------------------------------------------ streams


@dataclass(frozen=True)
class _Epoch:
    perm: np.ndarray  # stream order -> document index
    cum: np.ndarray  # n_docs + 1 prefix sums of the (transformed) lengths in stream order
    fim: np.ndarray | None  # document index -> FIM in this epoch (bool), None without FIM
    key: int  # per-document hash key of this epoch


class SourceStream:
    """One source's token stream over epochs (see the module docstring)."""

    def __init__(
        self,
        name: str,
        shard: TokenShard | SourceShard,
        seed: int,
        eos_id: int,
        fim_rate: float = 0.0,
        spm_rate: float = 0.0,
        fim_ids: tuple[int, int, int] | None = None,
        reseed: tuple[int, int, bool] | None = None,
    ):
        """reseed: (seed, stream position, positions count documents), a phase's own seed from where the phase
        starts reading: the documents of the epoch in progress that no earlier phase has read (after the one
        the position falls in) are reordered by it, and so are the epochs that begin later."""
        self.name, self.shard, self.seed, self.eos_id = name, shard, seed, eos_id
        self.offsets = np.asarray(shard.offsets, dtype=np.int64)
        self.lengths = np.diff(self.offsets)
        self.n_docs = len(self.lengths)
        if self.n_docs == 0 or self.offsets[-1] == 0:
            raise ValueError(f"source {name!r}: its train shard holds no tokens")
        self.fim_rate, self.spm_rate = float(fim_rate), float(spm_rate)
        self.eligible = np.zeros(0, dtype=np.int64)
        if self.fim_rate > 0:
            if fim_ids is None:
                raise ValueError(f"source {name!r}: FIM needs the fim_prefix, fim_middle, fim_suffix ids")
            self.fim_prefix, self.fim_middle, self.fim_suffix = fim_ids
            nonempty = self.lengths > 0
            last = np.zeros(self.n_docs, dtype=np.int64) - 1
            last[nonempty] = shard.tokens[self.offsets[1:][nonempty] - 1]
            self.eligible = np.flatnonzero(last == eos_id)
        self.n_fim = int(round(self.fim_rate * len(self.eligible)))
        self.epoch_tokens = int(self.offsets[-1]) + 3 * self.n_fim  # the same for every epoch
        self._epochs: OrderedDict[int, _Epoch] = OrderedDict()
        self.reseed_from_epoch: int | None = None  # the epoch the phase starts in, at reseed_offset
        self.reseed_seed, self.reseed_offset, self.reseed_by_documents = seed, 0, False
        if reseed is not None:
            self.reseed_seed, position, self.reseed_by_documents = reseed
            length = self.n_docs if self.reseed_by_documents else self.epoch_tokens
            self.reseed_from_epoch, self.reseed_offset = divmod(position, length)

    def epoch_seed(self, e: int) -> int:
        """The seed that orders epoch e (the one in progress at a reseed is its own seed's, then reordered)."""
        late = self.reseed_from_epoch is not None and (
            e > self.reseed_from_epoch or (e == self.reseed_from_epoch and self.reseed_offset == 0)
        )
        return self.reseed_seed if late else self.seed

    def epoch(self, e: int) -> _Epoch:
        cached = self._epochs.get(e)
        if cached is not None:
            self._epochs.move_to_end(e)
            return cached
        seed = self.epoch_seed(e)
        rng = _rng(seed, "source", self.name, "epoch", e)
        perm = rng.permutation(self.n_docs)
        lengths = self.lengths
        fim = None
        if self.n_fim:
            fim = np.zeros(self.n_docs, dtype=bool)
            fim[rng.choice(self.eligible, size=self.n_fim, replace=False)] = True
            lengths = lengths + 3 * fim
        cum = np.zeros(self.n_docs + 1, dtype=np.int64)
        np.cumsum(lengths[perm], out=cum[1:])
        if e == self.reseed_from_epoch and self.reseed_offset > 0:
            # the epoch in progress when a reseeded phase starts: the documents up to the one it starts in
            # keep their places (read, or being read); the rest are drawn in the phase's order
            read = (
                self.reseed_offset
                if self.reseed_by_documents
                else int(np.searchsorted(cum, self.reseed_offset, "right"))
            )
            rest = _rng(self.reseed_seed, "source", self.name, "epoch", e, "rest").permutation(self.n_docs - read)
            perm = np.concatenate([perm[:read], perm[read:][rest]])
            np.cumsum(lengths[perm], out=cum[1:])
        out = _Epoch(perm, cum, fim, stable_seed(seed, "fim", self.name, e) & 0xFFFFFFFFFFFFFFFF)
        self._epochs[e] = out
        if len(self._epochs) > _EPOCH_CACHE:
            self._epochs.popitem(last=False)
        return out

    def _doc_tokens(self, ep: _Epoch, docs: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Token t of (transformed) document docs, elementwise; t within its transformed length."""
        base = self.offsets[docs]
        if ep.fim is None:
            return np.asarray(self.shard.tokens[base + t], dtype=np.int64)  # a copy: the tokens are uint16/32
        fim = ep.fim[docs]
        src = t.copy()
        special = np.full(t.shape, -1, dtype=np.int64)
        if fim.any():
            d, tf = docs[fim], t[fim]
            n = self.lengths[d] - 1  # body length (the document without its EOS)
            h = _splitmix64(ep.key, np.stack([d * 4, d * 4 + 1, d * 4 + 2]))
            c1 = (h[0] % (n + 1).astype(np.uint64)).astype(np.int64)
            c2 = (h[1] % (n + 1).astype(np.uint64)).astype(np.int64)
            a, b = np.minimum(c1, c2), np.maximum(c1, c2)  # prefix body[:a], middle body[a:b], suffix body[b:]
            spm = (h[2] >> np.uint64(11)).astype(np.float64) * 2.0**-53 < self.spm_rate
            ns = n - b  # suffix length
            psm_conds = [
                tf == 0,
                tf <= a,
                tf == a + 1,
                tf < a + 2 + ns,
                tf == a + 2 + ns,
                tf < n + 3,
            ]
            psm_src = [0, tf - 1, 0, b + tf - (a + 2), 0, a + tf - (a + 3 + ns)]
            psm_special = [self.fim_prefix, -1, self.fim_suffix, -1, self.fim_middle, -1]
            spm_conds = [tf == 0, tf == 1, tf < 2 + ns, tf == 2 + ns, tf < n + 3]
            spm_src = [0, 0, b + tf - 2, 0, tf - (3 + ns)]
            spm_special = [self.fim_prefix, self.fim_suffix, -1, self.fim_middle, -1]
            # the last position (t == n + 3) is the document's own EOS, at body index n
            f_src = np.where(spm, np.select(spm_conds, spm_src, n), np.select(psm_conds, psm_src, n))
            f_special = np.where(spm, np.select(spm_conds, spm_special, -1), np.select(psm_conds, psm_special, -1))
            src[fim], special[fim] = f_src, f_special
        out = self.shard.tokens[base + np.where(special >= 0, 0, src)].astype(np.int64)
        return np.where(special >= 0, special, out)

    def tokens_at(self, positions: np.ndarray) -> np.ndarray:
        """The stream's tokens at these absolute positions (any shape), int64."""
        positions = np.asarray(positions, dtype=np.int64)
        flat = positions.reshape(-1)
        epochs, offsets = np.divmod(flat, self.epoch_tokens)
        out = np.empty(flat.shape, dtype=np.int64)
        unique = np.unique(epochs).tolist()
        for e in unique:
            sel = epochs == e if len(unique) > 1 else slice(None)
            ep = self.epoch(e)
            off = offsets[sel]
            j = np.searchsorted(ep.cum, off, side="right") - 1
            out[sel] = self._doc_tokens(ep, ep.perm[j], off - ep.cum[j])
        return out.reshape(positions.shape)

    def documents(self, indices: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
        """Documents number `indices` of the stream (counting documents), truncated to `width` tokens.

        Returns (tokens [n, width] padded with EOS, real lengths [n])."""
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        tokens = np.full((len(indices), width), self.eos_id, dtype=np.int64)
        lengths = np.zeros(len(indices), dtype=np.int64)
        epochs, js = np.divmod(indices, self.n_docs)
        for e in np.unique(epochs).tolist():
            rows = np.flatnonzero(epochs == e)
            ep = self.epoch(e)
            docs = ep.perm[js[rows]]
            full = ep.cum[js[rows] + 1] - ep.cum[js[rows]]
            lengths[rows] = np.minimum(full, width)
            t = np.broadcast_to(np.arange(width), (len(rows), width))
            valid = t < lengths[rows][:, None]
            r_idx, c_idx = np.nonzero(valid)
            tokens[rows[r_idx], c_idx] = self._doc_tokens(ep, docs[r_idx], t[valid])
        return tokens, lengths


# ------------------------------------------------------------------------------------------------ batches


@dataclass
class Batch:
    input_ids: torch.Tensor  # [n, L] long
    targets: torch.Tensor  # [n, L] long, -100 ignored
    position_ids: torch.Tensor  # [n, L] long
    doc_ids: torch.Tensor  # [n, L] long
    source_index: torch.Tensor  # [n] long, into PhaseLoader.source_names
    stream_start: torch.Tensor  # [n] long: first stream position (document number with packing none)

    @property
    def scored_tokens(self) -> int:
        return int((self.targets != IGNORE_INDEX).sum())

    def __len__(self) -> int:
        return self.input_ids.shape[0]


_TOKEN_KEYS = {special.EOS: "eos", special.FIM_PREFIX: "fim_prefix", special.FIM_MIDDLE: "fim_middle"}
_TOKEN_KEYS[special.FIM_SUFFIX] = "fim_suffix"


def normalise_special_ids(ids: Mapping[str, int]) -> dict[str, int]:
    """Accept either short keys (eos, fim_prefix, fim_middle, fim_suffix) or the token names
    (runlib.tokenizer.special.special_ids: "<|endoftext|>", "<|fim_prefix|>", ...)."""
    out = {_TOKEN_KEYS.get(k, k): int(v) for k, v in ids.items()}
    if "eos" not in out:
        raise ValueError(f"special ids need the end-of-document id ('eos' or {special.EOS!r})")
    return out


class PhaseLoader:
    """Sequences of one training phase; every method is a pure function of (seed, phase, step)."""

    def __init__(self, config: LoaderConfig, token_dirs: Mapping[str, TokenDirs], special_ids: Mapping[str, int]):
        self.config, self.phase_index = config, config.phase_index
        self.seed = int(config.seed)
        # the batch shuffle's seed: the phase's own when it has one (phases[].seed)
        self.order_seed = self.seed if config.phase_seed is None else int(config.phase_seed)
        self.seq_len = int(config.seq_len)
        self.packing = config.packing
        self.boundary_targets = config.boundary_targets
        special_ids = normalise_special_ids(special_ids)
        self.eos_id = int(special_ids["eos"])
        segments = [Segment(s.start_step, s.steps, s.batch_sequences) for s in config.segments]
        self.mixture = Mixture(config.mixture, segments)
        self.mixture.check()
        self.source_names: list[str] = list(self.mixture.names)
        self.starts = [config.stream_starts.get(name, 0) for name in self.source_names]
        self.streams: list[SourceStream] = []
        for name in self.source_names:
            if name not in token_dirs:
                raise ValueError(f"phase {config.phase_index}: no tokenized shard for source {name!r}")
            fim = config.fim.get(name)
            fim_ids = None
            if fim is not None:
                missing = [k for k in ("fim_prefix", "fim_middle", "fim_suffix") if k not in special_ids]
                if missing:
                    raise ValueError(f"source {name!r} uses FIM, but the tokenizer lacks {', '.join(missing)}")
                fim_ids = (special_ids["fim_prefix"], special_ids["fim_middle"], special_ids["fim_suffix"])
            shard = open_split(token_dirs[name], "train")
            start = config.stream_starts.get(name, 0)
            reseed = None if config.phase_seed is None else (self.order_seed, start, self.packing == "none")
            rates = (fim.rate, fim.spm_rate) if fim else (0.0, 0.0)
            self.streams.append(SourceStream(name, shard, self.seed, self.eos_id, *rates, fim_ids, reseed))

    @property
    def global_batch(self) -> int:
        """Sequences per step at the phase's start (a batch ramp may change it later)."""
        return self.config.segments[0].batch_sequences

    @property
    def steps(self) -> int:
        return sum(s.steps or 0 for s in self.config.segments)

    # ---- the plan of a step: which (source, k) fills each row

    def batch_size(self, step: int) -> int:
        """Sequences in data step `step` (global_batch, unless a batch ramp changes it within the phase)."""
        return self.mixture.batch_size(step)

    def step_sequences(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        """(source index, k) of every row of global_batch_at(step), in row order: the row holds the k-th
        sequence of that source in this phase."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        cum, counts = self.mixture.cum(step), self.mixture.counts(step)
        src = np.repeat(np.arange(len(counts)), counts)
        k = np.concatenate([np.arange(c0, c0 + c) for c0, c in zip(cum, counts, strict=True)])
        order = _rng(self.order_seed, "batch", self.phase_index, step).permutation(len(src))
        return src[order], k[order]

    def window_start(self, source_index: int, k: np.ndarray | int) -> np.ndarray:
        """Stream position of the k-th sequence of a source in this phase (document number with packing none)."""
        unit = 1 if self.packing == "none" else self.seq_len
        return self.starts[source_index] + np.asarray(k, dtype=np.int64) * unit

    def source_tokens_consumed(self, phase_index: int | None = None) -> dict[str, int]:
        """Tokens of each source consumed by the phases before `phase_index` (documents with packing none);
        default: by this phase and all before it (where the next phase starts). Only this phase's start
        (phase_index == this phase) and end (None or this phase + 1) are known to its config."""
        if phase_index is None or phase_index == self.phase_index + 1:
            return dict(self.config.stream_ends)
        if phase_index == self.phase_index:
            return dict(self.config.stream_starts)
        raise ValueError(f"the loader of phase {self.phase_index} knows its own start and end, not phase {phase_index}")

    # ---- materialising

    def _materialise(self, src: np.ndarray, k: np.ndarray) -> Batch:
        n, length = len(src), self.seq_len
        tokens = np.empty((n, length + 1), dtype=np.int64)
        lengths = None
        starts = np.empty(n, dtype=np.int64)
        if self.packing == "none":
            lengths = np.empty(n, dtype=np.int64)
        for si in np.unique(src).tolist():
            rows = np.flatnonzero(src == si)
            first = self.window_start(si, k[rows])
            starts[rows] = first
            stream = self.streams[si]
            if self.packing == "none":
                tokens[rows], lengths[rows] = stream.documents(first, length + 1)  # type: ignore[index]
            else:
                tokens[rows] = stream.tokens_at(first[:, None] + np.arange(length + 1))
        inputs, targets, positions, doc_ids = pack_windows(
            tokens, lengths, self.eos_id, self.packing, self.boundary_targets
        )
        return Batch(
            input_ids=torch.from_numpy(inputs),
            targets=torch.from_numpy(targets),
            position_ids=torch.from_numpy(positions),
            doc_ids=torch.from_numpy(doc_ids),
            source_index=torch.from_numpy(src.astype(np.int64)),
            stream_start=torch.from_numpy(starts),
        )

    def global_batch_at(self, step: int) -> Batch:
        """All sequences of data step `step` (0-based within the phase), in their shuffled order."""
        return self._materialise(*self.step_sequences(step))

    def micro_batch(self, step: int, micro_index: int, rank: int, world: int, micro_size: int) -> Batch:
        """Rows [(micro_index * world + rank) * micro_size, + micro_size) of global_batch_at(step)."""
        batch = self.batch_size(step)
        if micro_size < 1 or world < 1 or batch % (micro_size * world):
            raise ValueError(
                f"a global batch of {batch} sequences does not split into micro-batches of {micro_size} "
                f"on {world} processes"
            )
        if not 0 <= rank < world or not 0 <= micro_index < batch // (micro_size * world):
            raise ValueError(
                f"micro-batch {micro_index} of rank {rank}: out of range ({batch // (micro_size * world)} "
                f"micro-batches, {world} processes)"
            )
        src, k = self.step_sequences(step)
        lo = (micro_index * world + rank) * micro_size
        return self._materialise(src[lo : lo + micro_size], k[lo : lo + micro_size])
