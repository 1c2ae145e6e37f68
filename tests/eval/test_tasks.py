"""Downstream tasks: JSONL validation, log-likelihood scoring, acc vs acc_norm, held-out tasks, a trained toy model."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from runlib.errors import UserError
from runlib.eval.tasks import (
    AnswerExample,
    MultipleChoice,
    build_heldout_tasks,
    chance_accuracy,
    continuation_tokens,
    heldout_tasks,
    load_tasks,
    loglikelihoods,
    score_answer_loglik,
    score_multiple_choice,
)
from runlib.tokenizer.train import decode


def tokenize(tok, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False).ids


SENTENCE = "The quick brown fox jumps over the lazy dog. "


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# ----------------------------------------------------------------------------------------- files


def test_load_valid_files(tmp_path) -> None:
    mc = write_lines(
        tmp_path / "mc.jsonl",
        [
            json.dumps({"context": "2 + 2 =", "choices": [" 4", " 5"], "answer": 0, "id": "a"}),
            "",
            json.dumps({"context": "", "choices": ["x", "y", "z"], "answer": 2}),
        ],
    )
    assert load_tasks(mc, "multiple_choice") == [
        MultipleChoice("2 + 2 =", (" 4", " 5"), 0),
        MultipleChoice("", ("x", "y", "z"), 2),
    ]
    ans = write_lines(tmp_path / "ans.jsonl", [json.dumps({"context": "Paris is in", "answer": " France"})])
    assert load_tasks(ans, "answer_loglik") == [AnswerExample("Paris is in", " France")]


BAD_MC = [
    ("{not json", "not a JSON object"),
    ("[1, 2]", "JSON object"),
    (json.dumps({"choices": ["a", "b"], "answer": 0}), "'context'"),
    (json.dumps({"context": 3, "choices": ["a", "b"], "answer": 0}), "'context'"),
    (json.dumps({"context": "c", "choices": "ab", "answer": 0}), "'choices'"),
    (json.dumps({"context": "c", "choices": ["a"], "answer": 0}), "'choices'"),
    (json.dumps({"context": "c", "choices": ["a", ""], "answer": 0}), "'choices[1]'"),
    (json.dumps({"context": "c", "choices": ["a", "b"]}), "'answer'"),
    (json.dumps({"context": "c", "choices": ["a", "b"], "answer": 2}), "'answer'"),
    (json.dumps({"context": "c", "choices": ["a", "b"], "answer": True}), "'answer'"),
    (json.dumps({"context": "c", "choices": ["a", "b"], "answer": "0"}), "'answer'"),
]


@pytest.mark.parametrize(("line", "field"), BAD_MC, ids=[f"mc{i}" for i in range(len(BAD_MC))])
def test_bad_multiple_choice_line_names_file_line_and_field(tmp_path, line: str, field: str) -> None:
    good = json.dumps({"context": "c", "choices": ["a", "b"], "answer": 1})
    path = write_lines(tmp_path / "task.jsonl", [good, good, line])
    with pytest.raises(UserError, match=rf"task\.jsonl:3: .*{re.escape(field)}") as info:
        load_tasks(path, "multiple_choice")
    assert str(path) + ":3:" in str(info.value)


@pytest.mark.parametrize(
    ("line", "field"),
    [
        (json.dumps({"context": "c"}), "'answer'"),
        (json.dumps({"context": "c", "answer": ""}), "'answer'"),
        (json.dumps({"context": "c", "answer": 4}), "'answer'"),
        (json.dumps({"answer": "a"}), "'context'"),
    ],
)
def test_bad_answer_line_names_file_line_and_field(tmp_path, line: str, field: str) -> None:
    path = write_lines(tmp_path / "ans.jsonl", [line])
    with pytest.raises(UserError, match=rf"ans\.jsonl:1: .*{field}"):
        load_tasks(path, "answer_loglik")


def test_empty_missing_file_and_unknown_kind(tmp_path) -> None:
    with pytest.raises(UserError, match="no examples"):
        load_tasks(write_lines(tmp_path / "e.jsonl", [""]), "answer_loglik")
    with pytest.raises(UserError, match="not found"):
        load_tasks(tmp_path / "missing.jsonl", "answer_loglik")
    with pytest.raises(UserError, match="kind"):
        load_tasks(tmp_path / "e.jsonl", "cloze")


# ----------------------------------------------------------------------------------------- scoring


def test_continuation_span(source) -> None:
    tok = source.tokenizer
    ids, start = continuation_tokens(tok, "The river city", " was quick")
    assert decode(tok, ids[:start]) == "The river city"
    assert decode(tok, ids[start:]) == " was quick"
    # lm-eval's split (TemplateLM._encode_pair): the option's tokens are those after len(tokenize(context)),
    # so a merge across the boundary ("The riv" + "er" -> "The", " river") leaves the option no token
    ids, start = continuation_tokens(tok, "The riv", "er")
    assert decode(tok, ids) == "The river" and len(tokenize(tok, "The riv")) > len(ids) == start
    # whitespace ending the context moves to the option: " was" is scored as one word
    assert continuation_tokens(tok, "The river city ", "was quick") == continuation_tokens(
        tok, "The river city", " was quick"
    )


class Uniform(torch.nn.Module):
    """Equal logits everywhere: every token costs log V, so a choice's log-likelihood is -tokens * log V."""

    def __init__(self, vocab: int):
        super().__init__()
        self.vocab = vocab
        self.dummy = torch.nn.Parameter(torch.zeros(()))

    def forward(self, input_ids, position_ids=None, doc_ids=None):
        return torch.zeros(*input_ids.shape, self.vocab) + self.dummy


