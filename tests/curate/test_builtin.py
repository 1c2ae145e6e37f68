import re

import pytest

from runlib.curate import builtin
from runlib.curate.builtin import (
    ARITHMETIC_DEFAULT_DOCS,
    arithmetic_document,
    builtin_documents,
    stdlib_files,
    stdlib_root,
)
from runlib.errors import UserError

LINE = re.compile(r"^(\d+) ([+*-]) (\d+) = (-?\d+)$")


def test_arithmetic_is_correct_and_a_function_of_the_index():
    docs, prov = builtin_documents("arithmetic", 300)
    assert len(docs) == 300 and prov["kind"] == "arithmetic" and prov["documents"] == 300
    for i, (doc_id, text) in enumerate(docs):
        assert doc_id == f"arithmetic:{i}"
        assert text == arithmetic_document(i)
        lines = text.splitlines()
        assert 10 <= len(lines) <= 30
        for line in lines:
            a, op, b, c = LINE.match(line).groups()
            assert 1 <= len(a) <= 6 and 1 <= len(b) <= 6
            expected = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]
            assert int(c) == expected >= 0
    # a longer list starts with the same documents
    more, _ = builtin_documents("arithmetic", 400)
    assert more[:300] == docs


def test_arithmetic_default_size():
    docs, _ = builtin_documents("arithmetic", None)
    assert len(docs) == ARITHMETIC_DEFAULT_DOCS


@pytest.mark.parametrize("kind", ["python_docs", "python_code", "arithmetic"])
def test_deterministic(kind):
    docs1, prov1 = builtin_documents(kind, None)
    docs2, prov2 = builtin._documents.__wrapped__(kind, None)  # computed again, bypassing the cache
    docs2, prov2 = list(docs2), dict(prov2)
    assert prov1 == prov2 and docs1 == docs2
    assert prov1["sha256"] and prov1["documents"] == len(docs1) > 100
    assert len({doc_id for doc_id, _ in docs1}) == len(docs1)


def test_python_code_is_the_stdlib_sorted_without_tests():
    docs, prov = builtin_documents("python_code", None)
    ids = [doc_id for doc_id, _ in docs]
    assert ids == sorted(ids)
    assert "python_code:json/decoder.py" in ids
    assert not any(re.search(r"/(test|tests|idlelib|lib2to3|site-packages)/", "/" + i.split(":", 1)[1]) for i in ids)
    assert prov["files_read"] == len(docs) == len(stdlib_files(stdlib_root()))
    text = dict(docs)["python_code:json/decoder.py"]
    assert "class JSONDecoder" in text


def test_python_docs_has_topics_and_module_docstrings():
    docs, prov = builtin_documents("python_docs", None)
    texts = dict(docs)
    topics = [i for i in texts if i.startswith("python_docs:topic:")]
    assert len(topics) > 50 and "python_docs:topic:if" in texts
    module = texts["python_docs:module:json.decoder"]
    assert module.startswith("json.decoder\n\n") and "json.decoder.JSONDecoder\n\n" in module
    assert prov["root"] == str(stdlib_root()) and prov["python_version"]


def test_max_docs_truncates_stdlib_lists():
    docs, prov = builtin_documents("python_code", 5)
    assert len(docs) == 5 == prov["documents"]


def test_unknown_kind_lists_the_known_ones():
    with pytest.raises(UserError) as err:
        builtin_documents("python_books", None, source_name="docs")
    msg = str(err.value)
    assert "data.sources.docs.input.name" in msg and "python_books" in msg
    assert all(k in msg for k in ("arithmetic", "python_code", "python_docs"))
    with pytest.raises(UserError, match="missing"):
        builtin_documents(None, None, source_name="docs")
