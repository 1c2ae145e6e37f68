"""The curation counts table and its pandera schema.

One row per step, in the order the steps ran:
    step      str   unique step name (normalize, length, gopher_quality, pii_mask, exact_dedup, ...)
    kind      str   "filter" (drops documents, never edits them) or "transform" (edits texts, keeps all)
    docs_in, docs_out, chars_in, chars_out   int >= 0 (characters are Unicode code points)

Rules: a step takes what the previous step gave (docs_in, chars_in = the previous row's docs_out,
chars_out); no step creates documents (docs_out <= docs_in); a filter cannot add characters
(chars_out <= chars_in); a transform keeps every document (docs_out == docs_in) but may change the
character count (NFKC turns 'ﬁ' into 'fi', masking replaces an e-mail address by a placeholder).
The table is checked after every curation stage; a failure is a bug in runlib, not a user mistake.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pandera (and pandas) load when a table is checked, not at import
    import pandera.pandas as pa

COLUMNS = ("step", "kind", "docs_in", "docs_out", "chars_in", "chars_out")
KINDS = ("filter", "transform")


class CountsError(ValueError):
    """The counts table of a curation stage is inconsistent (a bug: the stage lost or invented documents)."""


def _schema() -> pa.DataFrameSchema:
    import pandera.pandas as pa

    def follows_previous(df: Any) -> Any:
        prev_docs = df["docs_out"].shift(1).fillna(df["docs_in"])
        prev_chars = df["chars_out"].shift(1).fillna(df["chars_in"])
        return (df["docs_in"] == prev_docs) & (df["chars_in"] == prev_chars)

    def count() -> pa.Column:
        return pa.Column("int64", checks=pa.Check.ge(0), nullable=False)

    return pa.DataFrameSchema(
        {
            "step": pa.Column(str, unique=True, nullable=False),
            "kind": pa.Column(str, pa.Check.isin(KINDS), nullable=False),
            "docs_in": count(),
            "docs_out": count(),
            "chars_in": count(),
            "chars_out": count(),
        },
        checks=[
            pa.Check(
                lambda df: df["docs_out"] <= df["docs_in"], error="docs_out <= docs_in (a step cannot create documents)"
            ),
            pa.Check(
                lambda df: (df["kind"] != "filter") | (df["chars_out"] <= df["chars_in"]),
                error="a filter step has chars_out <= chars_in",
            ),
            pa.Check(
                lambda df: (df["kind"] != "transform") | (df["docs_out"] == df["docs_in"]),
                error="a transform step keeps every document (docs_out == docs_in)",
            ),
            pa.Check(
                follows_previous,
                error="each step's (docs_in, chars_in) equals the previous step's (docs_out, chars_out)",
            ),
        ],
        strict=True,
        ordered=True,
        name="curation counts",
    )


def validate_counts(rows: list[dict[str, Any]]) -> None:
    """Check a counts table (rows as dicts; extra keys such as "reasons" are ignored); CountsError if wrong."""
    import pandas as pd
    import pandera.errors

    missing = sorted({c for row in rows for c in COLUMNS if c not in row})
    if missing:
        raise CountsError(f"curation counts: rows lack column(s) {', '.join(missing)}")
    frame = pd.DataFrame([{c: row[c] for c in COLUMNS} for row in rows], columns=list(COLUMNS))
    if frame.empty:
        return
    try:
        _schema().validate(frame, lazy=True)
    except pandera.errors.SchemaErrors as exc:
        lines: dict[str, None] = {}  # ordered set: a table-wide check reports every cell of a failing row
        for _, case in exc.failure_cases.iterrows():
            index = case.get("index")
            step = frame["step"].iloc[int(index)] if index is not None and index == index else None
            where = f"step {step!r}" if step is not None else "table"
            if case.get("schema_context") == "DataFrameSchema":
                lines[f"  {where}: fails {case.get('check')}"] = None
            else:
                lines[
                    f"  {where}: column {case.get('column')} fails {case.get('check')} (value {case.get('failure_case')!r})"
                ] = None
        table = frame.to_string(index=False)
        raise CountsError("curation counts are inconsistent:\n" + "\n".join(lines) + "\n" + table) from None
