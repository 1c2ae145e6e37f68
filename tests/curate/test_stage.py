import json
from pathlib import Path

import pytest

from runlib.curate.counts import CountsError, validate_counts
from runlib.curate.stage import (
    curate_shard,
    gopher_quality_reason,
    gopher_repetition_reason,
    mask_pii,
    normalize_text,
)
from runlib.errors import UserError
from runlib.util.hashing import file_digest
from tests.curate import (
    PROSE,
    jsonl_source,
    make_spec,
    read_lines,
    run_source,
    shard_config,
    write_jsonl,
)

# ------------------------------------------------------------------------------------------- shards


def test_shard_writes_docs_with_ids_and_hashes():
    write_jsonl("data/a.jsonl", ["alpha", "beta"])
    spec = make_spec({"web": jsonl_source()})
    result = curate_shard(shard_config(spec, "web", 0, 1, ["data/a.jsonl"]), Path("out"), "web")
    rows = read_lines("out/docs.jsonl")
    assert [r["id"] for r in rows] == ["a.jsonl:1", "a.jsonl:2"]
    assert [r["text"] for r in rows] == ["alpha", "beta"]
    import hashlib

    assert rows[0]["sha256"] == hashlib.sha256(b"alpha").hexdigest()
    assert result["counts"] == {"docs_read": 2, "chars_read": 9, "docs": 2, "chars": 9, "docs_repaired": 0}
    assert [s["step"] for s in result["steps"]] == ["normalize", "length", "exact_dedup"]
    assert json.loads(Path("out/stats.json").read_text()) == result
    prov = result["provenance"]["files"][0]
    assert prov == {
        "path": "data/a.jsonl",
        "bytes": Path("data/a.jsonl").stat().st_size,
        "digest": file_digest("data/a.jsonl"),
    }


def test_normalization_nfkc_nfc_nul_newlines():
    assert normalize_text("\ufb01le\r\nx\ry\x00z", "NFKC") == "file\nx\nyz"
    assert normalize_text("\ufb01", "NFC") == "\ufb01"
    assert normalize_text("e\u0301", "NFC") == "\u00e9"
    assert normalize_text("e\u0301", "none") == "e\u0301"
    assert normalize_text("a\ud800b", "NFC") == "a\ufffdb"  # a lone surrogate from a JSON escape
    write_jsonl("data/a.jsonl", ["\ufb01ne"])
    spec = make_spec({"web": jsonl_source(normalize="NFKC")})
    result = curate_shard(shard_config(spec, "web", 0, 1, ["data/a.jsonl"]), Path("out"), "web")
    assert read_lines("out/docs.jsonl")[0]["text"] == "fine"
    norm = result["steps"][0]
    assert norm["step"] == "normalize" and norm["chars_in"] == 3 and norm["chars_out"] == 4  # NFKC may add chars


def test_length_filter():
    write_jsonl("data/a.jsonl", ["x" * 5, "x" * 10, "x" * 20, "   \n ", ""])
    spec = make_spec({"web": jsonl_source(min_chars=10, max_chars=15)})
    result = curate_shard(shard_config(spec, "web", 0, 1, ["data/a.jsonl"]), Path("out"), "web")
    assert [len(r["text"]) for r in read_lines("out/docs.jsonl")] == [10]
    length = result["steps"][1]
    assert length["reasons"] == {"too_long": 1, "too_short": 3}
    # with min_chars 0, empty and whitespace-only documents still go
    spec = make_spec({"web": jsonl_source()})
    result = curate_shard(shard_config(spec, "web", 0, 1, ["data/a.jsonl"]), Path("out2"), "web")
    assert result["steps"][1]["reasons"] == {"empty": 2}


def test_exact_dedup_within_and_across_shards():
    write_jsonl("data/a.jsonl", ["same", "one", "same"])
    write_jsonl("data/b.jsonl", ["two", "one", "three", "four", "five"])
    spec = make_spec({"web": jsonl_source()}, heldout_docs=2)
    shards, source = run_source(spec, "web", [["data/a.jsonl"], ["data/b.jsonl"]])
    assert shards[0]["counts"]["docs"] == 2  # "same" once
    assert shards[1]["counts"]["docs"] == 5
    steps = {s["step"]: s for s in source["steps"]}
    assert steps["exact_dedup"]["docs_in"] == 8 and steps["exact_dedup"]["docs_out"] == 7
    assert steps["cross_shard_dedup"]["docs_in"] == 7 and steps["cross_shard_dedup"]["docs_out"] == 6
    assert steps["cross_shard_dedup"]["reasons"] == {"duplicate": 1}
    texts = [r["text"] for r in read_lines("out/source/train.jsonl") + read_lines("out/source/heldout.jsonl")]
    assert sorted(texts) == sorted(["same", "one", "two", "three", "four", "five"])
    # first occurrence wins: "one" keeps the id from shard 0
    ids = {r["text"]: r["id"] for r in read_lines("out/source/train.jsonl") + read_lines("out/source/heldout.jsonl")}
    assert ids["one"] == "a.jsonl:2"


