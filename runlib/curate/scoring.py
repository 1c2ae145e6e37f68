"""The stage score_quality: one part of a source's curated documents (its curate shard's byte ranges of
train.jsonl and heldout.jsonl, runlib.curate.parts) scored by the source's quality models, so that scoring,
the costly half of quality filtering, runs as one job per shard. filter_quality (runlib.curate.quality)
reads every part's scores, sets the cut over the whole source and keeps the documents.

    scores.npy  one row per document of the part, its train range then its heldout range, in file order:
                perplexity (nan: not scored; inf: a document without words), quality_score (nan: not
                scored), chars (the text's length)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from runlib.curate.classifier import load_classifier, score_texts
from runlib.curate.config import ScoreQualityConfig
from runlib.curate.files import save_npy
from runlib.curate.ngram_lm import load_ngram_lm, perplexities
from runlib.curate.parts import SPLITS, part_lines, read_parts

CLASSIFIER_FILE = "model.bin"
NGRAM_LM_FILE = "ngram_lm.bin"
SCORES_FILE = "scores.npy"
SCORE_DTYPE = np.dtype([("perplexity", "<f8"), ("quality_score", "<f8"), ("chars", "<i8")])


def part_texts(curated_dir: Path, part: int) -> tuple[list[str], int]:
    """(the texts of one part, its train range's then its heldout range's; how many are train)."""
    parts = read_parts(curated_dir)
    if not 0 <= part < len(parts["train"]):
        raise ValueError(f"{Path(curated_dir) / 'parts.json'}: {len(parts['train'])} parts, no part {part}")
    texts: list[str] = []
    train = 0
    for split in SPLITS:
        start, end, _ = parts[split][part]
        texts += [json.loads(line)["text"] for _, line in part_lines(Path(curated_dir) / f"{split}.jsonl", start, end)]
        if split == "train":
            train = len(texts)
    return texts, train


def score_quality(config: ScoreQualityConfig, dirs: dict[str, Path], out_dir: Path) -> dict[str, Any]:
    """out_dir/scores.npy for part config.part of the curated source dirs["curated"]."""
    texts, train = part_texts(dirs["curated"], config.part)
    scores = np.zeros(len(texts), dtype=SCORE_DTYPE)
    scores["perplexity"] = scores["quality_score"] = np.nan
    scores["chars"] = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
    if config.perplexity and texts:
        scores["perplexity"] = perplexities(load_ngram_lm(Path(dirs["ngram_lm"]) / NGRAM_LM_FILE), texts)
    if config.classifier and texts:
        scores["quality_score"] = score_texts(load_classifier(Path(dirs["classifier"]) / CLASSIFIER_FILE), texts)
    save_npy(Path(out_dir) / SCORES_FILE, scores)
    return {"counts": {"docs_train": train, "docs_heldout": len(texts) - train}}
