import gzip
import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from runlib.curate.readers import id_root, read_documents, relative_name
from runlib.errors import UserError
from tests.curate import make_spec
from tests.helpers import refused


def source(fmt: str, path: str, **input_fields):
    spec = make_spec({"web": {"domain": "web", "input": {"format": fmt, "path": path, **input_fields}}})
    return spec.data.sources["web"]


def write_jsonl(path: Path, rows, field="text") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({field: r, "url": "u"}) + "\n" for r in rows), encoding="utf-8")


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def test_jsonl_plain_and_gz(tmp_path):
    write_jsonl(Path("data/a.jsonl"), ["one", "two"])
    with gzip.open("data/b.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write(json.dumps({"text": "three"}) + "\n\n" + json.dumps({"text": "four"}) + "\n")
    src = source("jsonl", "data/*.jsonl*")
    docs = list(read_documents("web", src, ["data/a.jsonl", "data/b.jsonl.gz"]))
    assert docs == [("a.jsonl:1", "one"), ("a.jsonl:2", "two"), ("b.jsonl.gz:1", "three"), ("b.jsonl.gz:3", "four")]


def test_jsonl_custom_field_and_bom():
    Path("d.jsonl").write_bytes(b"\xef\xbb\xbf" + json.dumps({"content": "x"}).encode() + b"\n")
    src = source("jsonl", "d.jsonl", text_field="content")
    assert list(read_documents("web", src, ["d.jsonl"])) == [("d.jsonl:1", "x")]


def test_jsonl_bad_line_names_file_and_line():
    Path("data").mkdir()
    Path("data/a.jsonl").write_text('{"text": "ok"}\n{"text": "broken\n', encoding="utf-8")
    src = source("jsonl", "data/*.jsonl")
    with pytest.raises(UserError, match=r"data/a\.jsonl:2: not a JSON object"):
        list(read_documents("web", src, ["data/a.jsonl"]))


def test_jsonl_missing_field_names_field_and_present_ones():
    write_jsonl(Path("a.jsonl"), ["x"], field="body")
    src = source("jsonl", "a.jsonl")
    with pytest.raises(UserError) as err:
        list(read_documents("web", src, ["a.jsonl"]))
    msg = str(err.value)
    assert "a.jsonl:1" in msg and "'text'" in msg and "body" in msg and "data.sources.web.input.text_field" in msg


def test_jsonl_non_string_and_non_object():
    Path("a.jsonl").write_text('{"text": null}\n', encoding="utf-8")
    with pytest.raises(UserError, match=r"a\.jsonl:1: field 'text' is null"):
        list(read_documents("web", source("jsonl", "a.jsonl"), ["a.jsonl"]))
    Path("b.jsonl").write_text('["text"]\n', encoding="utf-8")
    with pytest.raises(UserError, match=r"b\.jsonl:1: a JSON list"):
        list(read_documents("web", source("jsonl", "b.jsonl"), ["b.jsonl"]))


def test_jsonl_not_utf8_and_bad_gzip():
    Path("a.jsonl").write_bytes(b'{"text": "ok"}\n{"text": "caf\xe9"}\n')
    with pytest.raises(UserError, match=r"a\.jsonl:2: not UTF-8"):
        list(read_documents("web", source("jsonl", "a.jsonl"), ["a.jsonl"]))
    Path("b.jsonl.gz").write_text('{"text": "plain"}\n')
    with pytest.raises(UserError, match="not a valid gzip file"):
        list(read_documents("web", source("jsonl", "b.jsonl.gz"), ["b.jsonl.gz"]))


def test_parquet_rows_and_missing_column():
    Path("pq").mkdir()
    pq.write_table(pa.table({"text": ["alpha", "beta"], "n": [1, 2]}), "pq/part-0.parquet")
    src = source("parquet", "pq/*.parquet")
    assert list(read_documents("web", src, ["pq/part-0.parquet"])) == [
        ("part-0.parquet:0", "alpha"),
        ("part-0.parquet:1", "beta"),
    ]
    src = source("parquet", "pq/*.parquet", text_field="content")
    with pytest.raises(UserError) as err:
        list(read_documents("web", src, ["pq/part-0.parquet"]))
    msg = str(err.value)
    assert "pq/part-0.parquet" in msg and "'content'" in msg and "text, n" in msg


def test_parquet_null_and_non_string_column():
    pq.write_table(pa.table({"text": ["a", None]}), "a.parquet")
    with pytest.raises(UserError, match="row 1: column 'text' is null"):
        list(read_documents("web", source("parquet", "a.parquet"), ["a.parquet"]))
    pq.write_table(pa.table({"text": [1, 2]}), "b.parquet")
    with pytest.raises(UserError, match="not a string"):
        list(read_documents("web", source("parquet", "b.parquet"), ["b.parquet"]))


def test_text_files_one_document_each_with_replacement():
    Path("txt/sub").mkdir(parents=True)
    Path("txt/a.txt").write_text("first file", encoding="utf-8")
    Path("txt/sub/b.txt").write_bytes(b"bad \xff byte")
    src = source("text", "txt")
    repairs = Counter()
    docs = list(read_documents("web", src, ["txt/a.txt", "txt/sub/b.txt"], repairs=repairs))
    assert docs == [("a.txt", "first file"), ("sub/b.txt", "bad \ufffd byte")]
    assert repairs == {"invalid_utf8": 1, "invalid_utf8_sequences": 1}


def test_parquet_invalid_utf8_names_file_and_row():
    column = pa.array([b"ok", b"fine", b"caf\xe9"], type=pa.binary()).view(pa.string())
    pq.write_table(pa.table({"text": column}), "bad.parquet")
    with pytest.raises(UserError, match=r"bad\.parquet: row 2: column 'text' is not UTF-8"):
        list(read_documents("web", source("parquet", "bad.parquet"), ["bad.parquet"]))


def test_warc_is_read_by_the_web_reader_not_here():
    """read_documents yields (id, text) of text formats; a warc source's pages go through runlib.curate.web."""
    with pytest.raises(ValueError, match="read_web_shard"):
        list(read_documents("web", source("warc", "x.warc.gz"), ["x.warc.gz"]))


def test_max_docs_whole_source_and_per_shard():
    write_jsonl(Path("a.jsonl"), [f"d{i}" for i in range(5)])
    write_jsonl(Path("b.jsonl"), [f"e{i}" for i in range(5)])
    src = source("jsonl", "*.jsonl", max_docs=7)
    assert len(list(read_documents("web", src, ["a.jsonl", "b.jsonl"]))) == 7
    # one of 2 shards: ceil(7 / 2) = 4
    assert [d for _, d in read_documents("web", src, ["a.jsonl"], shards=2)] == ["d0", "d1", "d2", "d3"]


def test_missing_file_is_a_user_error():
    with pytest.raises(UserError, match=r"nope\.jsonl: file not found"):
        list(read_documents("web", source("jsonl", "*.jsonl"), ["nope.jsonl"]))


def test_id_root():
    assert id_root("data/web/*.jsonl") == Path("data/web")
    assert id_root("data/**/x-*.jsonl") == Path("data")
    assert id_root("*.jsonl") == Path(".")
    assert relative_name("/elsewhere/a.jsonl", Path("data")) == "/elsewhere/a.jsonl"


# --- hostile data: bounded memory and time, file:line, never a traceback ---


def _refused(src, file: str, match: str) -> str:
    """Reading `file` of `src` is a UserError matching `match`, without a traceback or a hang."""
    return refused(lambda: list(read_documents("web", src, [file])), match=match)


def test_jsonl_line_over_the_document_limit_is_refused_at_its_line(hang_guard):
    from runlib.curate.readers import MAX_DOCUMENT_BYTES

    with open("big.jsonl", "wb") as f:  # line 2: zeros without a newline, sparse on disk
        f.write(b'{"text": "ok"}\n')
        f.truncate(f.tell() + MAX_DOCUMENT_BYTES + 4096)
    docs = read_documents("web", source("jsonl", "big.jsonl"), ["big.jsonl"])
    assert next(docs) == ("big.jsonl:1", "ok")
    with pytest.raises(UserError, match=r"big\.jsonl:2: a line longer than 64 MiB"):
        next(docs)


def test_gzip_line_past_the_limit_is_refused_before_it_is_held(monkeypatch):
    import runlib.curate.readers as readers

    monkeypatch.setattr(readers, "MAX_DOCUMENT_BYTES", 4 << 20)  # the mechanism at 4 MiB: seconds less gzip work
    with gzip.open("bomb.jsonl.gz", "wb", compresslevel=1) as f:  # a valid 6 MiB JSON line
        f.write(b'{"text": "' + b"a" * (6 << 20) + b'"}\n')
    _refused(source("jsonl", "bomb.jsonl.gz"), "bomb.jsonl.gz", r"bomb\.jsonl\.gz:1: a line longer than 4 MiB")


def test_gzip_bomb_of_short_lines_is_refused_by_its_ratio():
    line = json.dumps({"text": "a" * 4000}).encode() + b"\n"
    with gzip.open("lines.jsonl.gz", "wb", compresslevel=9) as f:  # 8 MiB inflated, ~30 KB on disk
        for _ in range((8 << 20) // len(line)):
            f.write(line)
    message = _refused(source("jsonl", "lines.jsonl.gz"), "lines.jsonl.gz", r"lines\.jsonl\.gz:\d+: .* inflate to")
    assert "decompression bomb" in message


def test_jsonl_deep_nesting_and_huge_integer_name_the_line():
    Path("deep.jsonl").write_text('{"text": "ok"}\n{"text": "x", "a": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    _refused(source("jsonl", "deep.jsonl"), "deep.jsonl", r"deep\.jsonl:2: JSON nested too deeply")
    Path("int.jsonl").write_text('{"text": "x", "n": ' + "9" * 5000 + "}\n")
    _refused(source("jsonl", "int.jsonl"), "int.jsonl", r"int\.jsonl:1: a JSON value Python cannot read")


def test_corrupt_parquet_page_is_a_user_error():
    pq.write_table(pa.table({"text": [f"document {i} " * 20 for i in range(5000)]}), "a.parquet", compression="snappy")
    data = bytearray(Path("a.parquet").read_bytes())
    middle = len(data) // 3  # inside the text column's data pages
    data[middle : middle + 200] = bytes(range(200))
    Path("a.parquet").write_bytes(bytes(data))
    message = _refused(source("parquet", "a.parquet"), "a.parquet", r"a\.parquet: rows from 0: a corrupt parquet page")
    assert "re-export" in message


def test_text_source_fifo_and_kernel_file_are_refused_not_read(tmp_path):
    import os

    os.mkfifo("pipe.txt")
    _refused(source("text", "pipe.txt"), "pipe.txt", r"pipe\.txt is a FIFO \(named pipe\), not a regular file")
    if not os.access("/proc/kmsg", os.R_OK):
        return  # the kernel log needs CAP_SYSLOG; the FIFO case above still ran
    _refused(source("text", "/proc/kmsg"), "/proc/kmsg", r"/proc/kmsg is a kernel file")
