"""A document quality classifier: fastText trained on curated anchors (positives) against raw web text (negatives).

As DCLM's "OH-2.5 + ELI5" filter (Li et al. 2024, "DataComp-LM", arXiv 2406.11794, section 4.3 and its
appendix on model-based filtering): a bag of word unigrams and bigrams, a softmax over two labels, the score of
a document the probability of the high-quality label, and documents kept above a percentile threshold (DCLM
keeps its top 10%; the threshold is the caller's, this module only scores).

Sources (github mlfoundations/dclm; fastText is github facebookresearch/fastText at tag v0.9.2, commit
5b5943c118b0ec5fb9cd8d20587de2b2d3966dfe, the source of fasttext-wheel 0.9.2, whose FastText.py is that tag's):
  * labels `__label__hq` (positive) and `__label__cc` (negative): dclm baselines/README.md ("Training your
    own fasttext classifiers", commit bffc3a2e4106902aab178ac71579a90ed15be6fc) and the model card of
    huggingface mlfoundations/fasttext-oh-eli5 ("We use the score given to __label__hq"). The same names let
    load_classifier and score_texts take DCLM's released model as well as one trained here;
  * hyperparameters: dclm baselines/train_fasttext_classifier.py (commit b1377f83e0f014574fc752e7b31bd484c9e95dff)
    wraps fasttext.train_supervised with lr 0.1, dim 100, ws 5, epoch 5, minCount 1, and the README says the
    OH-2.5 + ELI5 classifier changed only wordNgrams to 2. bucket is fastText's default 2,000,000 hashed bigram
    rows (FastText.py unsupervised_default): with dim 100 the input matrix alone is 800 MB, so a caller with a
    few thousand anchors will want a smaller bucket (and dim). These settings suit a training set of hundreds of
    thousands of documents (DCLM's model file is named ..._bigram_200k_train.bin); on a few hundred, lr 0.1 for
    5 epochs leaves every score near 0.5 (still ranked right: held-out accuracy 1.0 in the tests' corpus, new
    texts at 0.52 against 0.47), and lr 0.5 for 10 epochs spreads them (0.998 against 0.004);
  * preprocessing: dclm baselines/mappers/enrichers/quality_prediction_enrichers_calc_fasttext.py
    (classify_fasttext_hq_prob, commit a2832004f1a8f619152509225f9e11abdf9126a0) strips the page and joins its
    lines with spaces; no lowercasing, no other tokenization (fastText splits on ASCII whitespace: src/dictionary.cc
    Dictionary::readWord). DCLM publishes no script for its training file; the same preprocessing is applied
    to training text here, since a training line, like a predicted one, must hold no newline. Deviation:
    a word that begins with "__label__" is rewritten to begin with "_label__", because fastText reads any such
    token as a label wherever it stands on a line (Dictionary::getType), and a web page containing
    "__label__hq" would otherwise label itself;
  * the score: fastText's predict reports exp(log(p + 1e-5)) (src/loss.cc std_log), so the two labels'
    "probabilities" sum to 1 + 2e-5 and a certain one reads 1.00001 (facebookresearch/fastText issues #748, #925).
    score_texts subtracts the 1e-5 again and clamps to [0, 1]: the softmax probability of `__label__hq`, to
    float32 precision. (DCLM takes p(hq) when hq is the top label and 1 - p(cc) otherwise: the same within 2e-5.)

fasttext-wheel 0.9.2 under numpy 2 (found here with numpy 2.4):
  * `model.predict(str)` raises ValueError ("Unable to avoid copy while creating an array as requested"):
    FastText.py returns np.array(probs, copy=False), and numpy 2 turned copy=False into "never copy"
    (messense/fasttext-wheel issue #10; NumPy 2.0 migration guide, "Adapting to changes in the copy keyword");
  * `model.predict(list)` does not raise but is WRONG with k > 1: its multilinePredict (python/fasttext_module/
    fasttext/pybind/fasttext_pybind.cc) builds each row's probabilities as a py::array_t, and under numpy 2
    every entry of the row comes back equal to the first (k=-1 gave [0.997, 0.997] for hq and cc; with
    numpy 1.26.4 the same call gave [0.997, 0.003]);
  * so the scores come from the binding's single-line `model.f.predict(line + "\\n", k, threshold,
    on_unicode_error)`, which returns plain (probability, label) tuples and never touches numpy; the "\\n" is
    what FastText.predict appends, so the end-of-sentence token is counted as in training.

Determinism: fastText reads its training file in order, without shuffling (src/fasttext.cc trainThread), and
its thread-th reader starts at byte thread/threads of the file; with thread=1 and a fixed seed the model file
is byte-identical run to run (checked here: the same SHA-256 across processes and training-file paths). The
held-out split and the line order are functions of (seed, text) through BLAKE2b, not of the input order, so the
same multiset of documents gives the same model whatever order it comes in. Training uses one core (DCLM's
script left fastText's default of cpu_count() - 1 Hogwild threads, which is not reproducible).

Loading: fastText 0.9.2 trusts the file. A truncated dictionary makes Dictionary::load read EOF as the
character 0xff without end (memory grows until std::bad_alloc or the OOM killer), a truncated matrix loads with
zeros and no error, and sizes read from garbage are allocated as they are (DenseMatrix::load). So
load_classifier first walks the whole file format (src/fasttext.cc saveModel, src/args.cc Args::save,
src/dictionary.cc Dictionary::save, src/densematrix.cc, src/quantmatrix.cc, src/productquantizer.cc) and checks
every size against the file's, before fastText opens it.
"""