def test_dedup_off_keeps_duplicates_but_not_heldout_copies():
    write_jsonl("data/a.jsonl", ["dup", "dup", "u1", "u2", "u3"])
    spec = make_spec({"web": jsonl_source(dedup={"exact": False})}, heldout_docs=4)
    _, source = run_source(spec, "web", [["data/a.jsonl"]])
    assert "exact_dedup" not in [s["step"] for s in source["steps"]]
    train = {r["text"] for r in read_lines("out/source/train.jsonl")}
    held = {r["text"] for r in read_lines("out/source/heldout.jsonl")}
    assert not train & held


def test_heldout_split_exact_disjoint_stable():
    texts = [f"document number {i}" for i in range(30)]
    write_jsonl("data/a.jsonl", texts[:15])
    write_jsonl("data/b.jsonl", texts[15:])
    spec = make_spec({"web": jsonl_source()}, heldout_docs=5)
    _, source = run_source(spec, "web", [["data/a.jsonl"], ["data/b.jsonl"]])
    train, held = read_lines("out/source/train.jsonl"), read_lines("out/source/heldout.jsonl")
    assert len(held) == 5 == source["counts"]["docs_heldout"]
    assert len(train) == 25 == source["counts"]["docs_train"]
    assert not {r["sha256"] for r in train} & {r["sha256"] for r in held}
    assert {r["sha256"] for r in held} == set(sorted(r["sha256"] for r in train + held)[:5])
    assert [r["text"] for r in train] == [t for t in texts if t not in {r["text"] for r in held}]  # input order
    assert source["counts"]["chars_train"] + source["counts"]["chars_heldout"] == sum(map(len, texts))
    # the held-out set depends on the texts only: the same with one shard
    _, again = run_source(spec, "web", [["data/a.jsonl", "data/b.jsonl"]], out="out1")
    assert read_lines("out1/source/heldout.jsonl") == held
    assert Path("out1/source/train.jsonl").read_bytes() == Path("out/source/train.jsonl").read_bytes()


def test_too_few_documents_for_heldout():
    write_jsonl("data/a.jsonl", ["a", "b", "c"])
    spec = make_spec({"web": jsonl_source()}, heldout_docs=3)
    with pytest.raises(UserError) as err:
        run_source(spec, "web", [["data/a.jsonl"]])
    msg = str(err.value)
    assert "data.heldout_docs" in msg and "'web'" in msg and "3 document" in msg and "lower" in msg


def test_no_documents_names_source_and_input():
    write_jsonl("data/a.jsonl", ["short", "tiny"])
    spec = make_spec({"web": jsonl_source(min_chars=100)})
    with pytest.raises(UserError) as err:
        run_source(spec, "web", [["data/a.jsonl"]])
    msg = str(err.value)
    assert "data.sources.web" in msg and "data/*.jsonl" in msg and "length 2->0" in msg


def test_builtin_shards_cover_every_document_once():
    spec = make_spec(
        {"arith": {"domain": "synthetic", "input": {"format": "builtin", "name": "arithmetic", "max_docs": 101}}},
        heldout_docs=3,
    )
    shards, source = run_source(spec, "arith", [[], [], []])
    ids = [r["id"] for i in range(3) for r in read_lines(f"out/shard{i}/docs.jsonl")]
    assert sorted(ids) == sorted(f"arithmetic:{i}" for i in range(101))
    assert read_lines("out/shard1/docs.jsonl")[0]["id"] == "arithmetic:1"  # shard i takes i::n
    assert source["counts"]["docs_train"] + source["counts"]["docs_heldout"] == 101
    assert shards[0]["provenance"]["kind"] == "arithmetic"


def test_file_shards_respect_max_docs_per_shard():
    write_jsonl("data/a.jsonl", [f"a{i}" for i in range(10)])
    write_jsonl("data/b.jsonl", [f"b{i}" for i in range(10)])
    spec = make_spec({"web": {**jsonl_source(), "input": {"format": "jsonl", "path": "data/*.jsonl", "max_docs": 5}}})
    shards, _ = run_source(spec, "web", [["data/a.jsonl"], ["data/b.jsonl"]])
    assert [s["counts"]["docs_read"] for s in shards] == [3, 3]  # ceil(5 / 2)


