"""Train the run's tokenizer: byte-level BPE on a weighted sample of the curated sources.

    train_tokenizer(config, {source: [curated shard dirs]}, out_dir) -> summary; writes out_dir/tokenizer.json

`config` is a runlib.tokenizer.config.TokenizerConfig (the spec's tokenizer section, built by
runlib.graph.configs); the field names below are its fields.

Layout of a trained tokenizer (runlib.tokenizer.special): ids 0..R-1 are the R reserved special
tokens (id 0 = `<|endoftext|>`, the end-of-document token), then the 256 byte symbols and the learned
merges up to `tokenizer.vocab_size + reserved_tokens` ids, then the domain tokens. The file is
byte-for-byte the same for the same spec and corpus, whatever the thread count.

Sampling: `train_bytes` (UTF-8 bytes of text) are split between the `train_on` sources in
proportion to their weights; each source contributes the documents of its curated shards' train.jsonl in
shard and file order, cut at its share, starting over from the first document when they hold less than its share.
Without `train_bytes`: 1 GB, or less when the sources are smaller, so that no document repeats.

Pre-tokenization: digits first (single: every digit alone; triplets: runs of digits cut left to right
into groups of up to three; none: left to the byte-level regex), then GPT-2's byte-level regex.

Domain tokens are added whole (matched in the raw text before pre-tokenization, anywhere, like any
HF added token; not special). Drop tokens: every learned token whose text contains a drop string
loses the merge that makes it, so the tokenizer never produces it (its id stays, unused, so that ids
do not shift); the string itself still encodes, in smaller pieces.

Special-token strings written inside a document are text, not control tokens: always open a
tokenizer with `load_tokenizer`, which sets `encode_special_tokens = True` (the flag is not saved in
tokenizer.json).

Known limitation of HF tokenizers (<= 0.23, issues #1392, #1915): `Tokenizer.decode` garbles an
added token made only of byte-symbol characters that are not ASCII (e.g. a domain token "café");
encoding is right, and `decode` here decodes such ids correctly.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runlib.errors import UserError
from runlib.tokenizer.config import TokenizerConfig
from runlib.tokenizer.special import EOS, EOS_ID, special_ids, special_tokens
from runlib.util.atomic import write_bytes_atomic, write_text_atomic
from runlib.util.hashing import bytes_digest

if TYPE_CHECKING:  # tokenizers is imported where it is used: `runlib audit` never loads it
    from tokenizers import Tokenizer, trainers

TOKENIZER_FILE = "tokenizer.json"
DEFAULT_TRAIN_BYTES = 10**9
TRAIN_BATCH_DOCS = 512
ENCODE_BATCH_BYTES = 4 << 20
TRIPLET_PATTERN = r"\p{N}{1,3}"
EOS_CANDIDATES = (EOS, "<|end_of_text|>", "</s>", "<|eos|>", "<eos>", "<|end|>")
"""Names searched, in order, for the end-of-document token of a pretrained tokenizer."""


# ----------------------------------------------------------------------------------------- reading


def iter_texts(path: Path) -> Iterator[str]:
    """The `text` of each document of a curated JSONL file, in file order."""
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)["text"]
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{lineno}: not a curated document ({{'text': ...}}): {exc}") from exc


def iter_split(paths: Iterable[Path]) -> Iterator[str]:
    """The `text` of each document of these curated JSONL files, one after the other."""
    for path in paths:
        yield from iter_texts(path)


Curated = dict[str, Path | list[Path]]
"""Source name -> its curated shard directories in order (or one directory): each with train.jsonl, heldout.jsonl."""


def _shard_dirs(curated: Curated, name: str) -> list[Path]:
    dirs = curated[name]
    return [Path(d) for d in dirs] if isinstance(dirs, list) else [Path(dirs)]


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _cut(text: str, max_bytes: int) -> str:
    """The longest prefix of text within max_bytes UTF-8 bytes (never half a character)."""
    return text.encode("utf-8", "surrogatepass")[:max_bytes].decode("utf-8", "ignore")


def _shares(total: int, weights: dict[str, float]) -> dict[str, int]:
    """Split total bytes in proportion to weights (largest remainder, so the shares sum to total)."""
    norm = sum(weights.values())
    exact = {name: total * w / norm for name, w in weights.items()}
    shares = {name: math.floor(x) for name, x in exact.items()}
    rest = total - sum(shares.values())
    for name in sorted(exact, key=lambda n: (shares[n] - exact[n], n))[:rest]:
        shares[name] += 1
    return shares


def _default_total(weights: dict[str, float], files: dict[str, list[Path]]) -> int:
    """DEFAULT_TRAIN_BYTES, or the largest total whose shares fit every source without repeating."""
    norm = sum(weights.values())
    total = DEFAULT_TRAIN_BYTES
    for name, w in weights.items():
        cap = math.ceil(DEFAULT_TRAIN_BYTES * w / norm)
        have = 0
        for text in iter_split(files[name]):
            have += _utf8_len(text)
            if have >= cap:
                break
        if have == 0:
            raise UserError(
                f"tokenizer.train_on: source {name!r} holds no text after curation; remove it or give it documents"
            )
        total = min(total, math.floor(have * norm / w))
    return total


def _sample(paths: list[Path], share: int, used: dict[str, int], name: str) -> Iterator[list[str]]:
    """Batches of documents of one source, in file order, cycling, the last one cut to end at `share` bytes."""
    batch: list[str] = []
    while used[name] < share:
        before, last = used[name], False
        for text in iter_split(paths):
            size = _utf8_len(text)
            last = used[name] + size >= share
            if used[name] + size > share:
                text = _cut(text, share - used[name])
                size = _utf8_len(text)
            if text:
                batch.append(text)
                used[name] += size
            if last:
                break
            if len(batch) >= TRAIN_BATCH_DOCS:
                yield batch
                batch = []
        if last or used[name] == before:  # the share is reached, or the source holds no text
            break
    if batch:
        yield batch


# ----------------------------------------------------------------------------------------- building


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (the ByteLevel alphabet)."""
    keep = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_TO_CHAR = _bytes_to_unicode()


