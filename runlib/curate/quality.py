"""The quality-model stages of a source with curate.classifier or curate.perplexity:

    train_classifier  fastText on the anchors' curated train splits (positives) against a sample of the source's
                      own curated train split (negatives): model.bin, and its held-out precision and recall
    train_ngram_lm    an n-gram language model on the reference sources' curated train splits: ngram_lm.bin
    score_quality     one shard of the source's curated documents scored (runlib.curate.scoring)
    filter_quality    which of the source's curated documents (train and held-out) its shards' scores keep:
                        perplexity  filter  keep_percentiles of the source's own perplexities, or keep_range
                        classifier  filter  keep_top_fraction of the source's documents by score, or keep_threshold
                      a reason code per document (quality.npy); filter_shard writes the documents kept, each
                      with its scores beside its text ("perplexity", "quality_score")

They run after the source's dedup, as DCLM applies its fastText filter to deduplicated RefinedWeb (Li et al.
2024, arXiv 2406.11794, section 4) and CCNet scores deduplicated paragraphs (Wenzek et al. 2020, section 3):
scoring a duplicate would only be thrown away. Percentiles and the top fraction are over the source's curated
documents as a whole (train and held-out together), so the cut does not depend on how the source is sharded.
filter_quality holds about 50 bytes per document (scores, length, fate) and reads no text.
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from runlib.curate.classifier import train_classifier
from runlib.curate.config import FilterQualityConfig, TrainClassifierConfig, TrainNgramLmConfig
from runlib.curate.counts import validate_counts
from runlib.curate.files import STATS_FILE, save_npy, write_json
from runlib.curate.joined import joined_texts
from runlib.curate.ngram_lm import save_ngram_lm, train_ngram_lm
from runlib.curate.scoring import (
    CLASSIFIER_FILE,
    LOW_SCORE,
    NGRAM_LM_FILE,
    PERPLEXITY_HIGH,
    PERPLEXITY_LOW,
    QUALITY_FILE,
    SCORE_DTYPE,
    SCORES_FILE,
)
from runlib.errors import UserError

DEFAULT_TOP_FRACTION = 0.1  # DCLM keeps the top 10% by fastText score
DEFAULT_PERCENTILES = (0.0, 66.7)  # CCNet's head and middle thirds
HISTOGRAM_BINS = 20


def _source_rows(dirs: dict[str, Path], role: str) -> Iterator[dict[str, Any]]:
    """The rows a source trains on after its join: input role `role` is its curate_source, roles
    `role`/shard0, `role`/shard1, ... its curate shards."""
    shards = sum(1 for r in dirs if r.startswith(f"{role}/shard"))
    return joined_texts(dirs[role], [dirs[f"{role}/shard{p}"] for p in range(shards)])


def _roles(dirs: dict[str, Path], prefix: str) -> list[str]:
    """The roles prefix0, prefix1, ... (each a source's curate_source) in order."""
    return [f"{prefix}{i}" for i in range(sum(1 for r in dirs if r.startswith(prefix) and "/" not in r))]


def _sample(dirs: dict[str, Path], roles: list[str], docs: int) -> list[str]:
    """The `docs` texts of smallest SHA-256 among the training documents of these sources (a choice of the
    texts alone), holding `docs` texts at a time."""
    rows = ((row["sha256"], row["text"]) for role in roles for row in _source_rows(dirs, role))
    return [text for _, text in heapq.nsmallest(docs, rows)]


def train_classifier_stage(
    config: TrainClassifierConfig, dirs: dict[str, Path], out_dir: Path, source_name: str = "source"
) -> dict[str, Any]:
    """model.bin and stats.json (held-out precision, recall, f1, accuracy and the counts per class)."""
    field = f"data.sources.{source_name}.curate.classifier"
    positives = _sample(dirs, _roles(dirs, "positive"), config.sample_docs)
    negatives = _sample(dirs, ["negatives"], config.sample_docs)
    for what, docs in (("positives", positives), ("negatives_docs", negatives)):
        if len(docs) < 10:
            raise UserError(
                f"{field}.{what}: {len(docs)} curated document(s) to train on, fewer than 10; give sources with "
                "more documents (or curate them less strictly)"
            )
    try:
        metrics = train_classifier(
            positives,
            negatives,
            Path(out_dir) / CLASSIFIER_FILE,
            seed=config.seed,
            heldout_fraction=config.heldout_fraction,
            epoch=config.epoch,
            word_ngrams=config.word_ngrams,
            dim=config.dim,
            lr=config.lr,
            bucket=config.bucket,
        )
    except ValueError as exc:
        raise UserError(f"{field}: {exc}") from None
    result = {"counts": dict(metrics), "fasttext": config.fasttext}
    write_json(Path(out_dir) / STATS_FILE, result)
    return result


def train_ngram_lm_stage(
    config: TrainNgramLmConfig, dirs: dict[str, Path], out_dir: Path, source_name: str = "source"
) -> dict[str, Any]:
    """ngram_lm.bin and stats.json (the reference's documents and the model's vocabulary)."""
    texts = [row["text"] for role in _roles(dirs, "reference") for row in _source_rows(dirs, role)]
    if not texts:
        raise UserError(
            f"data.sources.{source_name}.curate.perplexity.reference: the reference sources have no curated "
            "document to train on; give sources with documents"
        )
    model = train_ngram_lm(texts, order=config.order)
    save_ngram_lm(model, Path(out_dir) / NGRAM_LM_FILE)
    result = {"counts": {"reference_docs": len(texts), "vocab_size": len(model.vocab), "order": model.order}}
    write_json(Path(out_dir) / STATS_FILE, result)
    return result


# ------------------------------------------------------------------------------------------ filter_quality


def _histogram(values: NDArray[np.float64], log: bool = False) -> dict[str, list[float]]:
    finite = values[np.isfinite(values)]
    if not len(finite):
        return {"edges": [], "counts": []}
    low, high = float(finite.min()), float(finite.max())
    if log:
        edges = np.geomspace(max(low, 1.0), max(high, low + 1.0, 1.0 + 1e-9), HISTOGRAM_BINS + 1)
    else:
        edges = np.linspace(0.0, 1.0, HISTOGRAM_BINS + 1)
    counts, _ = np.histogram(np.clip(finite, edges[0], edges[-1]), bins=edges)
    return {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts]}