def test_unknown_language_is_an_error():
    write_jsonl("data/a.jsonl", ["x"])
    spec = make_spec({"web": jsonl_source(languages=["en", "xx"])})
    with pytest.raises(UserError, match=r"data\.sources\.web\.curate\.languages: 'xx' not known"):
        curate_shard(shard_config(spec, "web", 0, 1, ["data/a.jsonl"]), Path("out"), "web")


def test_bad_shard():
    spec = make_spec({"web": jsonl_source()})
    with pytest.raises(ValueError):
        curate_shard(shard_config(spec, "web", 2, 2, []), Path("out"), "web")


# ------------------------------------------------------------------------------------------------ PII


def test_pii_mask():
    text = "Write to Jane.Doe@Mail.com or bob@example.org; server 8.8.8.8, router 192.168.1.1, version 1.2.3.4.5"
    masked, counts = mask_pii(text)
    assert counts == {"email": 2, "ipv4": 1, "ipv6": 0, "phone": 0, "card": 0}
    assert "Jane.Doe" not in masked and "bob@" not in masked and "8.8.8.8" not in masked
    assert "email@example.com" in masked and "firstname.lastname@example.org" in masked
    assert "192.168.1.1" in masked and "1.2.3.4.5" in masked  # private address and a version string stay


def test_pii_steps_in_the_table():
    texts = ["mail me: someone@somewhere.net", "nothing here", "ip 8.8.4.4", "call +44 20 7946 0958 or 415-555-0132"]
    write_jsonl("data/a.jsonl", texts)
    spec = make_spec({"web": jsonl_source(pii="mask")})
    result = curate_shard(shard_config(spec, "web", 0, 1, ["data/a.jsonl"]), Path("out"), "web")
    step = next(s for s in result["steps"] if s["step"] == "pii_mask")
    assert step["kind"] == "transform"
    assert step["reasons"] == {"email": 1, "ipv4": 1, "ipv6": 0, "phone": 2, "card": 0, "docs_changed": 3}
    assert "someone@" not in Path("out/docs.jsonl").read_text()
    spec = make_spec({"web": jsonl_source(pii="drop")})
    result = curate_shard(shard_config(spec, "web", 0, 1, ["data/a.jsonl"]), Path("out2"), "web")
    step = next(s for s in result["steps"] if s["step"] == "pii_drop")
    assert step["docs_in"] == 4 and step["docs_out"] == 1
    assert step["reasons"] == {"pii_email": 1, "pii_ipv4": 1, "pii_phone": 1}
    assert [r["text"] for r in read_lines("out2/docs.jsonl")] == ["nothing here"]


# --------------------------------------------------------------------------------------------- Gopher


def test_gopher_rules():
    assert gopher_quality_reason(PROSE) is None
    assert gopher_repetition_reason(PROSE) is None
    assert gopher_quality_reason("too few words here") == "too_few_words"
    assert gopher_quality_reason("#tag " * 60) == "hash_ratio"
    assert gopher_quality_reason("- item and the thing of it\n" * 60) == "bullet_lines"
    assert gopher_quality_reason(" ".join(["1234"] * 60)) == "alpha_words"
    assert gopher_quality_reason(" ".join(["word"] * 60)) == "stop_words"
    assert gopher_quality_reason(" ".join(["extraordinarily"] * 60)) == "mean_word_length"
    assert gopher_repetition_reason((PROSE + "\n\n") * 3) == "dup_paragraphs"
    assert gopher_repetition_reason("\n".join([PROSE, "a line", "a line", "a line", "b line"])) == "dup_lines"
    spam = " ".join(["buy cheap pills now"] * 40)
    assert gopher_repetition_reason(spam) == "top_2gram"


def test_gopher_steps_in_the_table():
    write_jsonl("data/a.jsonl", [PROSE, "short one", (PROSE + "\n\n") * 3])
    spec = make_spec({"web": jsonl_source(quality=["gopher"])})
    result = curate_shard(shard_config(spec, "web", 0, 1, ["data/a.jsonl"]), Path("out"), "web")
    steps = {s["step"]: s for s in result["steps"]}
    assert steps["gopher_quality"]["reasons"] == {"too_few_words": 1}
    assert steps["gopher_repetition"]["reasons"] == {"dup_paragraphs": 1}
    assert [r["text"] for r in read_lines("out/docs.jsonl")] == [PROSE]


# --------------------------------------------------------------------------------------------- counts


def rows(*specs):
    return [dict(zip(("step", "kind", "docs_in", "docs_out", "chars_in", "chars_out"), s, strict=True)) for s in specs]


def test_counts_accepts_a_consistent_table():
    validate_counts(rows(("normalize", "transform", 10, 10, 100, 104), ("length", "filter", 10, 8, 104, 90)))
    validate_counts([])


