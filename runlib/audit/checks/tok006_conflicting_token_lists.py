"""TOK006: a token both in domain_tokens and drop_tokens, or duplicated in either list.

Why it matters:
    domain_tokens are forced into the vocabulary whole; drop_tokens must never be produced. A
    string in both lists asks for two contradictory things, and which one wins depends on the
    order the tokenizer builder applies them: either a sensitive string becomes a token, or a
    required domain term silently does not. A duplicate in either list is a copy-paste slip that
    also makes the id count ambiguous (a builder that adds every entry assigns two ids, one never
    used, and shifts every id after it).

Flagged:
    tokenizer: {domain_tokens: [amoxicillin, penicillin, amoxicillin], drop_tokens: [penicillin]}

Preferred:
    tokenizer: {domain_tokens: [amoxicillin, penicillin], drop_tokens: []}

How to fix:
    Remove the duplicates (the finding gives the deduplicated list) and keep each conflicting
    string in exactly one of the two lists.
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case, summarize

CODE = "TOK006"
NAME = "conflicting-token-lists"
SEVERITY = "error"


def _duplicates(items: list[str]) -> list[str]:
    seen: set[str] = set()
    dups: list[str] = []
    for item in items:
        if item in seen and item not in dups:
            dups.append(item)
        seen.add(item)
    return dups


def check(ctx: Context) -> Iterator[Finding]:
    tok = ctx.spec.tokenizer
    for key, items in (("domain_tokens", tok.domain_tokens), ("drop_tokens", tok.drop_tokens)):
        dups = _duplicates(items)
        if dups:
            deduped = list(dict.fromkeys(items))
            yield ctx.finding(
                f"tokenizer.{key}",
                f"tokenizer.{key} lists {summarize([repr(d) for d in dups])} more than once "
                f"({len(items)} entries, {len(deduped)} distinct)",
                f"list each token once: {deduped}",
                value=deduped,
            )
    domain = set(tok.domain_tokens)
    for j, token in enumerate(tok.drop_tokens):
        if token in domain and token not in tok.drop_tokens[:j]:
            i = tok.domain_tokens.index(token)
            yield ctx.finding(
                f"tokenizer.drop_tokens[{j}]",
                f"{token!r} is both forced into the vocabulary (domain_tokens[{i}]) and banned (drop_tokens[{j}])",
                f"keep {token!r} in only one list: drop_tokens if it must never be produced, else domain_tokens",
            )


PASS = [
    {},
    {"tokenizer.domain_tokens": ["amoxicillin", "penicillin"], "tokenizer.drop_tokens": ["secret-project"]},
    {"tokenizer.domain_tokens": ["Amoxicillin"], "tokenizer.drop_tokens": ["amoxicillin"]},  # exact strings differ
]
FAIL = [
    case({"tokenizer.domain_tokens": ["amoxicillin"], "tokenizer.drop_tokens": ["amoxicillin"]}, "error"),
    case({"tokenizer.domain_tokens": ["amoxicillin", "penicillin", "amoxicillin"]}, "error"),
    case({"tokenizer.drop_tokens": ["secret-project", "secret-project"]}, "error"),
]