def byte_level(text: str) -> str:
    """How a string is spelled in a byte-level BPE vocabulary (' ab' -> 'Ġab')."""
    return "".join(BYTE_TO_CHAR[b] for b in text.encode("utf-8"))


def _new_tokenizer(
    digits: str, reserved: int, vocab_total: int, min_frequency: int
) -> tuple[Tokenizer, trainers.BpeTrainer]:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    steps: list[pre_tokenizers.PreTokenizer] = []
    if digits == "single":
        steps.append(pre_tokenizers.Digits(individual_digits=True))
    elif digits == "triplets":
        steps.append(pre_tokenizers.Split(Regex(TRIPLET_PATTERN), behavior="isolated"))
    steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence(steps)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_total,
        min_frequency=min_frequency,
        special_tokens=special_tokens(reserved),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    return tok, trainer


def _is_byte_level(data: dict[str, Any]) -> bool:
    decoder = data.get("decoder") or {}
    parts = decoder.get("decoders", []) if decoder.get("type") == "Sequence" else [decoder]
    return any(p.get("type") == "ByteLevel" for p in parts)


def _drop(tok: Tokenizer, drop: Sequence[str], protected: set[str]) -> tuple[Tokenizer, dict[str, Any]]:
    """Remove every merge that yields a token containing a drop string, and the merges this leaves dead.

    The ids stay (unused), so that no other id moves. Returns the new tokenizer and
    {"dropped_ids": tokens containing a drop string, "unreachable_ids": those plus the tokens only they built}.
    """
    from tokenizers import Tokenizer

    data = json.loads(tok.to_str())
    model = data["model"]
    if model.get("type") != "BPE" or not _is_byte_level(data):
        raise UserError("tokenizer.drop_tokens: only a byte-level BPE tokenizer can drop tokens; remove drop_tokens")
    vocab: dict[str, int] = model["vocab"]
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    produced = {a + b for a, b in merges}
    base = set(vocab) - produced  # byte symbols and special tokens: never the result of a merge
    patterns = []
    for text in drop:
        if not text:
            raise UserError("tokenizer.drop_tokens: an empty string cannot be dropped; remove it")
        spelled = byte_level(text)
        if len(spelled) == 1:
            raise UserError(
                f"tokenizer.drop_tokens: {text!r} is a single byte, which a byte-level tokenizer needs "
                "to encode every text; drop longer strings"
            )
        patterns.append(spelled)
    dropped = {t for t in produced if t not in protected and any(p in t for p in patterns)}
    reachable = set(base)
    kept = []
    for a, b in merges:
        merged = a + b
        if merged in dropped or a not in reachable or b not in reachable:
            continue
        reachable.add(merged)
        kept.append([a, b])
    model["merges"] = kept
    info: dict[str, Any] = {
        "dropped_ids": sorted(vocab[t] for t in dropped if t in vocab),
        "unreachable_ids": sorted(i for t, i in vocab.items() if t not in reachable),
        "notes": [],
    }
    if model.get("ignore_merges"):  # it would emit a word found whole in the vocabulary, merges or not
        model["ignore_merges"] = False
        info["notes"].append(
            "drop_tokens turned off the tokenizer's ignore_merges, which changes how some words encode"
        )
    return Tokenizer.from_str(json.dumps(data, ensure_ascii=False)), info


