"""The stage score_quality: one curate shard's documents, as the source's join kept them
(runlib.curate.joined), scored by the source's quality models, so that scoring, the costly half of quality
filtering, runs as one job per shard. filter_quality (runlib.curate.quality) reads every shard's scores and
sets the cut over the whole source; filter_shard (runlib.curate.filter_shard) applies it shard by shard.

    scores.npy  one row per document of the shard kept by the join, those trained on then those held out,
                each in input order: perplexity (nan: not scored; inf: a document without words),
                quality_score (nan: not scored), chars (the text's length)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from runlib.curate.classifier import load_classifier, score_texts
from runlib.curate.config import ScoreQualityConfig
from runlib.curate.files import save_npy
from runlib.curate.joined import part_texts
from runlib.curate.ngram_lm import load_ngram_lm, perplexities

CLASSIFIER_FILE = "model.bin"
NGRAM_LM_FILE = "ngram_lm.bin"
SCORES_FILE = "scores.npy"
SCORE_DTYPE = np.dtype([("perplexity", "<f8"), ("quality_score", "<f8"), ("chars", "<i8")])
QUALITY_FILE = "quality.npy"
"""filter_quality's verdicts: a uint8 reason code per scored document (0: kept), the shards' scores.npy rows
concatenated in shard order; its stats.json "offsets" says where each shard's rows start."""
PERPLEXITY_LOW, PERPLEXITY_HIGH, LOW_SCORE = 1, 2, 3
"""A dropped document's reason code; QUALITY_DROPPED_AS names its step and reason."""
QUALITY_DROPPED_AS = {
    PERPLEXITY_LOW: ("perplexity", "perplexity_low"),
    PERPLEXITY_HIGH: ("perplexity", "perplexity_high"),
    LOW_SCORE: ("classifier", "low_score"),
}


def score_quality(config: ScoreQualityConfig, dirs: dict[str, Path], out_dir: Path) -> dict[str, Any]:
    """out_dir/scores.npy for shard config.shard: dirs["shard"] (its curate_shard output) with the fates of
    dirs["source"] (curate_source), scored by dirs["classifier"] and dirs["ngram_lm"]."""
    texts, train = part_texts(dirs["shard"], dirs["source"], config.shard)
    scores = np.zeros(len(texts), dtype=SCORE_DTYPE)
    scores["perplexity"] = scores["quality_score"] = np.nan
    scores["chars"] = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
    if config.perplexity and texts:
        scores["perplexity"] = perplexities(load_ngram_lm(Path(dirs["ngram_lm"]) / NGRAM_LM_FILE), texts)
    if config.classifier and texts:
        scores["quality_score"] = score_texts(load_classifier(Path(dirs["classifier"]) / CLASSIFIER_FILE), texts)
    save_npy(Path(out_dir) / SCORES_FILE, scores)
    return {"counts": {"docs_train": train, "docs_heldout": len(texts) - train}}