from __future__ import annotations

import functools
import hashlib
import math
import mmap
import os
import re
import struct
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import fasttext

from runlib.util.atomic import atomic_file

POSITIVE_LABEL = "__label__hq"
NEGATIVE_LABEL = "__label__cc"
THRESHOLD = 0.5
"""The held-out metrics count a document as predicted positive when its score is >= THRESHOLD."""

# DCLM's OH-2.5 + ELI5 settings (baselines/train_fasttext_classifier.py defaults, wordNgrams 2 per its README)
LR = 0.1
DIM = 100
EPOCH = 5
WORD_NGRAMS = 2
BUCKET = 2_000_000  # fastText's default; rows of the hashed n-gram table: bucket x dim x 4 bytes on disk

FASTTEXT_MAGIC = 793712314  # src/fasttext.cc FASTTEXT_FILEFORMAT_MAGIC_INT32
FASTTEXT_VERSION = 12  # src/fasttext.cc FASTTEXT_VERSION: the newest format fasttext 0.9.2 reads
_SUPERVISED = 3  # src/args.h model_name::sup
_KSUB = 256  # src/productquantizer.h ksub_ = 1 << nbits_ (8): centroids per sub-quantizer
_PROB_OFFSET = 1e-5  # src/loss.cc std_log(x) = log(x + 1e-5)
_DICT_CHUNK = 4096  # dictionary entries per regular-expression match

_LABEL_PREFIX_RE = re.compile(r"(?<![^\s\x00])__label__")  # "__label__" starting a word (NUL splits words too)

FastTextModel = Any
"""fasttext.FastText._FastText: fasttext ships no type information."""


def _prepare(text: str) -> str:
    """One line of fastText input: DCLM's " ".join(text.strip().splitlines()), "__label__" words defused, and
    lone surrogates (which pybind11 cannot encode as UTF-8) replaced. Idempotent."""
    line = " ".join(text.strip().splitlines())
    if "__label__" in line:
        line = _LABEL_PREFIX_RE.sub("_label__", line)
    if not line.isascii():
        try:
            line.encode("utf-8")
        except UnicodeEncodeError:
            line = line.encode("utf-8", "replace").decode("utf-8")
    return line


def _digest(seed: int, purpose: bytes, text: str) -> bytes:
    """A 64-bit BLAKE2b of the text keyed by the seed: the split and the line order depend on (seed, text)."""
    key = seed.to_bytes(8, "little", signed=True)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8, key=key, person=purpose).digest()