def _add_domain(tok: Tokenizer, domain: Sequence[str], drop: Sequence[str], specials: set[str]) -> dict[str, int]:
    from tokenizers import AddedToken

    for text in domain:
        if not text:
            raise UserError("tokenizer.domain_tokens: an empty string is not a token; remove it")
        if text in specials:
            raise UserError(f"tokenizer.domain_tokens: {text!r} is a special token already; remove it")
        clash = [d for d in drop if d and d in text]
        if clash:
            raise UserError(
                f"tokenizer.domain_tokens: {text!r} contains the drop token {clash[0]!r}; "
                "remove it from domain_tokens or from drop_tokens"
            )
    unique = list(dict.fromkeys(domain))
    tok.add_tokens([AddedToken(t, single_word=False, normalized=False, special=False) for t in unique])
    ids = {t: tok.token_to_id(t) for t in unique}
    return {t: i for t, i in ids.items() if i is not None}  # each was just added: none is missing


# ----------------------------------------------------------------------------------------- public


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Open a tokenizer.json for encoding documents: special-token strings in text stay text."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    tok.encode_special_tokens = True
    return tok


def eos_id(tok: Tokenizer) -> int:
    """The end-of-document id: `<|endoftext|>` (id 0 in a trained tokenizer), else a common EOS name."""
    for name in EOS_CANDIDATES:
        i = tok.token_to_id(name)
        if i is not None:
            return i
    raise UserError(
        "tokenizer.pretrained: the tokenizer has no end-of-document token (looked for "
        + ", ".join(EOS_CANDIDATES)
        + "); add one as a special token"
    )


def decode(tok: Tokenizer, ids: Iterable[int]) -> str:
    """tok.decode(ids), except that added tokens are written as they are (works around HF issue #1392)."""
    added = {i: t.content for i, t in tok.get_added_tokens_decoder().items() if not t.special}
    parts: list[str] = []
    run: list[int] = []
    for i in ids:
        if i in added:
            if run:
                parts.append(tok.decode(run, skip_special_tokens=False))
                run = []
            parts.append(added[i])
        else:
            run.append(i)
    if run:
        parts.append(tok.decode(run, skip_special_tokens=False))
    return "".join(parts)


def compression(tok: Tokenizer, texts: Iterable[str]) -> dict[str, Any]:
    """chars/token and bytes/token of texts (document tokens only, no EOS)."""
    docs = chars = nbytes = tokens = 0
    batch: list[str] = []
    size = 0

    def flush() -> None:
        nonlocal tokens
        if batch:
            tokens += sum(len(e.ids) for e in tok.encode_batch_fast(batch, add_special_tokens=False))
            batch.clear()

    for text in texts:
        docs += 1
        chars += len(text)
        n = _utf8_len(text)
        nbytes += n
        batch.append(text)
        size += n
        if size >= ENCODE_BATCH_BYTES:
            flush()
            size = 0
    flush()
    return {
        "chars_per_token": chars / tokens if tokens else None,
        "bytes_per_token": nbytes / tokens if tokens else None,
        "docs": docs,
        "tokens": tokens,
        "chars": chars,
        "bytes": nbytes,
    }


