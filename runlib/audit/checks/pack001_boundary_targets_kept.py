"""PACK001: document packing with boundary_targets: kept.

Why it matters:
    With packing: document, attention never crosses documents, so the position holding document
    A's end-of-document token cannot see document B. Keeping its target (the first token of B)
    trains the model to predict the start of an unrelated document from the end of another: pure
    noise, once per document boundary, and a bias toward whatever documents tend to start with.
    Frameworks that mask attention per document mask this target too (Megatron eod_mask_loss
    masks positions whose input is the EOD token; HF's flattening collator sets the first label
    of each packed sequence to -100: transformers DataCollatorWithFlattening). Only
    stream packing, where the model does see A while predicting B, uses the kept target as a
    "new document" signal (nanoGPT/GPT-2 practice).

Flagged:
    data: {packing: document, boundary_targets: kept}

Preferred:
    data: {packing: document, boundary_targets: masked}

How to fix:
    Set data.boundary_targets: masked; or, if the run should learn across boundaries, use
    packing: stream.
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "PACK001"
NAME = "boundary-targets-kept-with-document-packing"
SEVERITY = "error"


def check(ctx: Context) -> Iterator[Finding]:
    data = ctx.spec.data
    if data.packing == "document" and data.boundary_targets == "kept":
        yield ctx.finding(
            "data.boundary_targets",
            "boundary_targets: kept with packing: document: the end-of-document position, which cannot attend to the "
            "next document, is trained to predict that document's first token (one noise target per boundary)",
            "set data.boundary_targets: masked (or use packing: stream to learn across boundaries)",
            value="masked",
        )


PASS = [
    {},
    {"data.packing": "stream", "data.boundary_targets": "kept"},
    {"data.packing": "none", "data.boundary_targets": "kept"},
]
FAIL = [case({"data.boundary_targets": "kept"}, "error")]