def _as_documents(docs: Sequence[str], role: str) -> list[str]:
    if isinstance(docs, str):
        raise TypeError(
            f"{role}: give a sequence of documents, not one string (it would be one document per character)"
        )
    prepared = [_prepare(doc) for doc in docs]
    if not prepared:
        raise ValueError(f"{role}: no documents; a classifier needs both positives and negatives")
    return prepared


def _split(docs: list[str], fraction: float, seed: int, role: str) -> tuple[list[str], list[str]]:
    """(train, held-out): the floor(n * fraction) distinct texts of smallest digest are held out, with all their
    copies, so that a duplicate never sits on both sides."""
    digests = {text: _digest(seed, b"runlib-split", text) for text in docs}
    distinct = sorted(digests, key=lambda text: (digests[text], text))
    n_out = math.floor(len(distinct) * fraction)
    if n_out < 1 or n_out >= len(distinct):
        need = max(2, math.ceil(1 / fraction))
        raise ValueError(
            f"{role}: {len(distinct)} distinct document(s) hold out {n_out} at heldout_fraction {fraction}; "
            f"give at least {need} distinct documents (or a larger heldout_fraction) so that some are held out "
            "and some are trained on"
        )
    held = set(distinct[:n_out])
    return [d for d in docs if d not in held], [d for d in docs if d in held]


def _check_train_args(
    seed: int, heldout_fraction: float, epoch: int, word_ngrams: int, dim: int, lr: float, bucket: int
) -> None:
    if not 0 <= seed < 2**31:
        raise ValueError(f"seed {seed}: fastText takes a seed in [0, 2^31)")
    if not 0.0 < heldout_fraction < 1.0:
        raise ValueError(f"heldout_fraction {heldout_fraction}: give a fraction strictly between 0 and 1")
    for name, value in (("epoch", epoch), ("word_ngrams", word_ngrams), ("dim", dim)):
        if value < 1:
            raise ValueError(f"{name} {value}: give a positive integer")
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr {lr}: give a positive learning rate")
    # fastText hashes each n-gram modulo bucket (src/dictionary.cc addWordNgrams): 0 would divide by zero
    if word_ngrams > 1 and bucket < 1:
        raise ValueError(f"bucket {bucket}: word_ngrams {word_ngrams} > 1 needs at least one hash bucket")
    if bucket < 0:
        raise ValueError(f"bucket {bucket}: give a non-negative number of hash buckets")


def _write_training_file(path: Path, positives: list[str], negatives: list[str], seed: int) -> None:
    """fastText's supervised format, one labelled document a line. fastText does not shuffle (trainThread reads
    the file in order, and the learning rate decays linearly over it), so the lines are ordered by a keyed
    digest: the classes interleave, and the order does not depend on the caller's."""
    lines = [f"{POSITIVE_LABEL} {doc}\n" for doc in positives] + [f"{NEGATIVE_LABEL} {doc}\n" for doc in negatives]
    lines.sort(key=lambda line: (_digest(seed, b"runlib-order", line), line))
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(lines)


def _metrics(positive_scores: list[float], negative_scores: list[float]) -> dict[str, float]:
    tp = sum(score >= THRESHOLD for score in positive_scores)
    fp = sum(score >= THRESHOLD for score in negative_scores)
    fn = len(positive_scores) - tp
    tn = len(negative_scores) - fp
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    accuracy = (tp + tn) / (tp + tn + fp + fn)
    return {"precision": precision, "recall": recall, "f1": f1, "accuracy": accuracy}