def _heldout_compression(tok: Tokenizer, names: Iterable[str], curated: Curated) -> dict[str, Any]:
    out = {}
    for name in names:
        paths = [d / "heldout.jsonl" for d in _shard_dirs(curated, name)]
        if all(path.exists() for path in paths):
            out[name] = compression(tok, iter_split(paths))
    return out


def _check_inputs(cfg: TokenizerConfig, curated: Curated) -> dict[str, float]:
    weights = {n: float(w) for n, w in cfg.train_on.items() if w > 0}
    if not weights:
        raise UserError(
            "tokenizer.train_on: no source with a positive weight; name the sources to train the tokenizer on"
        )
    missing = [n for n in weights if n not in curated]
    if missing:
        raise UserError(
            f"tokenizer.train_on: no curated data for {', '.join(sorted(missing))}; use sources of data.sources"
        )
    for name in weights:
        for directory in _shard_dirs(curated, name):
            if not (directory / "train.jsonl").exists():
                raise FileNotFoundError(f"curated source {name!r}: {directory / 'train.jsonl'} is missing")
    return weights


def _pretrained(cfg: TokenizerConfig, pretrained: str, curated: Curated, out_dir: Path) -> dict[str, Any]:
    """Copy the tokenizer.json at `pretrained` (cfg.pretrained) into out_dir, with cfg's drop and domain tokens."""
    from tokenizers import Tokenizer

    src = Path(pretrained).expanduser()
    if not src.is_file():
        raise UserError(f"tokenizer.pretrained: {pretrained!r} does not exist (relative paths start at {Path.cwd()})")
    # read once: the bytes used are the bytes compared with the digest the stage's key holds
    data = src.read_bytes()
    keyed = cfg.pretrained_file
    if keyed is not None and bytes_digest(data) != keyed.digest:
        raise UserError(
            f"tokenizer.pretrained: {pretrained!r} changed since this stage's key was computed (keyed as "
            f"{keyed.bytes} bytes, {keyed.digest}; now {len(data)} bytes, {bytes_digest(data)}); rerun snakemake, "
            "which keys the tokenizer by the new content"
        )
    try:
        tok = Tokenizer.from_str(data.decode("utf-8"))
    except Exception as exc:  # tokenizers raises a plain Exception on a malformed file
        raise UserError(f"tokenizer.pretrained: {pretrained!r} is not a tokenizers tokenizer.json: {exc}") from exc
    eos = eos_id(tok)
    specials = {t.content: i for i, t in tok.get_added_tokens_decoder().items() if t.special}
    info: dict[str, Any] = {"dropped_ids": [], "unreachable_ids": [], "notes": []}
    domain_ids: dict[str, int] = {}
    target = out_dir / TOKENIZER_FILE
    if cfg.drop_tokens or cfg.domain_tokens:
        if cfg.drop_tokens:
            tok, info = _drop(tok, cfg.drop_tokens, set(specials))
        domain_ids = _add_domain(tok, cfg.domain_tokens, cfg.drop_tokens, set(specials))
        write_text_atomic(target, tok.to_str(pretty=True))
    else:
        write_bytes_atomic(target, data)
    tok = load_tokenizer(target)
    names = [n for n, w in cfg.train_on.items() if w > 0 and n in curated]
    return {
        "counts": {
            "vocab_size": tok.get_vocab_size(with_added_tokens=True),
            "train_bytes": 0,
            "domain_tokens": len(domain_ids),
            "dropped_tokens": len(info["dropped_ids"]),
            "unreachable_tokens": len(info["unreachable_ids"]),
        },
        "pretrained": str(src),
        "special_ids": dict(sorted(specials.items(), key=lambda kv: kv[1])),
        "eos_id": eos,
        "domain_ids": domain_ids,
        "dropped_ids": info["dropped_ids"],
        "train_bytes_per_source": {},
        "compression": _heldout_compression(tok, names, curated),
        "notes": info["notes"],
    }


