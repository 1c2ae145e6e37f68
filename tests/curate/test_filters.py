import hashlib
import random
from pathlib import Path

import numpy as np
import pytest

from runlib.curate.counts import validate_counts
from runlib.curate.filters import c4_filter, fineweb_quality_reason, identify_language
from runlib.curate.minhash import duplicates, shingle_hashes, signatures, simplify_text
from runlib.curate.stage import curate_shard
from tests.curate import (
    PROSE,
    jsonl_source,
    make_spec,
    read_lines,
    run_partitions,
    run_source,
    shard_config,
    write_jsonl,
)

GERMAN = (
    "Die Geschichte des Flusstals ist eine Geschichte des langsamen Wandels. Bauern kamen an die Ufer und bauten "
    "ihre Häuser aus Steinen, die sie von den Hügeln herabtrugen, und über viele Jahre wuchsen die Dörfer zu "
    "Städten, die entlang des Wassers miteinander Handel trieben."
)
C4_CLEAN = "\n".join(
    [
        "The river rose in the spring. The farmers moved their animals to higher ground.",
        "By summer the water had gone down again. The fields were green and the harvest was good.",
        "Traders came up the valley in the autumn. They bought grain and sold salt and iron tools.",
    ]
)
_LETTERS = random.Random(42)
VOCAB = ["".join(_LETTERS.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(7)) for _ in range(5000)]  # no digits:
# simplify_text turns every digit run into "0"


def random_doc(rng, words=200):
    return " ".join(rng.choice(VOCAB) for _ in range(words))


def one_word_changed(text, rng):
    words = text.split()
    words[rng.randrange(len(words))] = "changed"
    return " ".join(words)


# ---------------------------------------------------------------------------------------------- C4


def test_c4_keeps_a_clean_document_and_removes_bad_lines():
    assert c4_filter(C4_CLEAN) == (None, C4_CLEAN, {})
    noisy = "\n".join(
        [
            C4_CLEAN,
            "Home | About | Contact",  # no terminal punctuation
            "Click here.",  # fewer than 3 words
            "Please enable JavaScript to view this page.",
            "By using this site you agree to our privacy policy.",
            "The town grew around the old bridge[12].",  # citation removed, line kept
        ]
    )
    reason, text, dropped = c4_filter(noisy)
    assert reason is None
    assert text == C4_CLEAN + "\nThe town grew around the old bridge."
    assert dropped == {"no_terminal_punct": 1, "too_few_words": 1, "javascript": 1, "policy": 1}


@pytest.mark.parametrize(
    "text, reason",
    [
        (C4_CLEAN + "\nLorem ipsum dolor sit amet, consectetur.", "lorem_ipsum"),
        (C4_CLEAN + "\nfunction f() { return the value; }.", "curly_bracket"),
        ("One sentence here. Two sentences here.\nThree is here.", "too_few_sentences"),
        ("no punctuation at all on this line\nnor on this one", "too_few_sentences"),
    ],
)
def test_c4_drops_documents(text, reason):
    assert c4_filter(text)[0] == reason


def test_c4_steps_in_the_table():
    noisy = C4_CLEAN + "\nHome | About | Contact"
    write_jsonl("data/a.jsonl", [noisy, "Just one sentence.", C4_CLEAN + "\nvar x = {a: 1}."])
    spec = make_spec({"web": jsonl_source(quality=["c4"])})
    result = curate_shard(shard_config(spec, "web", 0, 1, ["data/a.jsonl"]), Path("out"), "web")
    steps = {s["step"]: s for s in result["steps"]}
    assert steps["c4_quality"]["kind"] == "filter" and steps["c4_quality"]["docs_out"] == 1
    assert steps["c4_quality"]["reasons"] == {"curly_bracket": 1, "too_few_sentences": 1}
    lines = steps["c4_lines"]
    assert lines["kind"] == "transform" and lines["reasons"] == {"no_terminal_punct": 1, "docs_changed": 1}
    assert lines["chars_in"] == len(noisy) and lines["chars_out"] == len(C4_CLEAN)
    assert [r["text"] for r in read_lines("out/docs.jsonl")] == [C4_CLEAN]
    validate_counts(result["steps"])


# ----------------------------------------------------------------------------------------- FineWeb


def test_fineweb_rules():
    assert fineweb_quality_reason(PROSE) is None
    assert fineweb_quality_reason(C4_CLEAN) is None
    menu = "\n".join(f"Menu item number {i} of the site navigation bar" for i in range(20))
    assert fineweb_quality_reason(menu) == "line_punct_ratio"  # no line ends a sentence
    short = "\n".join(["Yes.", "No.", "Maybe so.", PROSE])
    assert fineweb_quality_reason(short) == "short_line_ratio"  # 3 of 4 lines <= 30 chars
    assert (
        fineweb_quality_reason(PROSE + "\nThe end of the story came.\nThe end of the story came.") == "char_dup_ratio"
    )
    listing = "\n".join(f"Item {i} is fine and good to use." for i in range(3)) + "\n" * 10
    assert fineweb_quality_reason(listing) == "list_ratio"


def test_fineweb_step_in_the_table():
    menu = "\n".join(f"Menu item number {i} of the site navigation bar" for i in range(20))
    write_jsonl("data/a.jsonl", [PROSE, menu])
    spec = make_spec({"web": jsonl_source(quality=["fineweb", "gopher", "c4"])})
    result = curate_shard(shard_config(spec, "web", 0, 1, ["data/a.jsonl"]), Path("out"), "web")
    names = [s["step"] for s in result["steps"]]
    assert names.index("gopher_quality") < names.index("c4_quality") < names.index("fineweb_quality")
    spec = make_spec({"web": jsonl_source(quality=["fineweb"])})
    result = curate_shard(shard_config(spec, "web", 0, 1, ["data/a.jsonl"]), Path("out2"), "web")
    step = next(s for s in result["steps"] if s["step"] == "fineweb_quality")
    assert step["kind"] == "filter" and step["reasons"] == {"line_punct_ratio": 1}
    assert [r["text"] for r in read_lines("out2/docs.jsonl")] == [PROSE]
    validate_counts(result["steps"])


