"""`runlib plan --input-bytes`: a source's data jobs on paper, from its size alone (runlib.graph.scale)."""

from __future__ import annotations

import math

import pytest

from runlib.cli import main
from runlib.curate.memory import data_job_mem_mb
from runlib.errors import UserError
from runlib.graph.scale import BYTES_PER_TOKEN, RATES, source_scale
from runlib.spec import load_spec
from tests.conftest import ROOT
from tests.helpers import cli_refused

CRAWL = ROOT / "specs" / "variants" / "web-crawl-100tb.yaml"


def _stages(scale):
    return {s.stage: s for s in scale.stages}


def test_a_crawl_on_paper_follows_the_shard_size_and_the_rates():
    spec = load_spec(CRAWL).spec
    source = spec.data.sources["web"]
    scale = source_scale(spec, "web", 100 * 10**12)
    stages = _stages(scale)
    shards = math.ceil(100 * 10**12 / source.input.shard_bytes)
    assert [s.jobs for s in scale.stages] == [shards, shards, 1, shards, shards]
    shard = stages["curate_shard"]
    assert shard.bytes_per_job == 100 * 10**12 // shards <= source.input.shard_bytes
    assert (
        shard.mem_mb
        == data_job_mem_mb("curate_shard", shard.bytes_per_job, "warc")
        < data_job_mem_mb("curate_shard", shard.bytes_per_job)
    )
    rate = RATES["curate_shard warc trafilatura"].mb_per_cpu_s  # the spec extracts with trafilatura
    assert shard.cpu_hours == pytest.approx(100 * 10**12 / 2**20 / rate / 3600)
    assert scale.curated_bytes == source.tokens * BYTES_PER_TOKEN
    tokenize = stages["tokenize"]
    assert tokenize.cpu_hours == pytest.approx(scale.curated_bytes / 2**20 / RATES["tokenize"].mb_per_cpu_s / 3600)
    assert scale.cpu_hours == pytest.approx(sum(s.cpu_hours for s in scale.stages))
    # the copy into the splits is one job per shard; the one job per source reads tables, no text
    assert (
        stages["filter_shard"].bytes_per_job == scale.curated_bytes // shards
        and stages["curate_source"].bytes_per_job == 0
    )
    assert "no text" in stages["curate_source"].note
    # 4x the crawl: 4x the jobs and the CPU, the same memory per job
    bigger = _stages(source_scale(spec, "web", 400 * 10**12))
    assert abs(bigger["curate_shard"].jobs - 4 * shards) <= 3 and bigger["curate_shard"].mem_mb == shard.mem_mb
    assert bigger["curate_shard"].cpu_hours == pytest.approx(4 * shard.cpu_hours)


def test_the_cli_plans_a_crawl_whose_files_are_not_here(capsys):
    assert not (ROOT / "data" / "crawl").exists()
    assert main(["plan", str(CRAWL), "--input-bytes", "web=100T"]) == 0
    out = capsys.readouterr().out
    assert "source web on paper: 100.0 TB of input" in out
    assert "curate_shard" in out and "93,133" in out and "rates (MB of work per CPU second" in out


@pytest.mark.parametrize(
    "spec, item, named",
    [
        (CRAWL, "web=lots", ["--input-bytes web=lots", "not a count"]),
        (CRAWL, "web=0", ["at least 1 byte"]),
        (CRAWL, "web", ["give SOURCE=SIZE"]),
        (CRAWL, "nosuch=1T", ["no source 'nosuch'", "web"]),
        (ROOT / "specs" / "demo.yaml", "docs=1T", ["builtin source"]),
        (ROOT / "specs" / "llama2-7b.yaml", "public_mix=1T", ["data.sources.public_mix.input", "shard_bytes"]),
    ],
)
def test_the_cli_refuses_what_it_cannot_plan(capsys, spec, item, named):
    cli_refused(["plan", str(spec), "--input-bytes", item], capsys, *named)


def test_a_source_without_declared_tokens_is_refused():
    spec = load_spec(CRAWL).spec
    web = spec.data.sources["web"].model_copy(update={"tokens": None})
    spec = spec.model_copy(update={"data": spec.data.model_copy(update={"sources": {"web": web}})})
    with pytest.raises(UserError, match=r"data.sources.web.tokens: not declared"):
        source_scale(spec, "web", 10**12)