def train_tokenizer(config: TokenizerConfig, curated: Curated, out_dir: Path) -> dict[str, Any]:
    """Train (or copy, with config.pretrained) the tokenizer into out_dir/tokenizer.json; return its summary.

    `curated`: source name -> its curated shard directories in order (filter_shard outputs), or one."""
    cfg = config
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if cfg.pretrained:
        return _pretrained(cfg, cfg.pretrained, curated, out_dir)
    if cfg.vocab_size is None:
        raise UserError("tokenizer.vocab_size: required to train a tokenizer (or give tokenizer.pretrained)")
    if cfg.vocab_size < 256:
        raise UserError(
            f"tokenizer.vocab_size: {cfg.vocab_size} is below the 256 byte symbols of a byte-level BPE; use at least 256"
        )
    reserved = cfg.reserved_tokens
    if reserved < 1:
        raise UserError("tokenizer.reserved_tokens: must be at least 1, the end-of-document token is one of them")
    weights = _check_inputs(cfg, curated)
    files = {n: [d / "train.jsonl" for d in _shard_dirs(curated, n)] for n in weights}

    total = cfg.train_bytes if cfg.train_bytes is not None else _default_total(weights, files)
    shares = _shares(int(total), weights)
    used = dict.fromkeys(weights, 0)

    def batches() -> Iterator[list[str]]:
        for name in sorted(weights):
            yield from _sample(files[name], shares[name], used, name)

    tok, trainer = _new_tokenizer(cfg.digits, reserved, cfg.vocab_size + reserved, cfg.min_frequency)
    tok.train_from_iterator(batches(), trainer)
    if sum(used.values()) == 0:
        raise UserError(
            f"tokenizer.train_on: the curated sources {', '.join(sorted(weights))} hold no text to train on"
        )
    learned = tok.get_vocab_size(with_added_tokens=True) - reserved
    notes = []
    if learned < cfg.vocab_size:
        notes.append(
            f"learned {learned} tokens of the {cfg.vocab_size} asked: the sample ({sum(used.values())} bytes) has no more "
            f"pairs seen {cfg.min_frequency}+ times; raise tokenizer.train_bytes or lower min_frequency"
        )
    for name in sorted(weights):
        if used[name] == 0:
            notes.append(f"source {name!r} holds no text: it contributed nothing to its share of {shares[name]} bytes")

    specials = set(special_tokens(reserved))
    info: dict[str, Any] = {"dropped_ids": [], "unreachable_ids": [], "notes": []}
    if cfg.drop_tokens:
        tok, info = _drop(tok, cfg.drop_tokens, specials)
        notes += info["notes"]
    domain_ids = _add_domain(tok, cfg.domain_tokens, cfg.drop_tokens, specials)
    odd = [t for t in domain_ids if not t.isascii() and all(c in BYTE_TO_CHAR.values() for c in t)]
    if odd:
        notes.append(
            f"domain tokens {odd} decode wrongly with tokenizers' own Tokenizer.decode (HF issue #1392); "
            "runlib.tokenizer.train.decode decodes them right"
        )

    target = out_dir / TOKENIZER_FILE
    write_text_atomic(target, tok.to_str(pretty=True))
    tok = load_tokenizer(target)
    return {
        "counts": {
            "vocab_size": tok.get_vocab_size(with_added_tokens=True),
            "learned": learned,
            "reserved": reserved,
            "domain_tokens": len({i for i in domain_ids.values() if i >= reserved + learned}),
            "dropped_tokens": len(info["dropped_ids"]),
            "unreachable_tokens": len(info["unreachable_ids"]),
            "train_bytes": sum(used.values()),
        },
        "special_ids": special_ids(reserved),
        "eos_id": EOS_ID,
        "domain_ids": domain_ids,
        "dropped_ids": info["dropped_ids"],
        "train_bytes_per_source": {n: used[n] for n in sorted(used)},
        "compression": _heldout_compression(tok, sorted(weights), curated),
        "notes": notes,
    }
