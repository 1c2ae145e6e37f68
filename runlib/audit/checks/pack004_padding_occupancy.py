"""PACK004: padding-free occupancy of sequences when packing is off.

Why it matters:
    With packing: none each sequence holds one document and is padded to seq_len; the padding is
    computed and thrown away. The expected share of real tokens is about
    min(1, mean_doc_tokens / seq_len) (documents longer than seq_len are cut into full chunks
    plus one padded tail). Web documents are typically a few hundred to a thousand tokens long,
    so at 4096 most of the compute is padding: that is why pre-training packs documents (GPT-3 arXiv 2005.14165; Llama 3
    arXiv 2407.21783 §3.2 packs with document masks; Krell et al., arXiv 2107.02027, measured up
    to 50% padding in BERT pre-training). Info: the expected occupancy; warning when a phase's
    seq_len is more than 4x the mean document length.

Flagged:
    model: {seq_len: 4096}
    data: {packing: none, mean_doc_tokens: 700}       # ~17% real tokens

Preferred:
    model: {seq_len: 4096}
    data: {packing: document, mean_doc_tokens: 700}   # attention still stays inside each document

How to fix:
    Use packing: document (the same per-document attention, no padding) or stream, or bring
    seq_len down toward the document length. Declare data.mean_doc_tokens to get the estimate.
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, Severity, case
from runlib.plan import PhasePlan
from runlib.spec.units import format_count

CODE = "PACK004"
NAME = "padding-occupancy"
SEVERITY = "info"
WARN_RATIO = 4.0  # seq_len above 4x the mean document: most of each sequence is padding


def check(ctx: Context) -> Iterator[Finding]:
    data = ctx.spec.data
    if data.packing != "none":
        return
    mean = data.mean_doc_tokens
    if mean is None:
        lengths = sorted({p.settings.seq_len for p in ctx.plan.phases} or {ctx.spec.model.seq_len})
        yield ctx.finding(
            "data.packing",
            f"packing: none pads every document to seq_len ({', '.join(str(s) for s in lengths)}); the share of padding "
            "is unknown because data.mean_doc_tokens is not declared",
            "declare data.mean_doc_tokens to estimate the occupancy, or use packing: document",
        )
        return
    groups: dict[str, list[PhasePlan]] = {}  # spec path of the seq_len -> phases using it
    for p in ctx.plan.phases:
        path = f"phases[{p.settings.index}].seq_len" if p.settings.phase.seq_len is not None else "model.seq_len"
        groups.setdefault(path, []).append(p)
    for path, phases in groups.items():
        seq_len = phases[0].settings.seq_len
        if seq_len <= mean:
            continue  # documents fill the sequences: little padding
        occupancy = min(1.0, mean / seq_len)
        tokens = sum(p.tokens for p in phases)
        names = ", ".join(repr(p.name) for p in phases)
        label = f"phase {names}" if len(phases) == 1 else f"phases {names}"
        severity: Severity = "warning" if seq_len > WARN_RATIO * mean else "info"
        yield ctx.finding(
            path,
            f"{label} (seq_len {seq_len}) with packing: none and documents of ~{format_count(mean)} tokens on average: "
            f"each padded sequence is ~{occupancy:.0%} real tokens, so ~{1 - occupancy:.0%} of the "
            f"{format_count(tokens)} token slots (and their compute) is padding",
            "use data.packing: document (attention stays inside each document, no padding), or a seq_len closer to the documents",
            severity=severity,
        )


PASS = [
    {},
    {"data.packing": "stream", "data.mean_doc_tokens": 300},
    {"data.packing": "none", "data.mean_doc_tokens": 4096},  # documents fill every phase's sequences
]
FAIL = [
    case({"data.packing": "none"}, "info"),
    case({"data.packing": "none", "data.mean_doc_tokens": 1500}, "info"),  # 2048 / 1500: ~73% real
    case({"data.packing": "none", "data.mean_doc_tokens": 700}, "warning"),  # long phase: 4096 > 4 x 700
    case({"data.packing": "none", "data.mean_doc_tokens": 300}, "warning"),
]