def test_acc_norm_differs_from_acc_when_lengths_differ(source) -> None:
    tok = source.tokenizer
    short, long = " x", " the the the the the"
    n_short = len(continuation_tokens(tok, "Once", short)[0]) - continuation_tokens(tok, "Once", short)[1]
    n_long = len(continuation_tokens(tok, "Once", long)[0]) - continuation_tokens(tok, "Once", long)[1]
    assert n_short < n_long and n_short / len(short) > n_long / len(long)  # fewer tokens, more tokens per char
    example = MultipleChoice("Once", (short, long), answer=1)
    got = score_multiple_choice(Uniform(source.vocab), tok, [example], max_len=64)
    # acc picks the fewest tokens (the short one, wrong); acc_norm the fewest nats per character (the long one)
    assert got == {"acc": 0.0, "acc_norm": 1.0, "n": 1, "chance_acc": 0.5}
    got = score_multiple_choice(
        Uniform(source.vocab), tok, [{"context": "Once", "choices": [short, long], "answer": 0}], 64
    )
    assert got == {"acc": 1.0, "acc_norm": 0.0, "n": 1, "chance_acc": 0.5}


def test_loglikelihoods_match_a_direct_computation(source, make_model) -> None:
    tok, model = source.tokenizer, make_model(source.vocab).eval()
    ids, start = continuation_tokens(tok, "The city model", " was the river of time")
    ((got, count),) = loglikelihoods(model, [(ids, start)])
    with torch.no_grad():
        logp = F.log_softmax(model(torch.tensor([ids[:-1]])), -1)[0]
    want = sum(logp[i - 1, ids[i]].item() for i in range(start, len(ids)))
    assert count == len(ids) - start and got == pytest.approx(want, rel=1e-5)
    # batching with longer, padded rows changes nothing
    other = continuation_tokens(tok, "A much longer context with many words in it, and then", " more")
    batched = loglikelihoods(model, [other, (ids, start), other], batch_size=3)
    assert batched[1][0] == pytest.approx(got, rel=1e-5) and batched[1][1] == count


def test_left_truncation(source, make_model) -> None:
    tok, model = source.tokenizer, make_model(source.vocab)
    context = " ".join(["the river and the city"] * 40)
    full = score_answer_loglik(model, tok, [AnswerExample(context, " was quick")], max_len=200)
    cut = score_answer_loglik(model, tok, [AnswerExample(context, " was quick")], max_len=8)
    assert full["n"] == cut["n"] == 1
    assert cut["loglik_mean"] / cut["loglik_per_token"] == pytest.approx(full["loglik_mean"] / full["loglik_per_token"])
    assert cut["loglik_mean"] != pytest.approx(full["loglik_mean"], rel=1e-9)


