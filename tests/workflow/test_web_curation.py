"""A web source from WARC files through real Snakemake, up to its curated train/held-out split: every
planted case of the sample crawl ends where it should (runlib.curate.sample_web)."""

import json
import os

import pytest

from runlib.cli import main
from runlib.curate.sample_web import BANNED_WORD, BLOCKED_HOST, DEMO_MODULES, NAV_WORDS, sample_crawl
from runlib.graph.build import build_graph
from runlib.spec import load_spec
from runlib.store.settings import done_stamp
from tests.workflow.conftest import TINY, snakemake

pytestmark = pytest.mark.slow

MODULES = ("json", "csv", "textwrap", "fractions", "heapq", "bisect", "difflib", "statistics", "shlex", "string")
WEB_SOURCE = """    docs:
      domain: web
      input: {format: warc, path: "crawl/*.warc.gz"}
      tokens: 100K
      curate:
        url_filter: {blocklist: crawl/blocklist, banned_words: [BANNED]}
        languages: [en]
        min_chars: 200
        pii: mask
        dedup: {exact: true, minhash: {threshold: 0.7}}
        keep_dropped: 3
""".replace("BANNED", BANNED_WORD)


def test_a_warc_source_is_curated_by_snakemake(workdir, capsys):
    sample_crawl(workdir / "crawl", files=2, modules=MODULES)
    text = TINY.read_text()
    old = "    docs:\n      domain: wiki\n      input: {format: builtin, name: python_docs, max_docs: 150}\n"
    old += "      tokens: 100K\n      curate: {min_chars: 200}\n"
    assert old in text
    spec = workdir / "web.yaml"
    spec.write_text(text.replace(old, WEB_SOURCE).replace("heldout_docs: 20", "heldout_docs: 2"))
    cwd = os.getcwd()
    os.chdir(workdir)  # the spec's paths are relative to where the workflow runs
    try:
        graph = build_graph(load_spec(str(spec)).spec)
    finally:
        os.chdir(cwd)
    node = graph.find("curate_source", source="docs")
    parts = graph.curated("docs")
    proc = snakemake(workdir, spec, "--cores", "2", *(str(done_stamp("filter_shard", n.key)) for n in parts))
    assert proc.returncode == 0, proc.stderr[-3000:]

    artifact = workdir / "work" / "artifacts" / "curate_source" / node.key
    part_dirs = [workdir / "work" / "artifacts" / "filter_shard" / n.key for n in parts]
    rows = [
        json.loads(line) for name in ("train.jsonl", "heldout.jsonl") for d in part_dirs for line in (d / name).open()
    ]
    urls = [r["id"] for r in rows]
    assert len(urls) == len(set(urls))
    assert {r["url"] for r in rows} == set(urls) and all(r["date"] and r["warc_record_id"] for r in rows)
    # one page per module, each once: of the json page, its exact mirror and its near-duplicate copy (in
    # different shards) the first in shard order stays
    json_pages = {f"https://{h}/json.html" for h in ("docs.example.org", "mirror.example.net", "copy.example.com")}
    assert len(json_pages & set(urls)) == 1
    assert sorted(set(urls) - json_pages) == sorted(f"https://docs.example.org/{m}.html" for m in MODULES[1:])
    assert not [u for u in urls if BLOCKED_HOST in u or BANNED_WORD in u or "stadt.example.de" in u]
    texts = "\n".join(r["text"] for r in rows)
    assert not [w for w in NAV_WORDS if w in texts]  # the site chrome went at extraction
    planted = ("maintainer.name@python-docs.example.com", "415-555-0132", "7946 0958", "4539 1488 0343 6467")
    assert not [p for p in (*planted, "2606:4700:4700::1111") if p in texts]  # masked
    stats = json.loads((artifact / "stats.json").read_text())
    steps = {row["step"]: row for row in stats["steps"]}
    assert steps["warc_records"]["reasons"]["not_response"] == 2
    assert steps["warc_records"]["reasons"]["not_200"] == 2
    assert steps["url_filter"]["reasons"]["blocked_domain"] == 1
    assert steps["url_filter"]["reasons"]["banned_word"] == 1
    pii = steps["pii_mask"]["reasons"]
    # the planted paragraph's phones, card and IPv6; pydoc's pages hold their authors' e-mail addresses too
    assert (pii["phone"], pii["card"], pii["ipv6"]) == (2, 1, 1) and pii["email"] >= 1
    assert steps["language"]["docs_in"] - steps["language"]["docs_out"] == 1

    # runlib docs: the kept documents as the artifact holds them, and the sample of what each step dropped
    assert main(["docs", str(spec), "--source", "docs"]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert printed == [json.loads(line) for d in part_dirs for line in (d / "train.jsonl").open()]
    assert main(["docs", str(spec), "--source", "docs", "--dropped"]) == 0
    sample = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    by_reason = {(row["step"], row["reason"]): row for row in sample}
    assert by_reason[("url_filter", "blocked_domain")]["id"].startswith(f"https://{BLOCKED_HOST}/")
    assert by_reason[("url_filter", "banned_word")]["text"] == ""  # dropped before extraction
    assert "stadt.example.de" in by_reason[("language", "lang_de")]["url"]
    near = [row for row in sample if row["step"] in ("exact_dedup", "cross_shard_dedup", "minhash_dedup")]
    assert {row["id"] for row in near} == json_pages - set(urls) and all(row["text"] for row in near)
    assert main(["docs", str(spec), "--source", "docs", "--dropped", "--reason", "blocked_domain", "--limit", "1"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1
    assert main(["docs", str(spec), "--source", "docs", "--dropped", "--reason", "no_such"]) == 2
    assert "url_filter:banned_word (1)" in capsys.readouterr().err
    assert main(["docs", str(spec), "--source", "nope"]) == 2
    assert "its sources: docs" in capsys.readouterr().err


QUALITY_SOURCE = """    web:
      domain: web
      input: {format: warc, path: "crawl/*.warc.gz"}
      tokens: 100K
      curate:
        min_chars: 200
        dedup: {exact: true}
        classifier: {positives: [docs], negatives_docs: 30, keep_top_fraction: 0.5, dim: 16, bucket: 20000, epoch: 10, lr: 0.5}
        perplexity: {reference: [docs], keep_percentiles: [0, 90]}
        keep_dropped: 2
"""


def test_quality_filters_train_in_the_dag_and_score_every_document(workdir):
    sample_crawl(workdir / "crawl", files=2, modules=DEMO_MODULES)
    text = TINY.read_text()
    anchor = "    code:\n"
    assert anchor in text
    spec = workdir / "quality.yaml"
    spec.write_text(text.replace(anchor, QUALITY_SOURCE + anchor, 1))
    graph = build_graph(load_spec(str(spec)).spec)
    node = graph.find("filter_quality", source="web")
    scoring = [n for n in graph.of("score_quality") if n.params["source"] == "web"]  # one job per curate shard
    assert len(scoring) == len([n for n in graph.of("curate_shard") if n.params["source"] == "web"]) >= 2
    assert set(scoring[0].inputs) == {"shard", "source", "classifier", "ngram_lm"}
    assert set(node.inputs) == {"source"} | {f"scores{i}" for i in range(len(scoring))}
    parts = graph.curated("web")  # training reads the filtered data, shard by shard
    assert [set(n.inputs) for n in parts] == [{"shard", "source", "scores", "quality"}] * len(scoring)
    assert all(n.inputs["quality"] == node.key for n in parts)
    assert [n.inputs["curated"] for n in graph.of("tokenize") if n.params["source"] == "web"] == [n.key for n in parts]
    proc = snakemake(workdir, spec, "--cores", "2", *(str(done_stamp("filter_shard", n.key)) for n in parts))
    assert proc.returncode == 0, proc.stderr[-3000:]

    artifacts = workdir / "work" / "artifacts"
    classifier_key = scoring[0].inputs["classifier"]
    classifier = json.loads((artifacts / "train_classifier" / classifier_key / "stats.json").read_text())
    assert {"precision", "recall", "f1"} <= set(classifier["counts"])
    stats = json.loads((artifacts / "filter_quality" / node.key / "stats.json").read_text())
    perplexity, scored = stats["steps"][-2:]
    assert (perplexity["step"], scored["step"]) == ("perplexity", "classifier")
    assert scored["docs_out"] == -(-scored["docs_in"] // 2)  # the top half by score, rounded up
    rows = [
        json.loads(line)
        for name in ("train.jsonl", "heldout.jsonl")
        for part in parts
        for line in (artifacts / "filter_shard" / part.key / name).open()
    ]
    assert len(rows) == scored["docs_out"]
    low, high = perplexity["keep_range"]
    assert all(low <= r["perplexity"] <= high and r["quality_score"] >= scored["threshold"] for r in rows)

    # another spec that names the same anchors the same way reuses the models: same keys
    other = workdir / "other.yaml"
    other.write_text(spec.read_text().replace("name: tiny", "name: tiny-other").replace("lr: 3.0e-3", "lr: 2.0e-3"))
    again = build_graph(load_spec(str(other)).spec).find("filter_quality", source="web")
    assert again.inputs == node.inputs and again.key == node.key
