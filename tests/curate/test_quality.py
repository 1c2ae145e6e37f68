"""The quality-model stages on curated folders written here: a classifier that separates the standard library's
documentation from spam keeps the documentation, a perplexity filter keeps the documents its reference
predicts, and what they keep, drop and score is what the spec says."""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from pathlib import Path

import pytest

from runlib.curate.builtin import builtin_documents
from runlib.curate.config import (
    FilterQualityConfig,
    FilterShardConfig,
    ScoreQualityConfig,
    TrainClassifierConfig,
    TrainNgramLmConfig,
)
from runlib.curate.filter_shard import filter_shard
from runlib.curate.quality import filter_quality, train_classifier_stage, train_ngram_lm_stage
from runlib.curate.scoring import score_quality
from runlib.curate.source import curate_source
from runlib.curate.stage import curate_shard
from runlib.errors import UserError
from runlib.spec.models import ClassifierSpec, PerplexitySpec
from tests.curate import (
    concatenate_parts,
    jsonl_source,
    make_spec,
    run_partitions,
    shard_config,
    source_config,
    write_jsonl,
)

DOCS = [text for _, text in builtin_documents("python_docs", 240)[0] if len(text) > 300]


SPAM = "buy cheap best price click here free shipping limited offer casino bonus win now deal login cart".split()


def _spam(seed: int, n: int) -> list[str]:
    """Pages of shop and casino boilerplate, the kind a quality filter is for."""
    rng = random.Random(seed)
    return [
        " ".join(rng.choice(SPAM) + rng.choice(("", " |", "!", f" {rng.randint(1, 99)}%")) for _ in range(120))
        for _ in range(n)
    ]


