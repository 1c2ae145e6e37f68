"""The quality-model stages on curated folders written here: a classifier that separates the standard library's
documentation from spam keeps the documentation, a perplexity filter keeps the documents its reference
predicts, and what they keep, drop and score is what the spec says."""

from __future__ import annotations

import hashlib
import json
import math
import random
import shutil
from pathlib import Path

import pytest

from runlib.curate.builtin import builtin_documents
from runlib.curate.config import FilterQualityConfig, ScoreQualityConfig, TrainClassifierConfig, TrainNgramLmConfig
from runlib.curate.files import jsonl_line
from runlib.curate.parts import PartRanges, read_parts, write_one_part, write_parts
from runlib.curate.quality import filter_quality, train_classifier_stage, train_ngram_lm_stage
from runlib.curate.scoring import score_quality
from runlib.errors import UserError
from runlib.spec.models import ClassifierSpec, PerplexitySpec

DOCS = [text for _, text in builtin_documents("python_docs", 240)[0] if len(text) > 300]


SPAM = "buy cheap best price click here free shipping limited offer casino bonus win now deal login cart".split()


def _spam(seed: int, n: int) -> list[str]:
    """Pages of shop and casino boilerplate, the kind a quality filter is for."""
    rng = random.Random(seed)
    return [
        " ".join(rng.choice(SPAM) + rng.choice(("", " |", "!", f" {rng.randint(1, 99)}%")) for _ in range(120))
        for _ in range(n)
    ]


def write_jsonl_parts(path: Path, rows: list[tuple[int, dict]], ranges: PartRanges) -> None:
    """A JSONL file of (part, row) in part order, its byte ranges recorded in `ranges`."""
    with open(path, "wb") as f:
        for part, row in rows:
            line = jsonl_line(row).encode("utf-8")
            ranges.advance(part)
            f.write(line)
            ranges.add(len(line))


