"""runlib.curate.classifier: a fastText quality classifier trained on curated anchors against web boilerplate
separates held-out and unseen text, is byte-deterministic for the same documents and seed, scores text with
newlines, and refuses broken model files with a ValueError naming them (before fastText can hang or crash)."""

from __future__ import annotations

import hashlib
import importlib
import inspect
import random
import re
import struct
from pathlib import Path

import pytest

from runlib.curate import classifier
from runlib.curate.classifier import load_classifier, score_texts, train_classifier

# small settings for the tests: DCLM's dim 100 and 2M buckets make an 800 MB model
SMALL = {"dim": 16, "bucket": 1 << 14, "epoch": 10, "lr": 0.5}
TRAIN_MODULES = ["argparse", "collections", "json", "pathlib", "statistics", "textwrap", "difflib", "fractions"]
TRAIN_MODULES += ["decimal", "functools", "inspect", "logging", "subprocess", "enum", "dataclasses"]
NEW_MODULES = ["calendar", "zipfile", "tarfile", "csv", "shutil", "configparser", "smtplib"]


def _documented(member: object) -> bool:
    return inspect.isroutine(member) or isinstance(member, property)


def docstrings(modules: list[str], min_words: int = 15) -> list[str]:
    """Technical English prose: the docstrings of the standard library's public functions, classes, methods."""
    out: dict[str, None] = {}
    for name in modules:
        module = importlib.import_module(name)
        for attr, obj in sorted(vars(module).items()):
            if attr.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                continue
            members = [obj]
            if inspect.isclass(obj):  # its methods and properties (not constants: those would give str's doc)
                members += [m for k, m in sorted(vars(obj).items()) if not k.startswith("_") and _documented(m)]
            for member in members:
                doc = inspect.getdoc(member)
                if doc and len(doc.split()) >= min_words:
                    out[doc] = None
    return list(out)


PRODUCTS = ["viagra", "replica watches", "payday loans", "casino bonus", "cheap flights", "weight loss pills"]
PRODUCTS += ["crypto signals", "phone cases", "gift cards", "essay writing", "followers", "led lights"]
CITIES = ["london", "miami", "dubai", "toronto", "sydney", "berlin", "mumbai", "dallas", "paris", "lagos"]
TEMPLATES = [
    "Home | About Us | Contact | Privacy Policy | Terms of Service | Sitemap",
    "Buy cheap {p} online! Best price guaranteed. Free shipping to {c}. Click here to order now!!!",
    "{p} {p} {c} cheap {p} discount {c} best {p} deals {n} top {p} near me",
    "We use cookies to improve your experience. By continuing to browse you accept our cookie policy. Accept all",
    "Copyright {n} {c} {p} Ltd. All rights reserved. Login | Register | Forgot password?",
    "Hot offer in {c}! Win free {p} now, limited time, only {n} left! Subscribe to our newsletter",
    "Tags: {p}, {p} {c}, buy {p}, {p} sale, {p} review, {p} coupon code {n}",
    "Share on Facebook Tweet Pin it WhatsApp Email | {n} comments | Read more >>",
]


def spam(n: int, seed: int, products: list[str] = PRODUCTS, cities: list[str] = CITIES) -> list[str]:
    """Web boilerplate and spam pages: 3 to 6 template lines each, joined by newlines as extracted pages are."""
    rng = random.Random(seed)
    pages = []
    for _ in range(n):
        lines = rng.sample(TEMPLATES, rng.randint(3, 6))
        fill = [t.format(p=rng.choice(products), c=rng.choice(cities), n=rng.randint(2, 2025)) for t in lines]
        pages.append("\n".join(fill))
    return pages


@pytest.fixture(scope="module")
def corpus() -> tuple[list[str], list[str]]:
    positives = docstrings(TRAIN_MODULES)
    return positives, spam(len(positives), seed=1)


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory) -> tuple[Path, dict[str, float | int]]:
    positives, negatives = corpus
    path = tmp_path_factory.mktemp("classifier") / "quality.bin"
    metrics = train_classifier(positives, negatives, path, seed=7, **SMALL)
    return path, metrics


