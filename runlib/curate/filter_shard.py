"""The stage filter_shard: one curate shard's documents as the source trains on them, a job per shard.

curate_source decides, for the whole source, which documents are duplicates and which are held out
(fates.npy: runlib.curate.source); with curate.classifier or curate.perplexity, filter_quality decides which
of the rest the quality filters drop (quality.npy: runlib.curate.quality). filter_shard applies both to one
shard's docs.jsonl and writes

    train.jsonl    the shard's documents trained on, in input order (docs.jsonl's lines; with quality filters
                   each also carries its scores, "perplexity" and "quality_score")
    heldout.jsonl  its held-out documents, in input order
    dropped.jsonl  with curate.keep_dropped, the first documents of each (step, reason) the join and the quality
                   filters dropped in this shard (`runlib docs --dropped` merges the shards' in order)
    stats.json     the counts

A source's curated documents are its filter_shard outputs in shard order (runlib.graph.nodes.curated_parts):
each is tokenized by its own job, and the loader reads the parts in order as one stream, so the data order
does not depend on the number of shards. A job holds one shard's fate codes and streams the texts.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from runlib.curate.config import FilterShardConfig
from runlib.curate.dropped import DroppedSample
from runlib.curate.files import HELDOUT_FILE, STATS_FILE, TRAIN_FILE, jsonl_line, write_dropped, write_json
from runlib.curate.joined import fate_codes, rebuild, shard_docs, shard_lines
from runlib.curate.npyfile import NpyFile
from runlib.curate.scoring import (
    PERPLEXITY_HIGH,
    PERPLEXITY_LOW,
    QUALITY_DROPPED_AS,
    QUALITY_FILE,
    SCORE_DTYPE,
    SCORES_FILE,
)
from runlib.curate.source import DROPPED_AS, HELDOUT
from runlib.util.atomic import atomic_file


def _quality_rows(dirs: dict[str, Path], shard: int, rows: int) -> tuple[NDArray[np.uint8], NDArray[Any]]:
    """(filter_quality's reason code per document of this shard kept by the join, 0 = kept; their scores)."""
    path = dirs["quality"] / QUALITY_FILE
    offsets = json.loads((dirs["quality"] / STATS_FILE).read_text(encoding="utf-8"))["offsets"]
    if not 0 <= shard < len(offsets) - 1 or offsets[shard + 1] - offsets[shard] != rows:
        raise ValueError(
            f"{dirs['quality'] / STATS_FILE}: no {rows} rows for shard {shard}; {rebuild(dirs['quality'])}"
        )
    with NpyFile(path) as table:
        if table.dtype != np.uint8 or table.shape != (offsets[-1],):
            raise ValueError(f"{path}: not {offsets[-1]} reason codes; {rebuild(dirs['quality'])}")
        codes = table.rows(0, offsets[shard], offsets[shard + 1])
    scores = np.load(dirs["scores"] / SCORES_FILE, allow_pickle=False)
    if scores.dtype != SCORE_DTYPE or len(scores) != rows:
        raise ValueError(
            f"{dirs['scores'] / SCORES_FILE}: not the {rows} scores of shard {shard}; {rebuild(dirs['scores'])}"
        )
    return codes, scores


def _with_scores(line: bytes, config: FilterShardConfig, score: Any, why: int) -> dict[str, Any]:
    """The row with its scores (JSON has no inf: a document without words gets null); a document the
    perplexity filter dropped was never scored by the classifier."""
    row: dict[str, Any] = json.loads(line)
    columns = {
        "perplexity": config.perplexity,
        "quality_score": config.classifier and why not in (PERPLEXITY_LOW, PERPLEXITY_HIGH),
    }
    for column, wanted in columns.items():
        value = float(score[column])
        if wanted and not math.isnan(value):
            row[column] = value if math.isfinite(value) else None
    return row


def filter_shard(config: FilterShardConfig, dirs: dict[str, Path], out_dir: Path) -> dict[str, Any]:
    """out_dir/train.jsonl, heldout.jsonl (and dropped.jsonl, stats.json) of shard config.shard: dirs["shard"]
    (its curate_shard output) with the verdicts of dirs["source"] (curate_source) and, with quality filters,
    dirs["quality"] (filter_quality) and dirs["scores"] (its score_quality)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = shard_docs(dirs["shard"])
    codes = fate_codes(dirs["source"], config.shard, lines)
    n_train, n_heldout = int((codes == 0).sum()), int((codes == HELDOUT).sum())
    quality = config.perplexity or config.classifier
    why, scores = _quality_rows(dirs, config.shard, n_train + n_heldout) if quality else (None, None)
    dropped = DroppedSample(config.keep_dropped)
    counts = {"docs_train": 0, "docs_heldout": 0}
    index = {"train": 0, "heldout": n_train}  # a kept document's row in the shard's scores
    with (
        atomic_file(out_dir / TRAIN_FILE) as train_tmp,
        atomic_file(out_dir / HELDOUT_FILE) as heldout_tmp,
        open(train_tmp, "wb") as train,
        open(heldout_tmp, "wb") as held,
    ):
        outputs = {"train": train, "heldout": held}
        for code, line in zip(codes.tolist(), shard_lines(dirs["shard"], lines), strict=True):
            if code in DROPPED_AS:
                if dropped.wants(*DROPPED_AS[code]):
                    row = json.loads(line)
                    row.pop("sha256", None)
                    dropped.add(*DROPPED_AS[code], row.pop("id"), row.pop("text"), row)
                continue
            split = "heldout" if code == HELDOUT else "train"
            if why is not None and scores is not None:
                i = index[split]
                index[split] += 1
                reason = int(why[i])
                if reason and not dropped.wants(*QUALITY_DROPPED_AS[reason]):
                    continue
                row = _with_scores(line, config, scores[i], reason)
                if reason:
                    extra = {k: v for k, v in row.items() if k not in ("id", "text", "sha256")}
                    dropped.add(*QUALITY_DROPPED_AS[reason], row["id"], row["text"], extra)
                    continue
                line = jsonl_line(row).encode("utf-8")
            outputs[split].write(line)
            counts[f"docs_{split}"] += 1
    write_dropped(out_dir, dropped)
    result = {"counts": counts, "shard": config.shard}
    write_json(out_dir / STATS_FILE, result)
    return result
