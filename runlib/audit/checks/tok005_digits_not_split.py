"""TOK005: digits: none (numbers split by frequency).

Why it matters:
    Without a digit rule, BPE merges digit strings by how often they occur, so the same number is
    cut differently depending on its neighbours ("9.11" vs "9.9", years as one token, prices as
    arbitrary chunks), and arithmetic has to be learned per chunk. Splitting into single digits
    (PaLM, arXiv 2204.02311 §2; Llama, arXiv 2302.13971 §2.1) or right-aligned triplets gives every
    number a consistent form; Singh & Strouse (arXiv 2402.14903) measure large arithmetic
    differences from this choice alone. When runlib trains the tokenizer the rule is free to
    choose: a warning. A pretrained tokenizer's merges are fixed, so the setting only describes
    it (GPT-2's, OPT's and Pythia's tokenizers do not split digits): info.

Flagged:
    tokenizer: {digits: none}

Preferred:
    tokenizer: {digits: single}        # or triplets

How to fix:
    Set tokenizer.digits: single (or triplets). With a pretrained tokenizer the setting cannot
    change its merges: choose a tokenizer that splits digits, or record why in audit.ignore.
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "TOK005"
NAME = "digits-not-split"
SEVERITY = "warning"


def check(ctx: Context) -> Iterator[Finding]:
    tok = ctx.spec.tokenizer
    if tok.digits != "none":
        return
    pretrained = f" (pretrained tokenizer {tok.pretrained}: pick one that splits digits)" if tok.pretrained else ""
    yield ctx.finding(
        "tokenizer.digits",
        "digits: none: runs of digits are merged by frequency, so the same number is split differently in different "
        "contexts (9.11 vs 9.9) and arithmetic is learned per arbitrary chunk",
        f"set tokenizer.digits: single (or triplets){pretrained}",
        value="single",
        severity="info" if tok.pretrained else "warning",
    )


PASS = [{}, {"tokenizer.digits": "triplets"}]
FAIL = [
    case({"tokenizer.digits": "none"}, "warning"),
    case({"tokenizer.digits": "none", "tokenizer.pretrained": "tok/tokenizer.json"}, "info"),
]