def test_trained_toy_model_prefers_the_true_continuation(source, make_model) -> None:
    tok = source.tokenizer
    model = make_model(source.vocab, seed=1)
    stream = tok.encode(SENTENCE * 40, add_special_tokens=False).ids
    rows = torch.tensor([stream[i : i + 33] for i in range(0, len(stream) - 33, 7)])
    mc = [
        MultipleChoice("The quick brown fox jumps over the", (" lazy dog.", " quick fox.", " river city."), 0),
        MultipleChoice("The quick brown fox", (" the lazy", " over the", " jumps over"), 2),
        MultipleChoice(SENTENCE + "The quick", (" dog", " brown", " lazy"), 1),
    ]
    answers = [AnswerExample(m.context, m.choices[m.answer]) for m in mc]
    before = score_answer_loglik(model, tok, answers, max_len=64)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(40):
        loss = F.cross_entropy(model(rows[:, :-1]).flatten(0, 1), rows[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = score_answer_loglik(model, tok, answers, max_len=64)
    assert score_multiple_choice(model, tok, mc, max_len=64)["acc"] == 1.0
    assert after["loglik_mean"] > before["loglik_mean"] + 5
    assert after["loglik_per_token"] > -0.5 and after["n"] == 3


# ----------------------------------------------------------------------------------------- held-out task


def word_cut(doc: str) -> int:
    """Where the held-out task cuts a document: the last space at or before min(200, half of it)."""
    return doc.rfind(" ", 0, min(200, len(doc) // 2) + 1)


def test_build_heldout_tasks(source, make_model) -> None:
    mc, answers = build_heldout_tasks(source.token_dir, source.tokenizer, 8, seed=3)
    again = build_heldout_tasks(source.token_dir, source.tokenizer, 8, seed=3)
    other = build_heldout_tasks(source.token_dir, source.tokenizer, 8, seed=4)
    assert (mc, answers) == again and mc != other[0]
    assert len(mc) == len(answers) == 8
    texts = source.heldout_texts
    for ex, ans in zip(mc, answers, strict=True):
        assert len(ex.choices) == 4 and len(set(ex.choices)) == 4
        assert ans.context == ex.context and ans.answer == ex.choices[ex.answer]
        doc = next(t for t in texts if t.startswith(ex.context))  # the context opens a held-out document
        cut = len(ex.context)
        assert cut == word_cut(doc) and doc[cut : cut + 100] == ans.answer and ans.answer.startswith(" ")
        assert all(c in {t[word_cut(t) :][:100] for t in texts} for c in ex.choices)
    assert len({ex.answer for ex in mc}) > 1  # the true one is not always in the same place
    model = make_model(source.vocab)
    got = score_multiple_choice(model, source.tokenizer, mc, max_len=128)
    assert got["n"] == 8 and 0.0 <= got["acc"] <= 1.0
    assert score_answer_loglik(model, source.tokenizer, answers, max_len=128)["loglik_mean"] < 0


def test_heldout_task_needs_two_documents(tmp_path, source) -> None:
    from runlib.data.shards import write_shard

    ids = source.tokenizer.encode(source.heldout_texts[0], add_special_tokens=False).ids + [source.eos]
    write_shard(tmp_path, "heldout", [ids, [5, source.eos]], "uint16")
    with pytest.raises(UserError, match="at least 2"):
        build_heldout_tasks(tmp_path, source.tokenizer, 4, seed=0)


def test_chance_accuracy_from_the_items() -> None:
    two, four = MultipleChoice("a", ("x", "y"), 0), MultipleChoice("b", ("w", "x", "y", "z"), 3)
    assert chance_accuracy([two, four]) == pytest.approx((1 / 2 + 1 / 4) / 2)
    assert chance_accuracy([{"context": "c", "choices": ["p", "q", "r"], "answer": 1}]) == pytest.approx(1 / 3)
    assert chance_accuracy([]) != chance_accuracy([])  # nan: no items, no chance level


def test_heldout_task_says_why_it_has_fewer_examples(source) -> None:
    docs = len(source.heldout_texts)
    asked = heldout_tasks(source.token_dir, source.tokenizer, docs + 8, seed=3)
    assert (asked.heldout_docs, asked.requested_examples) == (docs, docs + 8)
    assert asked.examples == asked.usable_docs == docs  # every document of the fixture is long enough
    note = asked.cap_note
    assert note is not None and note.startswith(f"{docs} of {docs + 8} examples:")
    assert f"held-out shard has {docs} documents (data.heldout_docs)" in note and "raise data.heldout_docs" in note
    exact = heldout_tasks(source.token_dir, source.tokenizer, docs, seed=3)
    assert exact.examples == docs and exact.cap_note is None