def test_heldout_precision_and_recall_are_high(corpus, trained):
    positives, negatives = corpus
    path, metrics = trained
    assert metrics["precision"] > 0.9 and metrics["recall"] > 0.9, metrics
    assert metrics["f1"] > 0.9 and metrics["accuracy"] > 0.9, metrics
    # 10% held out per class, by hash: the counts add up and the held-out share is floor(n * 0.1) of distinct texts
    assert metrics["train_positives"] + metrics["heldout_positives"] == len(positives)
    assert metrics["train_negatives"] + metrics["heldout_negatives"] == len(negatives)
    assert metrics["heldout_positives"] == len(set(positives)) // 10
    assert path.stat().st_size > 0 and not list(path.parent.glob(".*"))  # no training or temporary file left


def test_positives_score_higher_than_negatives_on_new_text(trained):
    model = load_classifier(trained[0])
    new_pos = docstrings(NEW_MODULES)
    new_neg = spam(100, seed=99, products=["garden tools", "used cars", "hotel rooms"], cities=["oslo", "lima"])
    pos, neg = score_texts(model, new_pos), score_texts(model, new_neg)
    assert all(0.0 <= s <= 1.0 for s in pos + neg)
    assert sum(pos) / len(pos) > 0.8 > 0.2 > sum(neg) / len(neg)
    # ranking: a random unseen docstring outscores a random unseen spam page (AUC)
    auc = sum(p > n for p in pos for n in neg) / (len(pos) * len(neg))
    assert auc > 0.95, auc


def test_same_documents_and_seed_give_the_same_model_bytes(corpus, trained, tmp_path):
    positives, negatives = corpus
    path, metrics = trained
    # another directory and another input order: the split and the line order are keyed by (seed, text)
    again = tmp_path / "sub" / "again.bin"
    metrics_again = train_classifier(positives[::-1], negatives[::-1], again, seed=7, **SMALL)
    assert metrics_again == metrics
    assert hashlib.sha256(again.read_bytes()).digest() == hashlib.sha256(path.read_bytes()).digest()
    texts = positives[:20] + negatives[:20]
    assert score_texts(load_classifier(again), texts) == score_texts(load_classifier(path), texts)
    other = tmp_path / "other_seed.bin"
    train_classifier(positives, negatives, other, seed=8, **SMALL)
    assert other.read_bytes() != path.read_bytes()


def test_scores_are_softmax_probabilities_and_independent_of_the_batch(trained):
    model = load_classifier(trained[0])
    texts = ["Return the number of items in the container.", "Buy cheap gift cards now", "", "   \n "]
    scores = score_texts(model, texts)
    assert scores == [score_texts(model, [t])[0] for t in texts] == score_texts(model, texts[::-1])[::-1]
    for text, score in zip(texts, scores, strict=True):
        # fastText reports p + 1e-5 per label (src/loss.cc std_log); the offset is removed: p(hq) + p(cc) = 1
        probs = dict((label, p) for p, label in model.f.predict(classifier._prepare(text) + "\n", -1, 0.0, "strict"))
        assert abs(score + probs[classifier.NEGATIVE_LABEL] - 1e-5 - 1.0) < 1e-6


def test_text_with_newlines_scores_as_the_joined_line(trained):
    model = load_classifier(trained[0])
    doc = "Return a new path with the suffix changed.\nIf the suffix is empty, it is removed.\r\nSee also\u2028stem."
    joined = "Return a new path with the suffix changed. If the suffix is empty, it is removed. See also stem."
    (score, score_joined) = score_texts(model, [doc, joined])
    assert score == score_joined > 0.5
    # a lone surrogate (pybind11 cannot pass it to fastText as UTF-8) is replaced, as "?"
    assert score_texts(model, ["Return the path \ud800 stem."]) == score_texts(model, ["Return the path ? stem."])


