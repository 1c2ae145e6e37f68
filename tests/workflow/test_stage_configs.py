"""Stage configs are the keys: a key changes exactly when its stage's config or an input's key changes;
renaming the run changes none; `runlib plan --stage` prints a config and `runlib plan` names the config
fields changed since the last build; a manifest that does not validate is a UserError naming the file.

The property test walks every leaf field of the loaded spec (the pydantic model), gives it another valid
value of its type, rebuilds the stage graph and compares it with the original one. No stage runs.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel

from runlib.cli import main
from runlib.curate import inputs
from runlib.errors import UserError
from runlib.graph.build import StageGraph, build_graph
from runlib.graph.plan_view import changed_fields
from runlib.spec import load_spec
from runlib.spec.loader import validate_data
from runlib.spec.units import BatchSize, Duration
from runlib.store.manifest import read_manifest
from tests.annotations import strip_optional
from tests.conftest import ROOT
from tests.helpers import DATA_STAGES, fake_manifest, write_fake_manifest
from tests.workflow.conftest import TINY

DEMO = ROOT / "specs" / "demo.yaml"
NOTHING_READS = ("name", "description", "tracking", "audit")  # no stage config may hold these
SKIP = object()
# Sections with required fields have no default to switch on: a small valid one of each (the demo's shape;
# model.attention's MLA has none here, as it needs kv_heads equal to heads, which the demo and tiny specs are not).
SPECIMENS: dict[str, dict[str, Any]] = {
    "MoeSpec": {"experts": 4, "top_k": 2, "expert_d_ff": 64, "aux_loss": 0.01},
    "MtpSpec": {"depth": 1, "loss_weight": 0.3},
}


# ------------------------------------------------------------------------------ walking the schema


def leaves(model: BaseModel, path: tuple = ()) -> list[tuple[tuple, Any, Any]]:
    """(path, value, annotation) of every leaf field; sections, sources, phases and tasks are walked into."""
    out = []
    for name, field in type(model).model_fields.items():
        value, where = getattr(model, name), (*path, name)
        if isinstance(value, BaseModel):
            out += leaves(value, where)
        elif isinstance(value, dict) and value and all(isinstance(v, BaseModel) for v in value.values()):
            for k, v in value.items():
                out += leaves(v, (*where, k))
        elif isinstance(value, list) and value and all(isinstance(v, BaseModel) for v in value):
            for i, v in enumerate(value):
                out += leaves(v, (*where, i))
        else:
            out.append((where, value, field.annotation))
    return out


def other_value(value: Any, annotation: Any) -> Any:
    """A different valid JSON value for a field of this type (SKIP where there is no obvious one)."""
    kind = strip_optional(annotation)
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if value is None:
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            if kind.__name__ in SPECIMENS:
                return SPECIMENS[kind.__name__]
            try:
                return kind().model_dump(mode="json")
            except Exception:
                return SKIP
        if origin is Literal:
            return args[0]
        simple = {int: 2, float: 0.5, str: "x", bool: True, Duration: "10 steps"}
        return simple.get(kind, SKIP)
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 1.5 if value else 0.25
    if origin is Literal:
        choices = [c for c in args if c != value]
        return choices[0] if choices else SKIP
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, Duration):
        scale = 0.5 if value.unit == "percent" else 2
        return str(Duration(value.amount * scale, value.unit))
    if isinstance(value, BatchSize):
        return str(BatchSize(value.amount * 2, value.unit))
    if isinstance(value, tuple):
        return [v * 0.99 for v in value]
    if isinstance(value, list):
        item = strip_optional(args[0]) if args else str
        if typing.get_origin(item) is Literal:
            new = [c for c in typing.get_args(item) if c not in value]
            return [*value, new[0]] if new else SKIP
        return [*value, "zz"] if item is str else SKIP
    if isinstance(value, dict):
        if not value:
            return SKIP
        first = next(iter(value))
        if isinstance(value[first], str):
            return {**value, "ZZZ999": "a reason"}
        return {**value, first: value[first] * 1.5 if value[first] else 0.25}
    return SKIP


def set_path(data: dict, path: tuple, value: Any) -> dict:
    out = copy.deepcopy(data)
    target = out
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return out


def graph_of(data: dict) -> StageGraph:
    return build_graph(validate_data(data).spec)


def changes(before: StageGraph, after: StageGraph) -> tuple[set[str], set[str], set[str]]:
    """Over the stage instances both graphs have: (keys changed, configs changed, expected key changes =
    configs changed or, transitively, an input changed)."""
    old = {n.instance: n for n in before.nodes}
    new = {n.instance: n for n in after.nodes}
    common = [n.instance for n in after.nodes if n.instance in old]
    keys = {i for i in common if old[i].key != new[i].key}
    configs = {i for i in common if old[i].config.model_dump(mode="json") != new[i].config.model_dump(mode="json")}
    expected = set(configs)
    for node in after.nodes:  # graph order: inputs come first
        if node.instance not in old:
            continue
        ins_new = {role: n.instance for role, n in after.input_nodes(node).items()}
        ins_old = {role: n.instance for role, n in before.input_nodes(old[node.instance]).items()}
        if ins_new != ins_old or any(i in expected or i not in old for i in ins_new.values()):
            expected.add(node.instance)
    return keys, configs, expected


# --------------------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("spec_file", [DEMO, TINY], ids=["demo", "tiny"])
def test_keys_change_exactly_with_configs_and_inputs(spec_file: Path) -> None:
    spec = load_spec(spec_file).spec
    data = spec.model_dump(mode="json")
    base = build_graph(spec)
    assert [n.key for n in graph_of(data).nodes] == [n.key for n in base.nodes]  # the dump round-trips

    fields = leaves(spec)
    exercised, skipped, moved = 0, [], 0
    for path, value, annotation in fields:
        dotted = ".".join(map(str, path))
        new = other_value(value, annotation)
        if new is SKIP:
            skipped.append(f"{dotted} (no other value)")
            continue
        try:
            graph = graph_of(set_path(data, path, new))
        except Exception as exc:  # the edit does not load or derive: not a spec a run could have
            skipped.append(f"{dotted} ({type(exc).__name__})")
            continue
        exercised += 1
        keys, configs, expected = changes(base, graph)
        assert keys == expected, f"{dotted}: keys changed {sorted(keys)}, expected {sorted(expected)}"
        moved += bool(keys)
        if path[0] in NOTHING_READS:
            assert not configs, f"{dotted} is in the configs of {sorted(configs)}"
        if path[0] not in ("data", "tokenizer"):
            data_configs = {i for i in configs if i.split()[0] in DATA_STAGES}
            assert not data_configs, f"{dotted} changed data-stage configs {sorted(data_configs)}"
    print(f"{spec_file.name}: {exercised} of {len(fields)} fields exercised, {moved} moved keys; skipped: {skipped}")
    assert exercised >= 0.8 * len(fields), f"only {exercised} of {len(fields)} fields exercised; skipped: {skipped}"
    assert moved >= 0.5 * exercised  # most edits do change some key: the configs are not empty


@pytest.mark.parametrize("spec_file", [DEMO, TINY], ids=["demo", "tiny"])
def test_renaming_the_run_changes_no_key(spec_file: Path) -> None:
    spec = load_spec(spec_file).spec
    data = spec.model_dump(mode="json")
    renamed = {**data, "name": "another-name", "description": "another description"}
    assert [n.key for n in graph_of(renamed).nodes] == [n.key for n in build_graph(spec).nodes]


def test_learned_positions_longer_phase_changes_every_training_key() -> None:
    """The issue's example: with learned positions the position table has max(seq_len) rows, so doubling
    phase long's seq_len changes the shape of every phase's model."""
    data = load_spec(DEMO).spec.model_dump(mode="json")
    data["model"]["position"] = "learned"
    before = graph_of(data)
    long = next(i for i, p in enumerate(data["phases"]) if p["name"] == "long")
    assert data["phases"][long]["seq_len"] == 512
    after = graph_of(set_path(data, ("phases", long, "seq_len"), 1024))
    for stage in ("train_phase", "eval_phase"):
        old, new = before.of(stage), after.of(stage)
        assert len(old) == len(new) == 4
        assert all(a.key != b.key for a, b in zip(old, new, strict=True)), stage
    # the data stages read nothing of the model: they stay
    for stage in DATA_STAGES:
        assert [n.key for n in before.of(stage)] == [n.key for n in after.of(stage)]


# ----------------------------------------------------------------------------------- runlib plan


def fake_build(node) -> None:
    """An artifact for node as if it had been built (a manifest and no files)."""
    write_fake_manifest(node.dir, node)


def test_plan_stage_prints_config_key_and_inputs(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    graph = build_graph(load_spec(DEMO).spec)
    assert main(["plan", str(DEMO), "--stage", "tokenize code/0"]) == 0
    shown = json.loads(capsys.readouterr().out)
    node = graph.find("tokenize", source="code")
    assert shown["key"] == node.key and shown["stage"] == "tokenize" and shown["built"] is False
    assert shown["config"] == {"token_dtype": "auto"}
    assert shown["inputs"] == {
        "curated": {"instance": "filter_shard code/0", "key": graph.find("filter_shard", source="code", shard=0).key},
        "tokenizer": {"instance": "train_tokenizer", "key": graph.of("train_tokenizer")[0].key},
    }
    assert main(["plan", str(DEMO), "--stage", "eval_phase long"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["config"]["seq_len"] == 512 and shown["config"]["phase"] == "long"
    # a key names the instance as well
    assert main(["plan", str(DEMO), "--stage", node.key]) == 0
    assert json.loads(capsys.readouterr().out)["instance"] == "tokenize code/0"
    # a typo: exit 2 and a suggestion
    assert main(["plan", str(DEMO), "--stage", "tokenise code/0"]) == 2
    assert "did you mean 'tokenize code/0'" in capsys.readouterr().err


def test_plan_names_the_config_fields_changed_since_the_last_build(
    work: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for node in build_graph(load_spec(DEMO).spec).nodes:
        if node.stage in ("curate_shard", "curate_source", "train_tokenizer", "tokenize"):
            fake_build(node)
    text = DEMO.read_text()
    edited = tmp_path / "demo.yaml"
    edited.write_text(
        text.replace("  vocab_size: 3840", "  vocab_size: 3800").replace("train_bytes: 2M", "train_bytes: 3M")
    )
    assert main(["plan", str(edited), "--format", "json"]) == 0
    rows = {r["instance"]: r for r in json.loads(capsys.readouterr().out)["stages"]}
    assert rows["curate_source docs"]["built"] and rows["curate_source docs"]["changed"] is None
    assert rows["train_tokenizer"]["changed"] == ["train_bytes", "vocab_size"]
    assert rows["tokenize code/0"]["changed"] == ["input tokenizer"]
    assert rows["train_phase foundation"]["changed"] is None  # never built: nothing to compare with
    assert main(["plan", str(edited)]) == 0
    out = capsys.readouterr().out
    assert "changed since last built: train_bytes, vocab_size" in out
    assert "changed since last built: input tokenizer" in out


def test_plan_compares_with_the_closest_earlier_build_not_the_newest(
    work: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A baseline and a variant with another tokenizer built into one work directory, then the baseline's
    eval.heldout_tokens edited: the evaluations changed in heldout_tokens only. Comparing with the newest
    build (the variant's) also named 'input model, input tokenizer, input tokens' as changed."""
    baseline = load_spec(DEMO).spec
    for node in build_graph(baseline).nodes:
        fake_build(node)
    variant = tmp_path / "variant.yaml"
    variant.write_text(DEMO.read_text().replace("  vocab_size: 3840", "  vocab_size: 3800"))
    for node in build_graph(load_spec(variant).spec).nodes:
        if not node.manifest_path.exists():
            fake_build(node)
            os.utime(node.manifest_path, (2e9, 2e9))  # built after the baseline
    edited = tmp_path / "edited.yaml"
    edited.write_text(DEMO.read_text().replace("  heldout_tokens: 32K ", "  heldout_tokens: 16K "))
    assert main(["plan", str(edited), "--format", "json"]) == 0
    rows = [r for r in json.loads(capsys.readouterr().out)["stages"] if not r["built"]]
    assert rows and all(r["stage"] == "eval_phase" for r in rows)
    assert all(r["changed"] == ["heldout_tokens"] for r in rows), rows