def train_classifier(
    positives: Sequence[str],
    negatives: Sequence[str],
    out_path: Path,
    *,
    seed: int,
    heldout_fraction: float = 0.1,
    epoch: int = EPOCH,
    word_ngrams: int = WORD_NGRAMS,
    dim: int = DIM,
    lr: float = LR,
    bucket: int = BUCKET,
) -> dict[str, float | int]:
    """Train the classifier on positives (curated anchors) against negatives (raw web text), write it to
    out_path atomically, and return its metrics on the held-out documents at THRESHOLD: precision, recall, f1,
    accuracy, and the counts train_positives, train_negatives, heldout_positives, heldout_negatives.

    The same documents (in any order), seed and settings give a byte-identical model file. Training runs on one
    thread: that is what makes it deterministic (fastText splits its file among threads that race).
    """
    _check_train_args(seed, heldout_fraction, epoch, word_ngrams, dim, lr, bucket)
    pos_train, pos_held = _split(_as_documents(positives, "positives"), heldout_fraction, seed, "positives")
    neg_train, neg_held = _split(_as_documents(negatives, "negatives"), heldout_fraction, seed, "negatives")
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    # beside the model: the training file is about as large as the text, and /tmp may be a small tmpfs
    fd, name = tempfile.mkstemp(prefix=f".{out_path.name}.", suffix=".train.txt", dir=out_path.parent)
    os.close(fd)
    train_file = Path(name)
    try:
        _write_training_file(train_file, pos_train, neg_train, seed)
        model = fasttext.train_supervised(
            input=str(train_file),
            lr=lr,
            dim=dim,
            epoch=epoch,
            wordNgrams=word_ngrams,
            bucket=bucket,
            minCount=1,
            minn=0,
            maxn=0,
            loss="softmax",
            thread=1,
            seed=seed,
            verbose=0,
        )
    finally:
        train_file.unlink(missing_ok=True)
    with atomic_file(out_path) as tmp:
        model.save_model(str(tmp))
        # fastText never checks its writes (FastText::saveModel): on a full disk it leaves a short file, which
        # is checked here before it replaces out_path
        try:
            _check_model_file(tmp)
        except ValueError as exc:
            raise OSError(f"{out_path}: the model was not written whole (is the disk full?): {exc}") from exc
    result: dict[str, float | int] = dict(_metrics(_score_lines(model, pos_held), _score_lines(model, neg_held)))
    result.update(
        train_positives=len(pos_train),
        train_negatives=len(neg_train),
        heldout_positives=len(pos_held),
        heldout_negatives=len(neg_held),
    )
    return result


class _Reader:
    """Bounds-checked reads over a model file: every size is checked against the file before it is trusted."""

    def __init__(self, data: mmap.mmap, path: Path) -> None:
        self.data = data
        self.path = path
        self.pos = 0

    def fail(self, problem: str) -> ValueError:
        return ValueError(f"{self.path}: not a usable fastText model: {problem}")

    def skip(self, n: int, what: str) -> int:
        if n < 0 or self.pos + n > len(self.data):
            raise self.fail(
                f"truncated or corrupt: {what} needs {n} bytes at offset {self.pos}, "
                f"the file has {len(self.data)} bytes"
            )
        start = self.pos
        self.pos += n
        return start

    def unpack(self, fmt: str, what: str) -> tuple[Any, ...]:
        start = self.skip(struct.calcsize(fmt), what)
        return struct.unpack_from(fmt, self.data, start)

    def flag(self, what: str) -> bool:
        (value,) = self.unpack("<B", what)
        if value not in (0, 1):
            raise self.fail(f"{what} is {value}, not a bool (0 or 1)")
        return bool(value)


def _skip_dense(r: _Reader, what: str, rows: int, cols: int) -> None:
    m, n = r.unpack("<qq", f"{what} shape")
    if (m, n) != (rows, cols):
        raise r.fail(f"{what} is {m} x {n}, the header implies {rows} x {cols}")
    r.skip(m * n * 4, f"{what} ({m} x {n} float32)")


def _skip_quantizer(r: _Reader, what: str, dim: int) -> int:
    pq_dim, nsubq, dsub, lastdsub = r.unpack("<iiii", f"{what} header")
    if pq_dim != dim or nsubq < 1 or dsub < 1 or not 0 < lastdsub <= dsub:
        raise r.fail(f"{what} header (dim {pq_dim}, nsubq {nsubq}, dsub {dsub}) does not fit dim {dim}")
    r.skip(pq_dim * _KSUB * 4, f"{what} centroids")
    return int(nsubq)