def write_curated(directory: Path, texts: list[str], heldout: int = 0, parts: int = 1) -> Path:
    """A curate_source-like folder: train.jsonl, heldout.jsonl, stats.json with one row per split, and
    parts.json (the training documents dealt into `parts` consecutive parts, the held-out ones in the last)."""
    directory.mkdir(parents=True)
    rows = [{"id": f"doc{i}", "text": t, "sha256": hashlib.sha256(t.encode()).hexdigest()} for i, t in enumerate(texts)]
    split = len(rows) - heldout
    ranges = {"train": PartRanges(parts), "heldout": PartRanges(parts)}
    train = [(i * parts // max(split, 1), row) for i, row in enumerate(rows[:split])]
    write_jsonl_parts(directory / "train.jsonl", train, ranges["train"])
    write_jsonl_parts(directory / "heldout.jsonl", [(parts - 1, row) for row in rows[split:]], ranges["heldout"])
    write_parts(directory, ranges["train"], ranges["heldout"])
    chars = sum(len(t) for t in texts)
    step = {"step": "heldout_split", "kind": "filter", "docs_in": len(rows), "docs_out": len(rows)}
    (directory / "stats.json").write_text(json.dumps({"steps": [step | {"chars_in": chars, "chars_out": chars}]}))
    return directory


def classifier_config(**kw: object) -> TrainClassifierConfig:
    values = dict(sample_docs=40, seed=0, heldout_fraction=0.1, epoch=10, lr=0.5, dim=16, word_ngrams=2)
    return TrainClassifierConfig(**(values | {"bucket": 20_000, "fasttext": "fasttext-wheel 0.9.2"} | kw))


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A 'web' source of half documentation, half spam (8 held out), and other documentation as the anchor; the
    classifier sees 40 of the web's 120 documents as negatives (DCLM samples a few of a large pool)."""
    root = tmp_path_factory.mktemp("quality")
    good, bad = DOCS[:60], _spam(1, 60)
    mixed = [t for pair in zip(good, bad, strict=True) for t in pair]
    dirs = {
        "anchor": write_curated(root / "anchor", DOCS[60:]),
        "web": write_curated(root / "web", mixed, heldout=8, parts=3),
        "classifier": root / "classifier",
        "lm": root / "lm",
    }
    train_classifier_stage(
        classifier_config(), {"positive0": dirs["anchor"], "negatives": dirs["web"]}, dirs["classifier"]
    )
    train_ngram_lm_stage(TrainNgramLmConfig(order=3), {"reference0": dirs["anchor"]}, dirs["lm"])
    return dirs


def scored_filter(config: FilterQualityConfig, dirs: dict[str, Path], out: Path, name: str = "source") -> dict:
    """filter_quality over the score_quality of every part of dirs["curated"], as the workflow runs them."""
    parts = len(read_parts(dirs["curated"])["train"])
    score = ScoreQualityConfig(
        classifier=config.classifier is not None, perplexity=config.perplexity is not None, part=0
    )
    inputs = dict(dirs)
    for part in range(parts):
        score_quality(score.model_copy(update={"part": part}), dirs, out.parent / f"{out.name}-scores{part}")
        inputs[f"scores{part}"] = out.parent / f"{out.name}-scores{part}"
    return filter_quality(config, inputs, out, name)


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.open()]


def test_the_classifier_artifact_holds_its_heldout_precision_and_recall(web: dict[str, Path]) -> None:
    stats = json.loads((web["classifier"] / "stats.json").read_text())["counts"]
    # the negatives are the web source itself, half of it documentation: precision is bounded
    assert all(0 <= stats[m] <= 1 for m in ("precision", "recall", "f1", "accuracy")) and stats["recall"] >= 0.5
    assert (
        stats["heldout_positives"] + stats["train_positives"]
        == 40
        == stats["heldout_negatives"] + stats["train_negatives"]
    )
    assert (web["classifier"] / "model.bin").stat().st_size > 0


def test_top_fraction_keeps_the_documentation(web: dict[str, Path], tmp_path: Path) -> None:
    config = FilterQualityConfig(
        classifier=ClassifierSpec(positives=["anchor"], keep_top_fraction=0.5), perplexity=None, keep_dropped=2
    )
    result = scored_filter(config, {"curated": web["web"], "classifier": web["classifier"]}, tmp_path / "out")
    kept = _read(tmp_path / "out" / "train.jsonl") + _read(tmp_path / "out" / "heldout.jsonl")
    assert len(kept) == math.ceil(0.5 * 120)  # exactly the top half, train and held-out together
    # each kept document stays in its part (its curate shard's): the parts' counts are those of its ids
    parts = read_parts(tmp_path / "out")
    train_ids = [int(row["id"].removeprefix("doc")) for row in _read(tmp_path / "out" / "train.jsonl")]
    assert [r[2] for r in parts["train"]] == [sum(i * 3 // 112 == p for i in train_ids) for p in range(3)]
    assert [r[2] for r in parts["heldout"]][:2] == [0, 0] and parts["heldout"][2][2] == len(kept) - len(train_ids)
    assert sum(row["text"] in DOCS for row in kept) >= 55  # the documentation, not the soup
    assert all(0 <= row["quality_score"] <= 1 for row in kept)
    row = result["steps"][-1]
    assert (row["step"], row["docs_in"], row["docs_out"], row["reasons"]) == ("classifier", 120, 60, {"low_score": 60})
    assert min(r["quality_score"] for r in kept) == row["threshold"]
    assert sum(row["histogram"]["counts"]) == 120
    dropped = _read(tmp_path / "out" / "dropped.jsonl")
    assert len(dropped) == 2 and all(
        d["reason"] == "low_score" and d["quality_score"] < row["threshold"] for d in dropped
    )


def test_perplexity_keeps_what_the_reference_predicts(web: dict[str, Path], tmp_path: Path) -> None:
    config = FilterQualityConfig(
        classifier=None, perplexity=PerplexitySpec(reference=["anchor"], keep_percentiles=(0, 50)), keep_dropped=0
    )
    result = scored_filter(config, {"curated": web["web"], "ngram_lm": web["lm"]}, tmp_path / "out")
    kept = _read(tmp_path / "out" / "train.jsonl") + _read(tmp_path / "out" / "heldout.jsonl")
    assert 55 <= len(kept) <= 65 and sum(row["text"] in DOCS for row in kept) >= 55
    low, high = result["steps"][-1]["keep_range"]
    assert all(low <= row["perplexity"] <= high for row in kept)
    assert not (tmp_path / "out" / "dropped.jsonl").exists()


def test_the_kept_documents_do_not_depend_on_the_parts(web: dict[str, Path], tmp_path: Path) -> None:
    """Both filters over the source in 3 parts (3 scoring jobs) and in 1: the same files, byte for byte; the cut
    is set over the whole source."""
    whole = tmp_path / "whole"
    shutil.copytree(web["web"], whole)
    write_one_part(whole)
    config = FilterQualityConfig(
        classifier=ClassifierSpec(positives=["anchor"], keep_top_fraction=0.6),
        perplexity=PerplexitySpec(reference=["anchor"], keep_percentiles=(0, 80)),
        keep_dropped=3,
    )
    models = {"classifier": web["classifier"], "ngram_lm": web["lm"]}
    parted = scored_filter(config, {"curated": web["web"], **models}, tmp_path / "parted")
    single = scored_filter(config, {"curated": whole, **models}, tmp_path / "single")
    assert parted["steps"] == single["steps"] and parted["counts"] == single["counts"]
    for name in ("train.jsonl", "heldout.jsonl", "dropped.jsonl"):
        assert (tmp_path / "parted" / name).read_bytes() == (tmp_path / "single" / name).read_bytes(), name
    assert [r[2] for r in read_parts(tmp_path / "parted")["train"]] != [
        r[2] for r in read_parts(tmp_path / "single")["train"]
    ]
    # a score part that does not match its curated part is named
    (tmp_path / "parted-scores1" / "scores.npy").write_bytes((tmp_path / "parted-scores0" / "scores.npy").read_bytes())
    inputs = {"curated": web["web"], **{f"scores{i}": tmp_path / f"parted-scores{i}" for i in range(3)}}
    with pytest.raises(ValueError, match="scores.npy: .* not the .* documents of part 1"):
        filter_quality(config, inputs, tmp_path / "again")


def test_a_threshold_nothing_passes_is_a_clear_error(web: dict[str, Path], tmp_path: Path) -> None:
    config = FilterQualityConfig(
        classifier=ClassifierSpec(positives=["anchor"], keep_threshold=1.0), perplexity=None, keep_dropped=0
    )
    with pytest.raises(UserError, match="kept none of the source's 112 training documents"):
        scored_filter(config, {"curated": web["web"], "classifier": web["classifier"]}, tmp_path / "out", "web")
    assert not (tmp_path / "out" / "train.jsonl").exists()


def test_an_anchor_without_documents_is_a_clear_error(web: dict[str, Path], tmp_path: Path) -> None:
    empty = write_curated(tmp_path / "empty", [])
    with pytest.raises(UserError, match=r"data.sources.web.curate.classifier.positives: 0 curated document"):
        train_classifier_stage(
            classifier_config(), {"positive0": empty, "negatives": web["web"]}, tmp_path / "m", "web"
        )
    with pytest.raises(UserError, match="reference sources have no curated document"):
        train_ngram_lm_stage(TrainNgramLmConfig(order=3), {"reference0": empty}, tmp_path / "lm", "web")