def test_label_words_in_a_document_are_not_labels(trained):
    model = load_classifier(trained[0])
    assert classifier._prepare("x __label__cc\t__label__hq a__label__b") == "x _label__cc\t_label__hq a__label__b"
    text = "Buy cheap gift cards now __label__hq __label__hq"
    assert score_texts(model, [text]) == score_texts(model, [text.replace("__label__", "_label__")])


def test_an_empty_or_too_small_class_is_refused(corpus, tmp_path):
    positives, negatives = corpus
    out = tmp_path / "m.bin"
    with pytest.raises(ValueError, match="positives: no documents"):
        train_classifier([], negatives, out, seed=1, **SMALL)
    with pytest.raises(ValueError, match="negatives: no documents"):
        train_classifier(positives, [], out, seed=1, **SMALL)
    with pytest.raises(ValueError, match=r"negatives: 5 distinct document\(s\) hold out 0 .* at least 10"):
        train_classifier(positives, negatives[:5], out, seed=1, **SMALL)
    with pytest.raises(ValueError, match="at least 10 distinct"):  # copies of one text are one document
        train_classifier(positives, [negatives[0]] * 50, out, seed=1, **SMALL)
    with pytest.raises(TypeError, match="not one string"):
        train_classifier("one document", negatives, out, seed=1, **SMALL)
    with pytest.raises(ValueError, match="heldout_fraction"):
        train_classifier(positives, negatives, out, seed=1, heldout_fraction=0.0, **SMALL)
    assert not out.exists() and not list(tmp_path.iterdir())


def _corruptions(model: bytes) -> dict[str, bytes]:
    dictionary_end = model.index(b"__label__cc\0") + 30  # inside the dictionary or just after it
    args = bytearray(model)
    struct.pack_into("<i", args, 8 + 4 * 7, 2)  # args.model: skipgram, not a supervised classifier
    labels = model.replace(b"__label__hq\0", b"__label__zz\0")
    return {
        "empty": b"",
        "garbage": b"<html><body>not a model</body></html>\n" * 50,
        "magic only": model[:8],
        "header and args": model[:64],
        "cut in the dictionary": model[:120],
        "cut after the dictionary": model[:dictionary_end],
        "cut in the input matrix": model[: len(model) // 2],
        "last byte missing": model[:-1],
        "a byte too many": model + b"\0",
        "newer version": model[:4] + struct.pack("<i", 13) + model[8:],
        "not supervised": bytes(args),
        "other labels": labels,
    }


def test_broken_model_files_raise_a_value_error_naming_the_file(trained, tmp_path):
    model = trained[0].read_bytes()
    for what, data in _corruptions(model).items():
        path = tmp_path / f"{what.replace(' ', '_')}.bin"
        path.write_bytes(data)
        with pytest.raises(ValueError, match=re.escape(str(path))):
            load_classifier(path)
    with pytest.raises(ValueError, match=r"missing\.bin: no such file"):
        load_classifier(tmp_path / "missing.bin")
    with pytest.raises(ValueError, match="is a directory"):
        load_classifier(tmp_path)
    # the process is alive, and a whole copy still loads
    (tmp_path / "whole.bin").write_bytes(model)
    assert score_texts(load_classifier(tmp_path / "whole.bin"), ["fine"])[0] >= 0.0


def test_a_model_written_short_never_replaces_the_old_one(corpus, trained, tmp_path, monkeypatch):
    """fastText does not check its writes (a full disk leaves a short file): the file is walked before the rename."""
    positives, negatives = corpus
    out = tmp_path / "model.bin"
    out.write_bytes(b"the previous model")
    model_class = classifier.fasttext.FastText._FastText
    save = model_class.save_model

    def save_short(self, path: str) -> None:
        save(self, path)
        with open(path, "r+b") as f:
            f.truncate(1000)

    monkeypatch.setattr(model_class, "save_model", save_short)
    with pytest.raises(OSError, match="not written whole"):
        train_classifier(positives, negatives, out, seed=7, **SMALL)
    assert out.read_bytes() == b"the previous model"
    assert [p.name for p in tmp_path.iterdir()] == ["model.bin"]