def _step_row(
    step: str, chars: NDArray[np.int64], before: NDArray[np.bool_], after: NDArray[np.bool_]
) -> dict[str, Any]:
    return {
        "step": step,
        "kind": "filter",
        "docs_in": int(before.sum()),
        "docs_out": int(after.sum()),
        "chars_in": int(chars[before].sum()),
        "chars_out": int(chars[after].sum()),
    }


def _perplexity_step(
    config: FilterQualityConfig,
    values: NDArray[np.float64],
    chars: NDArray[np.int64],
    keep: NDArray[np.bool_],
    why: NDArray[np.uint8],
) -> dict[str, Any]:
    """Keep the documents in keep_range, or in keep_percentiles of the source's own perplexities; the step's row."""
    spec = config.perplexity
    assert spec is not None
    alive = keep.copy()
    finite = values[alive][np.isfinite(values[alive])]
    if spec.keep_range is not None:
        low, high = spec.keep_range
    elif len(finite):
        low, high = (float(x) for x in np.percentile(finite, spec.keep_percentiles or DEFAULT_PERCENTILES))
    else:
        low, high = math.inf, math.inf
    new = keep & (values >= low) & (values <= high)
    dropped = alive & ~new
    why[dropped & (values < low)] = PERPLEXITY_LOW
    why[dropped & ~(values < low)] = PERPLEXITY_HIGH
    row = _step_row("perplexity", chars, alive, new) | {
        "reasons": {
            "perplexity_low": int((dropped & (values < low)).sum()),
            "perplexity_high": int((dropped & ~(values < low)).sum()),
        },
        "keep_range": [low, high],
        "histogram": _histogram(values[alive], log=True),
    }
    keep[:] = new
    return row


def _classifier_step(
    config: FilterQualityConfig,
    scores: NDArray[np.float64],
    chars: NDArray[np.int64],
    keep: NDArray[np.bool_],
    why: NDArray[np.uint8],
) -> dict[str, Any]:
    """Keep the documents at keep_threshold or above, or the top fraction of those still kept; the step's row.
    The scores of the documents dropped before become nan (they were not scored for this step)."""
    spec = config.classifier
    assert spec is not None
    scores[~keep] = np.nan
    alive = np.flatnonzero(keep)
    if spec.keep_threshold is not None:
        threshold = spec.keep_threshold
        new = keep & (scores >= threshold)
    else:  # the top fraction by score, ties broken by position: exactly ceil(fraction x documents) kept
        fraction = spec.keep_top_fraction or DEFAULT_TOP_FRACTION
        ranked = alive[np.argsort(-scores[alive], kind="stable")]
        top = ranked[: math.ceil(fraction * len(alive))]
        new = np.zeros(len(scores), dtype=bool)
        new[top] = True
        threshold = float(scores[top].min()) if len(top) else math.inf
    dropped = keep & ~new
    why[dropped] = LOW_SCORE
    row = _step_row("classifier", chars, keep, new) | {
        "reasons": {"low_score": int(dropped.sum())},
        "threshold": threshold,
        "histogram": _histogram(scores[alive]),
    }
    keep[:] = new
    return row