# --------------------------------------------------------------------------------------- languages


def test_language_filter_keeps_english_drops_german():
    assert identify_language(PROSE)[0] == "en" and identify_language(GERMAN)[0] == "de"
    write_jsonl("data/a.jsonl", [PROSE, GERMAN])
    spec = make_spec({"web": jsonl_source(languages=["en"])})
    result = curate_shard(shard_config(spec, "web", 0, 1, ["data/a.jsonl"]), Path("out"), "web")
    step = next(s for s in result["steps"] if s["step"] == "language")
    assert step["kind"] == "filter" and step["reasons"] == {"lang_de": 1} and step["min_probability"] == 0.65
    assert [r["text"] for r in read_lines("out/docs.jsonl")] == [PROSE]
    validate_counts(result["steps"])
    spec = make_spec({"web": jsonl_source(languages=["de", "en"])})
    result = curate_shard(shard_config(spec, "web", 0, 1, ["data/a.jsonl"]), Path("out2"), "web")
    assert len(read_lines("out2/docs.jsonl")) == 2


# ----------------------------------------------------------------------------------------- MinHash


def test_simplify_and_shingles():
    assert simplify_text("Caf\u00e9 costs 3.50, OK?\n  Yes!") == "cafe costs 0 ok yes"
    assert len(shingle_hashes("a b c d e f g", 5)) == 3
    assert len(shingle_hashes("a b", 5)) == 1 and len(shingle_hashes("", 5)) == 1
    assert np.array_equal(shingle_hashes("A b, c d e!", 5), shingle_hashes("a b c d e", 5))
    assert shingle_hashes("a b c d e", 5)[0] != shingle_hashes("e d c b a", 5)[0]


def test_signatures_are_stable_and_estimate_similarity():
    rng = random.Random(0)
    base = random_doc(rng, 400)
    texts = [base, one_word_changed(base, rng), random_doc(rng, 400)]
    sigs = signatures(texts, 5, 112)
    assert sigs.shape == (3, 112) and sigs.dtype == np.uint64
    assert np.array_equal(sigs, signatures(texts, 5, 112))
    assert np.array_equal(sigs[:1], signatures(texts[:1], 5, 112))  # independent of the batch
    assert (sigs[0] == sigs[1]).mean() > 0.85 and (sigs[0] == sigs[2]).mean() < 0.05
    assert duplicates(sigs, 14, 8).tolist() == [False, True, False]


def test_duplicates_union_find_keeps_the_first_of_a_cluster():
    sigs = np.array([[1, 9], [2, 8], [1, 7], [3, 7], [4, 6]], dtype=np.uint64)  # 0~2 (band 0), 2~3 (band 1)
    assert duplicates(sigs, 2, 1).tolist() == [False, False, True, True, False]
    assert duplicates(np.empty((0, 2), dtype=np.uint64), 2, 1).tolist() == []


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_minhash_dedup_across_shards():
    rng = random.Random(1)
    distinct = [random_doc(rng) for _ in range(40)]
    near = [one_word_changed(distinct[3], rng), one_word_changed(distinct[25], rng)]
    write_jsonl("data/a.jsonl", distinct[:20] + near[1:])  # the copy of a shard-b document comes first
    write_jsonl("data/b.jsonl", distinct[20:] + near[:1])
    spec = make_spec({"web": jsonl_source(dedup={"minhash": {}})}, heldout_docs=5)
    shards, source = run_source(spec, "web", [["data/a.jsonl"], ["data/b.jsonl"]])
    assert np.load("out/shard0/bands.npy").shape == (20, 21)  # the default 20 bands (of 5 rows) x 21 documents
    step = next(s for s in source["steps"] if s["step"] == "minhash_dedup")
    assert step["kind"] == "filter" and step["docs_in"] == 42 and step["docs_out"] == 40
    names = [s["step"] for s in source["steps"]]
    assert names.index("cross_shard_dedup") < names.index("minhash_dedup") < names.index("heldout_split")
    texts = [r["text"] for r in read_lines("out/source/train.jsonl") + read_lines("out/source/heldout.jsonl")]
    # of each near-duplicate pair, the text with the smaller SHA-256 stays, wherever its shard and line
    first = [min(distinct[3], near[0], key=_sha), min(distinct[25], near[1], key=_sha)]
    assert sorted(texts) == sorted(
        [t for t in distinct + near if t not in (distinct[3], near[0], distinct[25], near[1])] + first
    )
    validate_counts(source["steps"])
    # the same input gives the same output
    run_source(spec, "web", [["data/a.jsonl"], ["data/b.jsonl"]], out="again")
    for name in ("train.jsonl", "heldout.jsonl", "stats.json"):
        assert Path("again/source", name).read_bytes() == Path("out/source", name).read_bytes()
    # the shards were built for another bands * rows: an error, not a silent mismatch
    other = make_spec({"web": jsonl_source(dedup={"minhash": {"bands": 10}})}, heldout_docs=5)
    with pytest.raises(ValueError, match="rebuild the shards"):
        run_partitions(other, "web", [Path("out/shard0"), Path("out/shard1")], "other")