def curated_source(root: Path, name: str, texts: list[str], heldout: int = 0, files: int = 1, shards: int = 1) -> dict:
    """A source curated by the real stages (curate_shard per shard, dedup_partition, curate_source): its texts
    written into `files` jsonl files, dealt to `shards` shards in order. {"source": its curate_source dir,
    "shards": its curate_shard dirs, "spec": the spec}."""
    root = root / name
    paths = []
    for f in range(files):
        paths.append(root / "input" / f"{f}.jsonl")
        write_jsonl(paths[-1], texts[f * len(texts) // files : (f + 1) * len(texts) // files])
    spec = make_spec({name: jsonl_source(path=str(root / "input" / "*.jsonl"))}, heldout_docs=heldout)
    shard_dirs = []
    for shard in range(shards):
        chunk = paths[shard * files // shards : (shard + 1) * files // shards]
        shard_dirs.append(root / f"shard{shard}")
        curate_shard(shard_config(spec, name, shard, shards, chunk), shard_dirs[-1], name)
    partitions = run_partitions(spec, name, shard_dirs, root)
    curate_source(source_config(spec, name), shard_dirs, root / "source", name, partitions)
    return {"source": root / "source", "shards": shard_dirs, "spec": spec}


def joined(role: str, source: dict) -> dict[str, Path]:
    """A curated source as a quality model's input roles: role, role/shard0, ..."""
    return {role: source["source"]} | {f"{role}/shard{i}": d for i, d in enumerate(source["shards"])}


def classifier_config(**kw: object) -> TrainClassifierConfig:
    values = dict(sample_docs=40, seed=0, heldout_fraction=0.1, epoch=10, lr=0.5, dim=16, word_ngrams=2)
    return TrainClassifierConfig(**(values | {"bucket": 20_000, "fasttext": "fasttext-wheel 0.9.2"} | kw))


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A 'web' source of half documentation, half spam (8 held out; 3 files in 3 shards), and other
    documentation as the anchor; the classifier sees 40 of the web's documents as negatives (DCLM samples a few
    of a large pool)."""
    root = tmp_path_factory.mktemp("quality")
    good, bad = DOCS[:60], _spam(1, 60)
    mixed = [t for pair in zip(good, bad, strict=True) for t in pair]
    dirs = {
        "anchor": curated_source(root, "anchor", DOCS[60:]),
        "web": curated_source(root, "web", mixed, heldout=8, files=3, shards=3),
        "web1": curated_source(root / "one", "web", mixed, heldout=8, files=3, shards=1),
        "classifier": root / "classifier",
        "lm": root / "lm",
    }
    train_classifier_stage(
        classifier_config(), joined("positive0", dirs["anchor"]) | joined("negatives", dirs["web"]), dirs["classifier"]
    )
    train_ngram_lm_stage(TrainNgramLmConfig(order=3), joined("reference0", dirs["anchor"]), dirs["lm"])
    return dirs


def scored_filter(
    config: FilterQualityConfig, source: dict, models: dict[str, Path], out: Path, name: str = "web"
) -> dict:
    """score_quality per shard, filter_quality, then filter_shard per shard (keep_dropped 2), as the workflow
    runs them; the parts' splits concatenated into out/train.jsonl and heldout.jsonl, their dropped samples
    into out/dropped.jsonl (the first 2 of each step and reason, as `runlib docs --dropped` reads them)."""
    score = ScoreQualityConfig(
        classifier=config.classifier is not None, perplexity=config.perplexity is not None, shard=0
    )
    inputs: dict[str, Path] = {"source": source["source"]}
    for shard, shard_dir in enumerate(source["shards"]):
        scores = out.parent / f"{out.name}-scores{shard}"
        score_quality(
            score.model_copy(update={"shard": shard}), {"shard": shard_dir, "source": source["source"]} | models, scores
        )
        inputs[f"scores{shard}"] = scores
    result = filter_quality(config, inputs, out / "quality", name)
    parts = []
    for shard, shard_dir in enumerate(source["shards"]):
        filter_config = FilterShardConfig(
            shard=shard,
            perplexity=config.perplexity is not None,
            classifier=config.classifier is not None,
            keep_dropped=2,
        )
        dirs = {
            "shard": shard_dir,
            "source": source["source"],
            "quality": out / "quality",
            "scores": inputs[f"scores{shard}"],
        }
        filter_shard(filter_config, dirs, out / f"part{shard}")
        parts.append(out / f"part{shard}")
    concatenate_parts(parts, out)
    taken: Counter = Counter()
    with open(out / "dropped.jsonl", "w") as f:
        for part in parts:
            for row in _read(part / "dropped.jsonl") if (part / "dropped.jsonl").exists() else []:
                taken[(row["step"], row["reason"])] += 1
                if taken[(row["step"], row["reason"])] <= 2:
                    f.write(json.dumps(row) + "\n")
    return result


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


def test_top_fraction_keeps_the_documentation(web: dict, tmp_path: Path) -> None:
    config = FilterQualityConfig(
        classifier=ClassifierSpec(positives=["anchor"], keep_top_fraction=0.5), perplexity=None
    )
    result = scored_filter(config, web["web"], {"classifier": web["classifier"]}, tmp_path / "out")
    kept = _read(tmp_path / "out" / "train.jsonl") + _read(tmp_path / "out" / "heldout.jsonl")
    n = result["counts"]["docs_in"]  # the 120 documents less the join's duplicates
    assert 115 <= n <= 120 and len(kept) == math.ceil(0.5 * n)  # exactly the top half, train and held-out together
    # each kept document stays in its shard's part: part i holds documents of input file i only
    for shard in range(3):
        rows = _read(tmp_path / "out" / f"part{shard}" / "train.jsonl")
        rows += _read(tmp_path / "out" / f"part{shard}" / "heldout.jsonl")
        assert rows and all(row["id"].startswith(f"{shard}.jsonl:") for row in rows)
    assert sum(row["text"] in DOCS for row in kept) >= 55  # the documentation, not the soup
    assert all(0 <= row["quality_score"] <= 1 for row in kept)
    row = result["steps"][-1]
    assert (row["step"], row["docs_in"], row["docs_out"], row["reasons"]) == (
        "classifier",
        n,
        len(kept),
        {"low_score": n - len(kept)},
    )
    assert min(r["quality_score"] for r in kept) == row["threshold"]
    assert sum(row["histogram"]["counts"]) == n
    dropped = _read(tmp_path / "out" / "dropped.jsonl")
    assert len(dropped) == 2 and all(
        d["reason"] == "low_score" and d["quality_score"] < row["threshold"] for d in dropped
    )


def test_perplexity_keeps_what_the_reference_predicts(web: dict, tmp_path: Path) -> None:
    config = FilterQualityConfig(
        classifier=None, perplexity=PerplexitySpec(reference=["anchor"], keep_percentiles=(0, 50))
    )
    result = scored_filter(config, web["web"], {"ngram_lm": web["lm"]}, tmp_path / "out")
    kept = _read(tmp_path / "out" / "train.jsonl") + _read(tmp_path / "out" / "heldout.jsonl")
    assert 55 <= len(kept) <= 65 and sum(row["text"] in DOCS for row in kept) >= 55
    low, high = result["steps"][-1]["keep_range"]
    assert all(low <= row["perplexity"] <= high for row in kept)
    assert "quality_score" not in kept[0]


def test_the_kept_documents_do_not_depend_on_the_shards(web: dict, tmp_path: Path) -> None:
    """Both filters over the source in 3 shards (3 scoring and 3 filter jobs) and in 1: the same documents,
    byte for byte, and the same dropped sample; the cut is set over the whole source."""
    config = FilterQualityConfig(
        classifier=ClassifierSpec(positives=["anchor"], keep_top_fraction=0.6),
        perplexity=PerplexitySpec(reference=["anchor"], keep_percentiles=(0, 80)),
    )
    models = {"classifier": web["classifier"], "ngram_lm": web["lm"]}
    parted = scored_filter(config, web["web"], models, tmp_path / "parted")
    single = scored_filter(config, web["web1"], models, tmp_path / "single")
    assert parted["steps"] == single["steps"] and parted["counts"] == single["counts"]
    for name in ("train.jsonl", "heldout.jsonl", "dropped.jsonl"):
        assert (tmp_path / "parted" / name).read_bytes() == (tmp_path / "single" / name).read_bytes(), name
    reasons = {(row["step"], row["reason"]) for row in _read(tmp_path / "parted" / "dropped.jsonl")}
    assert {("perplexity", "perplexity_high"), ("classifier", "low_score")} <= reasons
    assert len(_read(tmp_path / "parted" / "part1" / "train.jsonl")) < len(_read(tmp_path / "single" / "train.jsonl"))
    # a score shard that does not match its shard's documents is named
    (tmp_path / "parted-scores1" / "scores.npy").write_bytes((tmp_path / "single-scores0" / "scores.npy").read_bytes())
    inputs = {"source": web["web"]["source"], **{f"scores{i}": tmp_path / f"parted-scores{i}" for i in range(3)}}
    with pytest.raises(ValueError, match="scores.npy: .* not the .* documents of shard 1"):
        filter_quality(config, inputs, tmp_path / "again")


def test_a_threshold_nothing_passes_is_a_clear_error(web: dict, tmp_path: Path) -> None:
    config = FilterQualityConfig(classifier=ClassifierSpec(positives=["anchor"], keep_threshold=1.0), perplexity=None)
    trained = json.loads((web["web"]["source"] / "stats.json").read_text())["counts"]["docs_train"]
    with pytest.raises(UserError, match=f"kept none of the source's {trained} training documents"):
        scored_filter(config, web["web"], {"classifier": web["classifier"]}, tmp_path / "out", "web")
    assert not (tmp_path / "out" / "quality" / "quality.npy").exists()


def test_an_anchor_with_too_few_documents_is_a_clear_error(web: dict, tmp_path: Path) -> None:
    few = curated_source(tmp_path, "few", [DOCS[0]] * 3)  # three copies: one document after exact dedup
    with pytest.raises(UserError, match=r"data.sources.web.curate.classifier.positives: 1 curated document"):
        train_classifier_stage(
            classifier_config(), joined("positive0", few) | joined("negatives", web["web"]), tmp_path / "m", "web"
        )