def _read_scores(dirs: dict[str, Path]) -> tuple[NDArray[np.void], int, list[list[int]]]:
    """(the scores of every document, the trained-on ones of each shard in shard order, then the held-out
    ones; how many are trained on; per shard [trained on, held out]), from the score_quality outputs (roles
    scores0, scores1, ...) and the join's counts per shard (role source)."""
    parts = json.loads((dirs["source"] / STATS_FILE).read_text(encoding="utf-8"))["parts"]
    score_dirs = [dirs[f"scores{i}"] for i in range(sum(1 for r in dirs if r.startswith("scores")))]
    if len(score_dirs) != len(parts):
        raise ValueError(f"filter_quality: {len(score_dirs)} score shards for the join's {len(parts)} shards")
    train, heldout = [], []
    for i, directory in enumerate(score_dirs):
        scores = np.load(directory / SCORES_FILE, allow_pickle=False)
        n_train, n_heldout = parts[i]
        if scores.dtype != SCORE_DTYPE or len(scores) != n_train + n_heldout:
            raise ValueError(
                f"{directory / SCORES_FILE}: {len(scores)} rows of {scores.dtype}, not the {n_train + n_heldout} "
                f"documents of shard {i}; rebuild it"
            )
        train.append(scores[:n_train])
        heldout.append(scores[n_train:])
    together = np.concatenate(train + heldout) if score_dirs else np.zeros(0, dtype=SCORE_DTYPE)
    return together, sum(len(t) for t in train), parts


def _by_shard(why: NDArray[np.uint8], train_docs: int, parts: list[list[int]]) -> tuple[NDArray[np.uint8], list[int]]:
    """The reason codes rearranged into the shards' scores.npy order (each shard's trained-on rows, then its
    held-out rows), and where each shard's rows start (its offsets, and the end)."""
    out, offsets = [], [0]
    train_at, heldout_at = 0, train_docs
    for n_train, n_heldout in parts:
        out += [why[train_at : train_at + n_train], why[heldout_at : heldout_at + n_heldout]]
        train_at, heldout_at = train_at + n_train, heldout_at + n_heldout
        offsets.append(offsets[-1] + n_train + n_heldout)
    return (np.concatenate(out) if out else np.zeros(0, dtype=np.uint8)), offsets


def filter_quality(
    config: FilterQualityConfig, dirs: dict[str, Path], out_dir: Path, source_name: str = "source"
) -> dict[str, Any]:
    """out_dir/quality.npy: a reason code per curated document of the source (0: kept), in its shards' order;
    stats.json with the curate_source steps, then this stage's, and each shard's offset into quality.npy. It
    holds about 50 bytes per document (its scores, length and fate), never a text: filter_shard applies it."""
    out_dir = Path(out_dir)
    scores, train_docs, parts = _read_scores(dirs)
    steps = json.loads((dirs["source"] / STATS_FILE).read_text(encoding="utf-8"))["steps"]
    chars = scores["chars"]
    keep = np.ones(len(scores), dtype=bool)
    why = np.zeros(len(scores), dtype=np.uint8)
    if config.perplexity is not None:
        steps.append(_perplexity_step(config, scores["perplexity"].copy(), chars, keep, why))
    if config.classifier is not None:
        steps.append(_classifier_step(config, scores["quality_score"].copy(), chars, keep, why))
    _check_kept(source_name, keep, train_docs, len(scores))
    validate_counts(steps)
    codes, offsets = _by_shard(why, train_docs, parts)
    save_npy(out_dir / QUALITY_FILE, codes)
    result = {
        "counts": {
            "docs_in": len(scores),
            "docs_train": int(keep[:train_docs].sum()),
            "docs_heldout": int(keep[train_docs:].sum()),
        },
        "steps": steps,
        "offsets": offsets,
    }
    write_json(out_dir / STATS_FILE, result)
    return result


def _check_kept(source_name: str, keep: NDArray[np.bool_], train_docs: int, docs: int) -> None:
    """UserError when the filters left no training document, or emptied a held-out split that had documents."""
    base = f"data.sources.{source_name}.curate"
    if not keep[:train_docs].any():
        raise UserError(
            f"{base}: the quality filters kept none of the source's {train_docs} training documents; keep more "
            "(classifier.keep_top_fraction, perplexity.keep_percentiles) or check the anchors"
        )
    if docs > train_docs and not keep[train_docs:].any():
        raise UserError(
            f"{base}: the quality filters dropped all {docs - train_docs} held-out documents, so the source "
            "would have no held-out loss; keep more, or raise data.heldout_docs"
        )
