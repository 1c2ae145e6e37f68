"""curate.pii: ner with a model path: a real spaCy pipeline written to disk (an entity_ruler: no trained model
can be downloaded here, and the stage treats every entity component alike) masks the labels the spec names,
after the rule-based kinds; its files are keyed and checked; a folder that is not a pipeline, or that spaCy
cannot load, is an error naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import spacy

from runlib.curate.config import CurateShardConfig
from runlib.curate.stage import curate_shard
from runlib.errors import UserError
from runlib.graph.configs import ner_files
from tests.curate import PROSE, input_file, jsonl_source, make_spec, read_lines, write_jsonl

FIELD = "data.sources.web.curate.ner.model"
PATTERNS = [
    {"label": "PERSON", "pattern": "Ada Lovelace"},
    {"label": "PERSON", "pattern": [{"LOWER": "alan"}, {"LOWER": "turing"}]},
    {"label": "GPE", "pattern": "London"},
]


def write_pipeline(folder: str = "ner") -> str:
    nlp = spacy.blank("en")
    nlp.add_pipe("entity_ruler").add_patterns(PATTERNS)
    nlp.to_disk(folder)
    return folder


def ner_config(model: str, labels=("PERSON",), pii: str = "ner") -> CurateShardConfig:
    spec = make_spec({"web": jsonl_source(pii=pii, ner={"model": model, "labels": list(labels)})})
    source = spec.data.sources["web"]
    return CurateShardConfig(
        input=source.input,
        curate=source.curate,
        shard=0,
        shards=1,
        files=[input_file("data/a.jsonl")],
        ner_model=ner_files(model, FIELD),
        ner_runtime=f"spacy {spacy.__version__}",
    )


TEXTS = [
    f"Ada Lovelace wrote to alan turing from London at ada@example.com. {PROSE}",
    f"Nobody is named here. {PROSE}",
]


def test_entities_of_the_named_labels_are_masked_after_the_rule_kinds():
    write_jsonl("data/a.jsonl", TEXTS)
    result = curate_shard(ner_config(write_pipeline()), Path("out"), "web")
    first, second = (row["text"] for row in read_lines("out/docs.jsonl"))
    assert first.startswith("[PERSON] wrote to [PERSON] from London at ")
    assert "ada@example.com" not in first and "[PERSON]" not in second
    step = next(s for s in result["steps"] if s["step"] == "pii_ner")
    assert step["reasons"]["ner_PERSON"] == 2 and step["reasons"]["email"] == 1
    assert step["reasons"]["docs_changed"] == 1


def test_the_labels_choose_what_is_masked():
    write_jsonl("data/a.jsonl", TEXTS)
    curate_shard(ner_config(write_pipeline(), labels=("GPE",)), Path("out"), "web")
    first = read_lines("out/docs.jsonl")[0]["text"]
    assert first.startswith("Ada Lovelace wrote to alan turing from [GPE] at ")


def test_the_model_s_files_are_in_the_key_and_checked_before_loading():
    write_jsonl("data/a.jsonl", TEXTS)
    config = ner_config(write_pipeline())
    patterns = Path("ner/entity_ruler/patterns.jsonl")
    assert str(patterns) in {f.path for f in config.ner_model}
    patterns.write_text(patterns.read_text().replace("London", "Paris"))
    assert ner_config("ner").ner_model != config.ner_model  # an edited model is another key
    with pytest.raises(UserError, match=f"{FIELD}: input file ner/entity_ruler/patterns.jsonl changed"):
        curate_shard(config, Path("out"), "web")
    assert not Path("out/docs.jsonl").exists()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Path("notner").mkdir() or Path("notner/model.bin").write_bytes(b"\0" * 64), "not a spaCy pipeline"),
        (lambda: Path("notner").write_text("a file"), "not a folder here"),
    ],
)
def test_a_folder_that_is_not_a_pipeline_is_refused_with_its_field(make, message):
    make()
    with pytest.raises(UserError, match=f"{FIELD}: 'notner' is {message}"):
        ner_files("notner", FIELD)


def test_a_pipeline_spacy_cannot_load_or_without_entities_is_refused_with_its_field():
    write_jsonl("data/a.jsonl", TEXTS)
    write_pipeline()
    Path("ner/config.cfg").write_text("[nlp\nlang = ")
    with pytest.raises(UserError, match=f"{FIELD}: spaCy .* cannot load 'ner'"):
        curate_shard(ner_config("ner"), Path("out"), "web")
    spacy.blank("en").to_disk("empty")
    with pytest.raises(UserError, match=f"{FIELD}: the pipeline in 'empty' has no entity component"):
        curate_shard(ner_config("empty"), Path("out"), "web")