def test_changed_fields_are_dotted_paths(work: Path) -> None:
    data = load_spec(TINY).spec.model_dump(mode="json")
    curate = data["data"]["sources"]["code"]["curate"]

    def node():
        return graph_of(data).find("curate_shard", source="code", shard=0)

    first = node()
    fake_build(first)
    curate["dedup"]["exact"] = False
    curate["languages"] = ["en"]  # an empty list that gained an item: named once
    curate["quality"] = ["gopher", "c4"]
    second = node()
    assert changed_fields(second, read_manifest(first.dir)) == [
        "curate.dedup.exact",
        "curate.languages",
        "curate.quality",
        "quality_rules.c4",  # how each rule set counts its words and sentences (spaCy's release)
        "quality_rules.gopher",
    ]
    fake_build(second)
    curate["quality"] = ["gopher", "fineweb"]
    assert changed_fields(node(), read_manifest(second.dir)) == [
        "curate.quality.1",
        "quality_rules.c4",
        "quality_rules.fineweb",
    ]


def test_a_manifest_that_does_not_validate_is_a_user_error(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node = build_graph(load_spec(TINY).spec).of("train_tokenizer")[0]
    node.dir.mkdir(parents=True)
    old = {"stage": node.stage, "instance": node.instance, "key": node.key, "projection": {}, "inputs": {}}
    node.manifest_path.write_text(json.dumps(old))
    with pytest.raises(UserError, match=r"manifest\.json: not a valid manifest \(.*projection") as err:
        read_manifest(node.dir)
    assert str(node.manifest_path) in str(err.value)
    node.manifest_path.write_text("{not json")
    with pytest.raises(UserError, match="not a readable JSON manifest"):
        read_manifest(node.dir)
    # `runlib plan` still lists the stages (the unreadable artifact counts as built: its folder is taken)
    assert main(["plan", str(TINY)]) == 0


# -------------------------------------------------------------------- keys of file sources, batch ramps


def _file_source_spec(tmp_path: Path) -> Path:
    """The tiny spec with its docs source read from raw/*.jsonl (two files: two curation shards)."""
    text = TINY.read_text().replace(
        "input: {format: builtin, name: python_docs, max_docs: 150}", 'input: {format: jsonl, path: "raw/*.jsonl"}'
    )
    assert "raw/*.jsonl" in text
    (tmp_path / "spec.yaml").write_text(text)
    raw = tmp_path / "raw"
    raw.mkdir()
    for name in ("a", "b"):
        docs = [f"document {name}{i}: " + "some words of text " * 20 for i in range(3)]
        (raw / f"{name}.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    return tmp_path / "spec.yaml"


def test_plan_keys_follow_the_content_of_file_sources(
    work: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 8, problem 3: appending a document to one input file and rewriting one in another (same size)
    left `runlib plan` saying "built" when a file source was keyed by its paths only."""
    monkeypatch.chdir(tmp_path)
    spec = _file_source_spec(tmp_path)
    for node in build_graph(load_spec(spec).spec).nodes:
        fake_build(node)
    assert main(["plan", str(spec), "--format", "json"]) == 0
    assert all(r["built"] for r in json.loads(capsys.readouterr().out)["stages"])

    with open("raw/a.jsonl", "a") as f:
        f.write(json.dumps({"text": "an appended document " * 10}) + "\n")
    b = Path("raw/b.jsonl").read_text()
    Path("raw/b.jsonl").write_text(b.replace("document b1", "document B1"))  # same size, other content
    assert Path("raw/b.jsonl").stat().st_size == len(b.encode())

    assert main(["plan", str(spec), "--format", "json"]) == 0
    rows = {r["instance"]: r for r in json.loads(capsys.readouterr().out)["stages"]}
    assert rows["curate_shard docs/0"]["changed"] == ["files.0.bytes", "files.0.digest"]
    assert rows["curate_shard docs/1"]["changed"] == ["files.0.digest"]
    assert not rows["curate_source docs"]["built"] and not rows["train_phase anneal"]["built"]
    assert rows["curate_shard code/0"]["built"] and rows["curate_source arithmetic"]["built"]

    # `runlib plan` of a file source stays free of torch and mlflow (and hashed nothing: the cache is warm)
    code = (
        "import sys; from runlib.curate import inputs; from runlib.cli import main; calls = [];"
        "digest = inputs.file_digest; inputs.file_digest = lambda p: calls.append(p) or digest(p);"
        "assert main(['plan', 'spec.yaml']) == 0;"
        "bad = [m for m in ('torch', 'accelerate', 'mlflow') if m in sys.modules];"
        "sys.exit(f'imported {bad}, hashed {calls}' if bad or calls else 0)"
    )
    env = {**os.environ, "RUNLIB_WORK_DIR": str(work), "PYTHONPATH": str(ROOT)}
    monkeypatch.setattr(inputs, "RACY_WINDOW_NS", 0)  # files written a moment ago may be cached
    assert main(["plan", str(spec), "--format", "json"]) == 0
    capsys.readouterr()
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr + proc.stdout


def test_batch_ramps_key_the_training_phases() -> None:
    """Issue 8, problem 3: ramps of 8 sequences for 5 steps then 32, and 16 for 8 steps then 32, gave
    one training key; the loader's segments are in the train_phase config now."""
    data = load_spec(TINY).spec.model_dump(mode="json")

    def ramped(first: int, steps: int) -> StageGraph:
        seq_len = data["model"]["seq_len"]
        ramp = [
            {"after": "0 tokens", "global_batch": f"{first} sequences"},
            {"after": f"{first * steps * seq_len} tokens", "global_batch": "32 sequences"},
        ]
        return graph_of(set_path(data, ("batch", "ramp"), ramp))

    a, b = ramped(8, 5), ramped(16, 8)
    first_a, first_b = a.of("train_phase")[0], b.of("train_phase")[0]
    segments = [(s["steps"], s["batch_sequences"]) for s in first_a.config.model_dump()["loader"]["segments"]]
    assert segments[0] == (5, 8) and segments[1][1] == 32
    segments = [(s["steps"], s["batch_sequences"]) for s in first_b.config.model_dump()["loader"]["segments"]]
    assert segments[0] == (8, 16) and segments[1][1] == 32
    assert first_a.key != first_b.key
    assert "loader.segments.0.steps" in changed_fields(first_b, fake_manifest(first_a))
    for x, y in zip(a.of("train_phase") + a.of("eval_phase"), b.of("train_phase") + b.of("eval_phase"), strict=True):
        assert x.key != y.key, x.instance  # every later phase starts from the first one's end
    assert [n.key for n in a.of("tokenize")] == [n.key for n in b.of("tokenize")]