def _skip_quantized(r: _Reader, what: str, rows: int, cols: int) -> None:
    """src/quantmatrix.cc QuantMatrix::save: qnorm, m, n, codes, product quantizer, [norm codes, norm quantizer]."""
    qnorm = r.flag(f"{what} qnorm")
    m, n, codesize = r.unpack("<qqi", f"{what} shape")
    if (m, n) != (rows, cols):
        raise r.fail(f"{what} is {m} x {n}, the header implies {rows} x {cols}")
    r.skip(codesize, f"{what} codes")
    nsubq = _skip_quantizer(r, f"{what} quantizer", n)
    if codesize != m * nsubq:
        raise r.fail(f"{what} has {codesize} codes for {m} rows of {nsubq} sub-vectors")
    if qnorm:
        r.skip(m, f"{what} norm codes")
        _skip_quantizer(r, f"{what} norm quantizer", 1)


@functools.lru_cache(maxsize=8)
def _entries_re(kind: int, count: int) -> re.Pattern[bytes]:
    """`count` dictionary entries of one type: word, NUL, int64 count, the int8 type. The word holds no NUL, so
    each entry parses one way, and the possessive [^\\x00]*+ never backtracks."""
    return re.compile(rb"(?s)(?:[^\x00]*+\x00.{8}" + re.escape(bytes([kind])) + rb"){%d}" % count)


def _skip_entries(r: _Reader, count: int, kind: int, what: str) -> int:
    """Skip `count` entries of type `kind` and return their start. A regular expression runs the walk in C, in
    chunks (its backtracking state grows with the repeat count): 0.5 s for 4 million words here, where a
    Python loop over the entries took 28 s. Its failure is the file's: truncated, or an entry with no NUL or another type."""
    start = r.pos
    done = 0
    while done < count:
        n = min(_DICT_CHUNK, count - done)
        match = _entries_re(kind, n).match(r.data, r.pos)
        if match is None:
            raise r.fail(
                f"truncated or corrupt: the dictionary's {what} {done}..{done + n - 1} (each a word, NUL, "
                f"int64 count and type {kind}) do not all fit from offset {r.pos}; the file has {len(r.data)} bytes"
            )
        r.pos = match.end()
        done += n
    return start


def _read_dictionary(r: _Reader) -> tuple[int, list[str], int]:
    """src/dictionary.cc Dictionary::save: counts, then each entry as word NUL, int64 count, int8 type (words
    first, then labels: Dictionary::threshold sorts them so), then the pruned-index pairs.
    Returns (nwords, labels, pruned-index size: -1 when not pruned)."""
    size, nwords, nlabels, _ntokens, prune_size = r.unpack("<iiiqq", "dictionary header")
    if nwords < 0 or nlabels < 0 or size != nwords + nlabels:
        raise r.fail(f"dictionary header says {size} entries = {nwords} words + {nlabels} labels")
    _skip_entries(r, nwords, 0, "words")
    start = _skip_entries(r, nlabels, 1, "labels")
    names = re.findall(rb"(?s)([^\x00]*)\x00.{8}\x01", r.data[start : r.pos])
    labels = [name.decode("utf-8", "replace") for name in names]
    r.skip(8 * max(0, prune_size), "pruned index")
    return nwords, labels, prune_size


def _check_model_file(path: Path) -> list[str]:
    """Walk a fastText model file (src/fasttext.cc FastText::saveModel: magic, version, args, dictionary,
    quant flag, input matrix, qout flag, output matrix) and check each part's size against the file's, so that
    fastText never reads past its end or allocates a size it found in garbage. Returns the labels."""
    try:
        f = open(path, "rb")  # closed by the `with f` below; mmap needs the descriptor
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file (a fastText model was expected)") from None
    except IsADirectoryError:
        raise ValueError(f"{path}: is a directory, not a fastText model file") from None
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it ({exc.strerror or exc})") from exc
    with f:
        size = os.fstat(f.fileno()).st_size
        if size < 8:
            raise ValueError(f"{path}: not a fastText model: {size} bytes, shorter than fastText's 8-byte header")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return _walk_model(_Reader(data, path))


