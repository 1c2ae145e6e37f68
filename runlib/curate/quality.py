"""The quality-model stages of a source with curate.classifier or curate.perplexity:

    train_classifier  fastText on the anchors' curated train splits (positives) against a sample of the source's
                      own curated train split (negatives): model.bin, and its held-out precision and recall
    train_ngram_lm    an n-gram language model on the reference sources' curated train splits: ngram_lm.bin
    filter_quality    the source's curated documents (train and held-out) scored and kept:
                        perplexity  filter  keep_percentiles of the source's own perplexities, or keep_range
                        classifier  filter  keep_top_fraction of the source's documents by score, or keep_threshold
                      each document keeps its scores beside its text ("perplexity", "quality_score")

They run after the source's dedup, as DCLM applies its fastText filter to deduplicated RefinedWeb (Li et al.
2024, arXiv 2406.11794, section 4) and CCNet scores deduplicated paragraphs (Wenzek et al. 2020, section 3):
scoring a duplicate would only be thrown away. Percentiles and the top fraction are over the source's curated
documents as a whole (train and held-out together), so the cut does not depend on how the source is sharded.
The documents of a source are held in memory in this stage (text and scores).
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

from runlib.curate.classifier import load_classifier, score_texts, train_classifier
from runlib.curate.config import FilterQualityConfig, TrainClassifierConfig, TrainNgramLmConfig
from runlib.curate.counts import validate_counts
from runlib.curate.dropped import DroppedSample
from runlib.curate.files import HELDOUT_FILE, STATS_FILE, TRAIN_FILE, write_dropped, write_json
from runlib.curate.ngram_lm import load_ngram_lm, perplexities, save_ngram_lm, train_ngram_lm
from runlib.curate.parts import PartRanges, part_of_rows, read_parts, write_jsonl_parts, write_parts
from runlib.errors import UserError

CLASSIFIER_FILE = "model.bin"
NGRAM_LM_FILE = "ngram_lm.bin"
DEFAULT_TOP_FRACTION = 0.1  # DCLM keeps the top 10% by fastText score
DEFAULT_PERCENTILES = (0.0, 66.7)  # CCNet's head and middle thirds
HISTOGRAM_BINS = 20


def _train_lines(directory: Path) -> Iterator[dict[str, Any]]:
    with open(directory / TRAIN_FILE, encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)


def _sample(dirs: list[Path], docs: int) -> list[str]:
    """The `docs` texts of smallest SHA-256 among the train splits of `dirs` (a choice of the texts alone)."""
    rows = ((row["sha256"], row["text"]) for directory in dirs for row in _train_lines(directory))
    return [text for _, text in heapq.nsmallest(docs, rows)]


def _roles(dirs: dict[str, Path], prefix: str) -> list[Path]:
    return [dirs[f"{prefix}{i}"] for i in range(sum(1 for role in dirs if role.startswith(prefix)))]


def train_classifier_stage(
    config: TrainClassifierConfig, dirs: dict[str, Path], out_dir: Path, source_name: str = "source"
) -> dict[str, Any]:
    """model.bin and stats.json (held-out precision, recall, f1, accuracy and the counts per class)."""
    field = f"data.sources.{source_name}.curate.classifier"
    positives = _sample(_roles(dirs, "positive"), config.sample_docs)
    negatives = _sample([dirs["negatives"]], config.sample_docs)
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
    texts = [row["text"] for directory in _roles(dirs, "reference") for row in _train_lines(directory)]
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


def _step_row(step: str, texts: list[str], before: NDArray[np.bool_], after: NDArray[np.bool_]) -> dict[str, Any]:
    chars = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
    return {
        "step": step,
        "kind": "filter",
        "docs_in": int(before.sum()),
        "docs_out": int(after.sum()),
        "chars_in": int(chars[before].sum()),
        "chars_out": int(chars[after].sum()),
    }


def _perplexity_step(
    config: FilterQualityConfig, model_path: Path, texts: list[str], keep: NDArray[np.bool_]
) -> tuple[NDArray[np.float64], dict[str, Any], dict[str, str]]:
    """(perplexity per document, the step's row, the reason of each document it drops by index)."""
    spec = config.perplexity
    assert spec is not None
    values = np.full(len(texts), np.nan)  # nan: not scored (dropped before); inf: a document without words
    alive = np.flatnonzero(keep)
    values[alive] = perplexities(load_ngram_lm(model_path), (texts[i] for i in alive))
    finite = values[alive][np.isfinite(values[alive])]
    if spec.keep_range is not None:
        low, high = spec.keep_range
    elif len(finite):
        low, high = (float(x) for x in np.percentile(finite, spec.keep_percentiles or DEFAULT_PERCENTILES))
    else:
        low, high = math.inf, math.inf
    new = keep & (values >= low) & (values <= high)
    reasons = {int(i): ("perplexity_low" if values[i] < low else "perplexity_high") for i in alive if not new[i]}
    row = _step_row("perplexity", texts, keep, new) | {
        "reasons": {r: sum(1 for v in reasons.values() if v == r) for r in ("perplexity_low", "perplexity_high")},
        "keep_range": [low, high],
        "histogram": _histogram(values[alive], log=True),
    }
    keep[:] = new
    return values, row, {str(i): r for i, r in reasons.items()}


def _classifier_step(
    config: FilterQualityConfig, model_path: Path, texts: list[str], keep: NDArray[np.bool_]
) -> tuple[NDArray[np.float64], dict[str, Any], dict[str, str]]:
    """(score per document, the step's row, the reason of each document it drops by index)."""
    spec = config.classifier
    assert spec is not None
    scores = np.full(len(texts), np.nan)
    alive = np.flatnonzero(keep)
    scores[alive] = score_texts(load_classifier(model_path), [texts[i] for i in alive])
    if spec.keep_threshold is not None:
        threshold = spec.keep_threshold
        new = keep & (scores >= threshold)
    else:  # the top fraction by score, ties broken by position: exactly ceil(fraction x documents) kept
        fraction = spec.keep_top_fraction or DEFAULT_TOP_FRACTION
        ranked = alive[np.argsort(-scores[alive], kind="stable")]
        top = ranked[: math.ceil(fraction * len(alive))]
        new = np.zeros(len(texts), dtype=bool)
        new[top] = True
        threshold = float(scores[top].min()) if len(top) else math.inf
    dropped = [int(i) for i in alive if not new[i]]
    row = _step_row("classifier", texts, keep, new) | {
        "reasons": {"low_score": len(dropped)},
        "threshold": threshold,
        "histogram": _histogram(scores[alive]),
    }
    keep[:] = new
    return scores, row, dict.fromkeys(map(str, dropped), "low_score")


def _read_curated(directory: Path) -> tuple[list[dict[str, Any]], int, list[dict[str, Any]]]:
    """(rows of train.jsonl then heldout.jsonl, how many are train, the curate_source steps)."""
    with open(directory / TRAIN_FILE, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    train = len(rows)
    with open(directory / HELDOUT_FILE, encoding="utf-8") as f:
        rows.extend(json.loads(line) for line in f)
    steps = json.loads((directory / STATS_FILE).read_text(encoding="utf-8"))["steps"]
    return rows, train, steps


def filter_quality(
    config: FilterQualityConfig, dirs: dict[str, Path], out_dir: Path, source_name: str = "source"
) -> dict[str, Any]:
    """out_dir/train.jsonl and heldout.jsonl: the curated documents kept, each with its scores; stats.json with
    the curate_source steps, then this stage's; dropped.jsonl with curate.keep_dropped of each reason."""
    out_dir = Path(out_dir)
    rows, train_docs, steps = _read_curated(dirs["curated"])
    texts = [row["text"] for row in rows]
    keep = np.ones(len(rows), dtype=bool)
    why: dict[str, tuple[str, str]] = {}
    scored: dict[str, NDArray[np.float64]] = {}
    if config.perplexity is not None:
        scored["perplexity"], row, reasons = _perplexity_step(config, dirs["ngram_lm"] / NGRAM_LM_FILE, texts, keep)
        steps.append(row)
        why |= {i: ("perplexity", r) for i, r in reasons.items()}
    if config.classifier is not None:
        scored["quality_score"], row, reasons = _classifier_step(
            config, dirs["classifier"] / CLASSIFIER_FILE, texts, keep
        )
        steps.append(row)
        why |= {i: ("classifier", r) for i, r in reasons.items()}
    _check_kept(source_name, keep, train_docs, len(rows))
    validate_counts(steps)
    for name, values in scored.items():  # JSON has no inf: a document without words has perplexity null
        for i, row in enumerate(rows):
            if not math.isnan(values[i]):
                row[name] = float(values[i]) if math.isfinite(values[i]) else None
    dropped = DroppedSample(config.keep_dropped)
    for i, row in enumerate(rows):
        if not keep[i]:
            extra = {k: v for k, v in row.items() if k not in ("id", "text", "sha256")}
            dropped.add(*why[str(i)], row["id"], row["text"], extra)
    parts = read_parts(dirs["curated"])
    part = part_of_rows(parts, "train") + part_of_rows(parts, "heldout")
    if len(part) != len(rows):
        raise ValueError(f"{dirs['curated']}: parts.json counts {len(part)} documents, the files {len(rows)}")
    ranges = {split: PartRanges(len(parts["train"])) for split in ("train", "heldout")}
    write_jsonl_parts(
        out_dir / TRAIN_FILE, ((part[i], row) for i, row in enumerate(rows[:train_docs]) if keep[i]), ranges["train"]
    )
    heldout = ((part[i], row) for i, row in enumerate(rows) if i >= train_docs and keep[i])
    write_jsonl_parts(out_dir / HELDOUT_FILE, heldout, ranges["heldout"])
    write_parts(out_dir, ranges["train"], ranges["heldout"])
    write_dropped(out_dir, dropped)
    result = {
        "counts": {
            "docs_in": len(rows),
            "docs_train": int(keep[:train_docs].sum()),
            "docs_heldout": int(keep[train_docs:].sum()),
        },
        "steps": steps,
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
