"""Downstream tasks scored by log-likelihood: multiple choice (acc, acc_norm) and gold-answer log-likelihood.

Task files (eval.tasks[].path) are JSONL, one example per line (blank lines are skipped), UTF-8:

    multiple_choice   {"context": "The capital of France is", "choices": [" Paris", " Rome", " Oslo"], "answer": 0}
    answer_loglik     {"context": "2 + 2 =", "answer": " 4"}

context: a string (may be empty); choices: two or more non-empty strings; answer (multiple_choice):
the index of the correct choice, an integer; answer (answer_loglik): a non-empty string. Other keys
(an id, a source) are allowed and ignored. Write a choice or answer with the spacing it has after
the context (a leading space, usually): it is scored as the continuation of context exactly as written.
A line that is not such an object is a UserError naming file:line and the field.

Scoring (the lm-eval-harness definitions, v0.4.13; tests/eval/test_lm_eval.py checks that lm-eval scores
the same items the same):
  * an option's log-likelihood is the sum of log p(token | everything before) over the option's
    tokens, where the option's tokens are those of tokenize(context + option) after the first
    len(tokenize(context)), whitespace ending the context moved to the option first (lm-eval's
    TemplateLM._encode_pair: where a BPE merge crosses the boundary, fewer tokens than the option's
    are scored, so write options that open with a space and contexts that do not end in one);
  * acc: the choice of largest log-likelihood is the answer; acc_norm: the choice of largest
    log-likelihood / len(choice in characters) is;
  * answer_loglik: loglik_mean is the mean over examples of the answer's log-likelihood (nats),
    loglik_per_token the total over the total answer tokens.
  * chance_acc (multiple_choice): the accuracy of a uniform random pick, the mean over examples of
    1 / number of choices, computed from the items (0.25 for the held-out task's 4 choices), so
    acc and acc_norm are read against it.
A sequence longer than max_len + 1 tokens is cut from the left (the option always stays whole, if it
fits). An empty context is the EOS token (lm-eval's prefix token for a tokenizer without BOS), so the
first option token has something to be predicted from.

`build_heldout_tasks` makes a small multiple-choice task out of a source's own held-out documents
(context: the first half of a document, up to 200 characters, cut at a word boundary; choices: its
next 100 characters and the same span of 3 other held-out documents), so every source gets a downstream-style number without
any external data. It has at most one example per usable held-out document: asking for more
examples than that gets fewer, and `heldout_tasks` says how many were asked for, how many were
made and why (`HeldoutTasks.cap_note`), for eval.json and the run report.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np

from runlib.data.shards import TokenDirs, open_split
from runlib.errors import UserError
from runlib.tokenizer.train import decode, eos_id
from runlib.util.userfile import open_regular

MAX_LINE_BYTES = 64 << 20  # one example per line: a line past this is not a task file

if TYPE_CHECKING:  # torch is imported where a model is scored: the items and task files do without it
    import torch
    from tokenizers import Tokenizer

TaskKind = Literal["multiple_choice", "answer_loglik"]
KINDS: tuple[str, ...] = ("multiple_choice", "answer_loglik")
CONTEXT_CHARS = 200
CONTINUATION_CHARS = 100
MIN_PART_CHARS = 20
DISTRACTORS = 3
BATCH = 16


@dataclass(frozen=True, slots=True)
class MultipleChoice:
    context: str
    choices: tuple[str, ...]
    answer: int


@dataclass(frozen=True, slots=True)
class AnswerExample:
    context: str
    answer: str


# ----------------------------------------------------------------------------------------- loading


def _parse_line(obj: object, kind: str, where: str) -> MultipleChoice | AnswerExample:
    if not isinstance(obj, dict):
        raise UserError(f"{where}: an example must be a JSON object, got {type(obj).__name__}")
    context = obj.get("context")
    if not isinstance(context, str):
        raise UserError(f"{where}: field 'context' must be a string, got {_describe(context, 'context' in obj)}")
    if kind == "multiple_choice":
        choices = obj.get("choices")
        if not isinstance(choices, list) or len(choices) < 2:
            raise UserError(
                f"{where}: field 'choices' must be a list of two or more strings, got {_describe(choices, 'choices' in obj)}"
            )
        for i, c in enumerate(choices):
            if not isinstance(c, str) or not c:
                raise UserError(f"{where}: field 'choices[{i}]' must be a non-empty string, got {c!r}")
        answer = obj.get("answer")
        if isinstance(answer, bool) or not isinstance(answer, int):
            raise UserError(
                f"{where}: field 'answer' must be the index of the right choice (an integer), "
                f"got {_describe(answer, 'answer' in obj)}"
            )
        if not 0 <= answer < len(choices):
            raise UserError(
                f"{where}: field 'answer' is {answer}, but there are {len(choices)} choices (0..{len(choices) - 1})"
            )
        return MultipleChoice(context, tuple(choices), answer)
    answer = obj.get("answer")
    if not isinstance(answer, str) or not answer:
        raise UserError(f"{where}: field 'answer' must be a non-empty string, got {_describe(answer, 'answer' in obj)}")
    return AnswerExample(context, answer)


def _describe(value: object, present: bool) -> str:
    return repr(value) if present else "nothing (the field is missing)"


@overload
def load_tasks(path: str | Path, kind: Literal["multiple_choice"]) -> list[MultipleChoice]: ...
@overload
def load_tasks(path: str | Path, kind: Literal["answer_loglik"]) -> list[AnswerExample]: ...
@overload
def load_tasks(path: str | Path, kind: str) -> list[MultipleChoice] | list[AnswerExample]: ...
def load_tasks(path: str | Path, kind: str) -> list[MultipleChoice] | list[AnswerExample]:
    """The examples of a JSONL task file of this kind (multiple_choice | answer_loglik), validated."""
    if kind not in KINDS:
        raise UserError(f"eval.tasks: kind {kind!r} is not one of {', '.join(KINDS)}")
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: task file not found (eval.tasks[].path; relative paths start at {Path.cwd()})")
    choices: list[MultipleChoice] = []
    answers: list[AnswerExample] = []
    # read like a data source (runlib.curate.readers): regular files only, lines bounded, and what
    # Python's json cannot hold (nesting past the stack, 5,000-digit integers) refused at file:line
    with open_regular(path, "the task file") as raw:
        for lineno, data in enumerate(iter(lambda: raw.readline(MAX_LINE_BYTES + 1), b""), 1):
            where = f"{path}:{lineno}"
            if len(data) > MAX_LINE_BYTES:
                raise UserError(f"{where}: a line longer than {MAX_LINE_BYTES >> 20} MiB; one example per line")
            try:
                line = data.decode("utf-8")
            except UnicodeDecodeError:
                raise UserError(f"{where}: not UTF-8 text; re-encode the file as UTF-8") from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UserError(f"{where}: not a JSON object: {exc.msg} (column {exc.colno})") from exc
            except RecursionError:
                raise UserError(f"{where}: JSON nested too deeply to read; an example is a flat object") from None
            except ValueError as exc:  # an integer past Python's int() digit limit
                raise UserError(f"{where}: a JSON value Python cannot read ({str(exc)[:100]})") from None
            example = _parse_line(obj, kind, where)
            if isinstance(example, MultipleChoice):
                choices.append(example)
            else:
                answers.append(example)
    if not choices and not answers:
        raise UserError(f"{path}: no examples (one JSON object per line)")
    return choices if kind == "multiple_choice" else answers


def _as_mc(ex: MultipleChoice | Mapping[str, Any]) -> MultipleChoice:
    if isinstance(ex, MultipleChoice):
        return ex
    return MultipleChoice(ex["context"], tuple(ex["choices"]), int(ex["answer"]))


def _as_answer(ex: AnswerExample | Mapping[str, Any]) -> AnswerExample:
    if isinstance(ex, AnswerExample):
        return ex
    return AnswerExample(ex["context"], ex["answer"])


# ----------------------------------------------------------------------------------------- scoring


def _encode(tokenizer: Tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False).ids if text else []


def continuation_tokens(tokenizer: Tokenizer, context: str, continuation: str) -> tuple[list[int], int]:
    """(ids of context + continuation, index of the continuation's first token in them), split as
    lm-eval splits them (lm_eval/api/model.py, TemplateLM._encode_pair, v0.4.13): whitespace that ends
    the context moves to the continuation, both are tokenized together, and the continuation's tokens
    are those after the first len(tokenize(context)). Where a BPE merge crosses the boundary this can
    score fewer tokens than the option has (none, at worst: a log-likelihood of 0): the harness's
    definition, kept so runlib's scores equal lm-eval's on the same items."""
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces:
        context, continuation = context[:-n_spaces], context[-n_spaces:] + continuation
    ctx = _encode(tokenizer, context)
    full = _encode(tokenizer, context + continuation)
    return full, min(len(ctx), len(full))


def _request(tokenizer: Tokenizer, eos: int, context: str, continuation: str, max_len: int) -> tuple[list[int], int]:
    """(ids to feed, index of the first scored target): at most max_len + 1 ids, cut from the left.
    An empty context is the end-of-document token (lm-eval's prefix token when the tokenizer has no
    BOS; TemplateLM.loglikelihood), unless the continuation itself starts with it."""
    if context.strip():
        ids, start = continuation_tokens(tokenizer, context, continuation)
    else:
        ids, start = _encode(tokenizer, context + continuation), 0
    if start == 0:  # nothing to predict the first token from: open with the document separator
        ids, start = (ids, 1) if ids and ids[0] == eos else ([eos, *ids], 1)
    cut = max(0, len(ids) - (max_len + 1))
    return ids[cut:], max(1, start - cut)


def loglikelihoods(
    model: torch.nn.Module, requests: Sequence[tuple[list[int], int]], batch_size: int = BATCH
) -> list[tuple[float, int]]:
    """(sum of log p, token count) of ids[start:] given ids[:start], for each (ids, start); under no_grad."""
    import torch
    import torch.nn.functional as F

    from runlib.train.heldout import _device  # imports torch

    device = _device(model)
    out: list[tuple[float, int]] = [(0.0, 0)] * len(requests)
    order = sorted(range(len(requests)), key=lambda i: -len(requests[i][0]))  # similar lengths together
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for b in range(0, len(order), batch_size):
                chunk = order[b : b + batch_size]
                width = max(max(len(requests[i][0]) for i in chunk) - 1, 1)
                inputs = torch.zeros(len(chunk), width, dtype=torch.long)
                targets = torch.zeros(len(chunk), width, dtype=torch.long)
                scored = torch.zeros(len(chunk), width, dtype=torch.bool)
                for row, i in enumerate(chunk):
                    ids, start = requests[i]
                    t = torch.tensor(ids, dtype=torch.long)
                    inputs[row, : len(ids) - 1] = t[:-1]
                    targets[row, : len(ids) - 1] = t[1:]
                    scored[row, start - 1 : len(ids) - 1] = True  # right padding: causal rows ignore it
                    # (an option with no tokens of its own, start == len(ids), scores nothing: 0.0)
                logits = model(inputs.to(device))
                logp = -F.cross_entropy(logits.flatten(0, 1), targets.to(device).flatten(), reduction="none")
                logp = (logp.view(len(chunk), width).double().cpu() * scored).sum(1)
                for row, i in enumerate(chunk):
                    out[i] = (float(logp[row]), int(scored[row].sum()))
    finally:
        model.train(was_training)
    return out


def score_multiple_choice(
    model: torch.nn.Module,
    tokenizer: Tokenizer,
    examples: Iterable[MultipleChoice | Mapping[str, Any]],
    max_len: int,
    batch_size: int = BATCH,
) -> dict[str, Any]:
    """acc and acc_norm (log-likelihood per character) over the examples."""
    items = [_as_mc(ex) for ex in examples]
    eos = eos_id(tokenizer)
    requests, owners = [], []
    for k, ex in enumerate(items):
        for choice in ex.choices:
            requests.append(_request(tokenizer, eos, ex.context, choice, max_len))
            owners.append(k)
    scores = loglikelihoods(model, requests, batch_size)
    correct = correct_norm = 0
    pos = 0
    for ex in items:
        ll = np.array([s for s, _ in scores[pos : pos + len(ex.choices)]])
        chars = np.array([len(c) for c in ex.choices], dtype=np.float64)
        pos += len(ex.choices)
        correct += int(np.argmax(ll)) == ex.answer
        correct_norm += int(np.argmax(ll / chars)) == ex.answer
    n = len(items)
    return {
        "acc": correct / n if n else float("nan"),
        "acc_norm": correct_norm / n if n else float("nan"),
        "n": n,
        "chance_acc": chance_accuracy(items),
    }


def chance_accuracy(examples: Iterable[MultipleChoice | Mapping[str, Any]]) -> float:
    """The expected accuracy of a uniform random pick: the mean of 1 / len(choices) over the examples."""
    counts = [len(_as_mc(ex).choices) for ex in examples]
    return sum(1.0 / k for k in counts) / len(counts) if counts else float("nan")


def score_answer_loglik(
    model: torch.nn.Module,
    tokenizer: Tokenizer,
    examples: Iterable[AnswerExample | Mapping[str, Any]],
    max_len: int,
    batch_size: int = BATCH,
) -> dict[str, Any]:
    """Mean log-likelihood of the gold answers (nats per example and per answer token)."""
    items = [_as_answer(ex) for ex in examples]
    eos = eos_id(tokenizer)
    scores = loglikelihoods(
        model, [_request(tokenizer, eos, ex.context, ex.answer, max_len) for ex in items], batch_size
    )
    n = len(items)
    total = sum(s for s, _ in scores)
    tokens = sum(t for _, t in scores)
    return {
        "loglik_mean": total / n if n else float("nan"),
        "loglik_per_token": total / tokens if tokens else float("nan"),
        "n": n,
    }


# ----------------------------------------------------------------------------------------- held-out task


def _split(text: str) -> tuple[str, str] | None:
    """(context, continuation) of a document: its first half up to CONTEXT_CHARS, then CONTINUATION_CHARS.
    The cut moves back to the last whitespace before it, so the continuation opens with a word and its
    leading space (as lm-eval's tasks write their options): no BPE merge crosses the boundary and the
    option is scored whole (continuation_tokens)."""
    cut = min(CONTEXT_CHARS, len(text) // 2)
    space = max(text.rfind(c, 0, cut + 1) for c in " \n\t")
    if space >= MIN_PART_CHARS:
        cut = space
    context, continuation = text[:cut], text[cut : cut + CONTINUATION_CHARS]
    if len(context.strip()) < MIN_PART_CHARS or len(continuation.strip()) < MIN_PART_CHARS:
        return None
    return context, continuation


@dataclass(frozen=True, slots=True)
class HeldoutTasks:
    multiple_choice: list[MultipleChoice]
    answers: list[AnswerExample]  # the same examples' contexts and true continuations
    requested_examples: int
    heldout_docs: int  # documents in the held-out shard
    usable_docs: int  # of them, long enough to split into context and continuation

    @property
    def examples(self) -> int:
        return len(self.multiple_choice)

    @property
    def cap_note(self) -> str | None:
        """Why fewer examples than requested were made (None: as many as requested)."""
        if self.examples >= self.requested_examples:
            return None
        short = self.heldout_docs - self.usable_docs
        why = (
            f"the source's held-out shard has {self.heldout_docs} documents (data.heldout_docs)"
            + (f", {short} of them too short to split into context and continuation" if short else "")
            + f", and the task makes at most one example per usable document ({self.usable_docs})"
        )
        if self.examples < min(self.requested_examples, self.usable_docs):
            why += "; a document whose continuation every other document repeats makes none"
        return (
            f"{self.examples} of {self.requested_examples} examples: {why}; raise data.heldout_docs "
            f"(or set the task's examples to {self.examples}) to get all {self.requested_examples}"
        )


def build_heldout_tasks(
    token_dir: TokenDirs, tokenizer: Tokenizer, n_examples: int, seed: int
) -> tuple[list[MultipleChoice], list[AnswerExample]]:
    """(multiple_choice, answers) of `heldout_tasks`."""
    tasks = heldout_tasks(token_dir, tokenizer, n_examples, seed)
    return tasks.multiple_choice, tasks.answers


def heldout_tasks(token_dir: TokenDirs, tokenizer: Tokenizer, n_examples: int, seed: int) -> HeldoutTasks:
    """A multiple-choice and an answer-loglik task from the held-out documents of token_dir (deterministic by seed).

    Each example takes a document: context = its first half (at most 200 characters), the true
    continuation = its next 100 characters; the 3 wrong choices are the continuations of 3 other
    documents; the true one's position among the 4 is drawn. Documents shorter than 40 characters
    are skipped. Fewer than 2 usable documents: a UserError.
    """
    shard = open_split(token_dir, "heldout")
    eos = eos_id(tokenizer)
    parts = []
    for i in range(len(shard)):
        ids = shard.doc(i).tolist()
        if ids and ids[-1] == eos:
            ids = ids[:-1]
        split = _split(decode(tokenizer, ids))
        if split is not None:
            parts.append(split)
    if len(parts) < 2:
        raise UserError(
            f"{token_dir}: {len(parts)} held-out document(s) of {2 * MIN_PART_CHARS}+ characters; a held-out task "
            "needs at least 2 (raise data.heldout_docs)"
        )
    rng = random.Random(seed)
    chosen = sorted(rng.sample(range(len(parts)), min(n_examples, len(parts))))
    mc, answers = [], []
    for i in chosen:
        context, truth = parts[i]
        others = [j for j in range(len(parts)) if j != i and parts[j][1] != truth]
        wrong = [parts[j][1] for j in rng.sample(others, min(DISTRACTORS, len(others)))]
        if not wrong:
            continue
        position = rng.randrange(len(wrong) + 1)
        choices = wrong[:position] + [truth] + wrong[position:]
        mc.append(MultipleChoice(context, tuple(choices), position))
        answers.append(AnswerExample(context, truth))
    return HeldoutTasks(mc, answers, n_examples, len(shard), len(parts))