def _walk_model(r: _Reader) -> list[str]:
    magic, version = r.unpack("<ii", "header")
    if magic != FASTTEXT_MAGIC:
        raise ValueError(
            f"{r.path}: not a fastText model (its first 4 bytes are not fastText's magic number {FASTTEXT_MAGIC})"
        )
    if version not in (11, FASTTEXT_VERSION):
        raise r.fail(f"file format version {version}; fasttext 0.9.2 reads versions 11 and {FASTTEXT_VERSION}")
    # src/args.cc Args::save: dim ws epoch minCount neg wordNgrams loss model bucket minn maxn lrUpdateRate (int32), t
    args = r.unpack("<12id", "args")
    dim, model_kind, bucket = args[0], args[7], args[8]
    if model_kind != _SUPERVISED:
        raise r.fail(f"model type {model_kind} is not a supervised classifier ({_SUPERVISED})")
    if dim < 1 or bucket < 0:
        raise r.fail(f"args say dim {dim}, bucket {bucket}")
    nwords, labels, prune_size = _read_dictionary(r)
    # input rows: the words, then the n-gram buckets, or only those kept by pruning (Dictionary::pushHash)
    rows = nwords + (bucket if prune_size < 0 else prune_size)
    quantized = r.flag("quant flag")
    if quantized:
        _skip_quantized(r, "input matrix", rows, dim)
    else:
        if prune_size >= 0:  # fastText refuses it too (FastText::loadModel, "Invalid model file")
            raise r.fail("a pruned dictionary with an unquantized input matrix")
        _skip_dense(r, "input matrix", rows, dim)
    if r.flag("qout flag") and quantized:
        _skip_quantized(r, "output matrix", len(labels), dim)
    else:
        _skip_dense(r, "output matrix", len(labels), dim)
    if r.pos != len(r.data):
        raise r.fail(f"{len(r.data) - r.pos} bytes after the end of the model at offset {r.pos}")
    return labels


def _check_labels(labels: Sequence[str], where: object) -> None:
    if sorted(labels) != sorted((POSITIVE_LABEL, NEGATIVE_LABEL)):
        raise ValueError(
            f"{where}: a quality classifier has exactly the labels {POSITIVE_LABEL} and {NEGATIVE_LABEL} "
            f"(as DCLM's); this model has {sorted(labels)}"
        )


def load_classifier(path: Path) -> FastTextModel:
    """Load a model written by train_classifier (or DCLM's fasttext-oh-eli5): a ValueError naming the file when
    it is missing, truncated, not a fastText model, or not a classifier of __label__hq against __label__cc."""
    path = Path(path)
    _check_labels(_check_model_file(path), path)
    try:
        # what fasttext.load_model does, without its deprecation warning on stderr
        model = fasttext.FastText._FastText(model_path=str(path))
    except (ValueError, RuntimeError, MemoryError) as exc:
        raise ValueError(f"{path}: fastText could not load it: {exc}") from exc
    return model


def _score_line(model: FastTextModel, line: str) -> float:
    # the binding's single-line predict: FastText.predict breaks under numpy 2 (module docstring)
    for prob, label in model.f.predict(line + "\n", -1, 0.0, "strict"):
        if label == POSITIVE_LABEL:
            return min(1.0, max(0.0, float(prob) - _PROB_OFFSET))
    # fastText predicts nothing for a line with no known feature, possible only if "</s>" is not in the
    # dictionary (every training line ends with one): no evidence of quality
    return 0.0


def _score_lines(model: FastTextModel, lines: list[str]) -> list[float]:
    return [_score_line(model, line) for line in lines]


def score_texts(model: FastTextModel, texts: Sequence[str]) -> list[float]:
    """The probability of __label__hq for each text, in [0, 1], after the preprocessing of training (newlines
    become spaces). Deterministic: a text's score does not depend on the others."""
    if isinstance(texts, str):
        raise TypeError("score_texts takes a sequence of texts, not one string")
    _check_labels(model.get_labels(), "score_texts")
    return [_score_line(model, _prepare(text)) for text in texts]