@pytest.mark.parametrize(
    "table, needle",
    [
        (rows(("a", "filter", 10, 11, 100, 90)), "cannot create documents"),
        (rows(("a", "filter", 10, 9, 100, 101)), "chars_out <= chars_in"),
        (rows(("a", "transform", 10, 9, 100, 90)), "keeps every document"),
        (rows(("a", "filter", 10, 9, 100, 90), ("b", "filter", 8, 8, 90, 90)), "previous step"),
        (rows(("a", "filter", -1, -1, 0, 0)), "greater_than_or_equal_to"),
        (rows(("a", "sorter", 1, 1, 1, 1)), "isin"),
        (rows(("a", "filter", 1, 1, 1, 1), ("a", "filter", 1, 1, 1, 1)), "unique"),
    ],
)
def test_counts_rejects_an_inconsistent_table(table, needle):
    with pytest.raises(CountsError, match=needle):
        validate_counts(table)


def test_counts_requires_columns():
    with pytest.raises(CountsError, match="kind"):
        validate_counts([{"step": "a", "docs_in": 1, "docs_out": 1, "chars_in": 1, "chars_out": 1}])


def test_docs_lines_survive_splitlines():
    text = "a\u2028b\u2029c\x85d\x0be\x1cf\r\ng"
    write_jsonl("data/a.jsonl", [text])
    spec = make_spec({"web": jsonl_source()})
    curate_shard(shard_config(spec, "web", 0, 1, ["data/a.jsonl"]), Path("out"), "web")
    lines = Path("out/docs.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["text"] == text.replace("\r\n", "\n")


# -------------------------------------------------------------------------------------- text repairs


def test_invalid_utf8_in_text_files_is_repaired_and_counted():
    """Issue 8, problem 6: a text source's invalid UTF-8 was replaced silently."""
    Path("txt").mkdir()
    Path("txt/a.txt").write_text("clean text with a real \ufffd in it", encoding="utf-8")
    Path("txt/b.txt").write_bytes(b"caf\xe9 au lait, \xff\xfe and \xe2\x82 cut")  # 4 invalid sequences
    Path("txt/c.txt").write_bytes(b"also bad \xc3")
    spec = make_spec({"web": {"domain": "web", "input": {"format": "text", "path": "txt"}}}, heldout_docs=0)
    shards, source = run_source(spec, "web", [["txt/a.txt", "txt/b.txt"], ["txt/c.txt"]])
    normalize = shards[0]["steps"][0]
    assert normalize["step"] == "normalize"
    assert normalize["reasons"] == {
        "invalid_utf8": 1,
        "invalid_utf8_sequences": 4,
        "lone_surrogates": 0,
        "lone_surrogate_chars": 0,
    }
    assert [s["counts"]["docs_repaired"] for s in shards] == [1, 1]
    assert source["counts"]["docs_repaired"] == 2
    joined = source["steps"][0]
    assert joined["step"] == "normalize" and joined["reasons"]["invalid_utf8"] == 2
    assert joined["reasons"]["invalid_utf8_sequences"] == 5
    texts = {r["id"]: r["text"] for r in read_lines("out/source/train.jsonl")}
    assert texts["b.txt"] == "caf\ufffd au lait, \ufffd\ufffd and \ufffd cut"


def test_lone_surrogates_in_jsonl_are_repaired_and_counted():
    """A JSON "\\ud800" escape is valid JSON but no Unicode character: replaced by U+FFFD and counted."""
    Path("data").mkdir()
    lines = [
        r'{"text": "high \ud800 and low \udc00 alone"}',
        r'{"text": "a pair \ud83d\ude00 is one character"}',
        r'{"text": "nothing to repair"}',
    ]
    Path("data/a.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    spec = make_spec({"web": jsonl_source()}, heldout_docs=0)
    result = curate_shard(shard_config(spec, "web", 0, 1, ["data/a.jsonl"]), Path("out"), "web")
    assert result["steps"][0]["reasons"] == {
        "invalid_utf8": 0,
        "invalid_utf8_sequences": 0,
        "lone_surrogates": 1,
        "lone_surrogate_chars": 2,
    }
    assert result["counts"]["docs_repaired"] == 1
    texts = [r["text"] for r in read_lines("out/docs.jsonl")]
    assert texts[:2] == ["high \ufffd and low \ufffd alone", "a pair \U0001f600 is one character"]


def test_a_file_changed_after_its_key_was_computed_is_refused():
    write_jsonl("data/a.jsonl", ["alpha", "beta"])
    spec = make_spec({"web": jsonl_source()})
    config = shard_config(spec, "web", 0, 1, ["data/a.jsonl"])
    write_jsonl("data/a.jsonl", ["alpha", "gamma"])
    with pytest.raises(UserError, match=r"data/a\.jsonl changed since this stage's key was computed"):
        curate_shard(config, Path("out"), "web")
    assert not Path("out/docs.jsonl").exists()
