"""Files a stage reads are keyed by their content, and builtin sources by the Python whose files they read.

A pretrained tokenizer (tokenizer.pretrained) and an eval task file or folder (eval.tasks[].path) were
keyed by their path only: replacing the tokenizer.json or editing a task file kept every key, so the old
tokenizer copy and everything trained on it (or the old scores) were reused. Each edit here changes the
keys of exactly the stages that read the file and what follows them (the stage configs that change are
those of the readers); the stages also refuse a file replaced after the keys were computed. Builtin
sources read the running Python's documentation and standard library: another Python version gives other
documents, so another key.
"""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from runlib.curate.builtin import builtin_documents, builtin_python
from runlib.errors import UserError
from runlib.graph import configs
from runlib.graph.build import build_graph
from runlib.plan import derive
from runlib.spec import load_spec
from runlib.tokenizer.train import train_tokenizer
from tests.workflow.conftest import TINY
from tests.workflow.test_stage_configs import changes


@pytest.fixture
def here(work):
    return work.parent


def _spec(tmp_path: Path, text: str):
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return load_spec(path).spec


def _pretrained_spec(tmp_path: Path):
    return _spec(tmp_path, TINY.read_text().replace("  vocab_size: 768\n", "  pretrained: tok/tokenizer.json\n"))


def _rewrite(path: Path, old: str, new: str) -> None:
    """Same size, other content: a key made of path and size would not move."""
    text = path.read_text()
    assert len(old) == len(new) and old in text
    path.write_text(text.replace(old, new))


def test_replacing_the_pretrained_tokenizer_changes_the_keys_of_its_readers_only(here):
    (here / "tok").mkdir()
    (here / "tok" / "tokenizer.json").write_text('{"version": "1.0", "model": {"vocab": {"a": 1}}}\n')
    spec = _pretrained_spec(here)
    before = build_graph(spec)
    _rewrite(here / "tok" / "tokenizer.json", '"a": 1', '"b": 1')
    after = build_graph(spec)
    keys, configs_changed, expected = changes(before, after)
    assert configs_changed == {"train_tokenizer"}  # the one stage that reads the file
    assert keys == expected  # and what follows it: tokenize, every phase, every evaluation
    assert {i.split()[0] for i in keys} == {"train_tokenizer", "tokenize", "train_phase", "eval_phase"}
    assert not {i for i in keys if i.startswith("curate")}
    # the key holds the path as the spec writes it: nothing machine-local
    file = after.of("train_tokenizer")[0].config.pretrained_file
    assert file.path == "tok/tokenizer.json" and file.digest.startswith("xxh3_128:")


def test_a_trained_tokenizer_config_has_no_file_field(here):
    """A spec without pretrained keeps its keys: the new field is left out of the config at its default."""
    graph = build_graph(load_spec(TINY).spec)
    dumped = graph.of("train_tokenizer")[0].config.model_dump(mode="json")
    assert "pretrained_file" not in dumped and dumped["pretrained"] is None


def test_the_tokenizer_stage_refuses_a_file_replaced_after_keying(here):
    (here / "tok").mkdir()
    (here / "tok" / "tokenizer.json").write_text('{"version": "1.0", "model": {"vocab": {"a": 1}}}\n')
    spec = _pretrained_spec(here)
    config = configs.tokenizer_config(spec, derive(spec))
    _rewrite(here / "tok" / "tokenizer.json", '"a": 1', '"b": 1')
    with pytest.raises(UserError, match=r"tokenizer\.pretrained: .* changed since this stage's key was computed"):
        train_tokenizer(config, {}, here / "out")
    assert not (here / "out" / "tokenizer.json").exists()


def _task_spec(tmp_path: Path, path: str):
    task = f"    - {{name: from-file, kind: multiple_choice, path: {path}}}\n"
    return _spec(tmp_path, TINY.read_text() + "eval:\n  tasks:\n" + task)


TASK = '{"context": "1 + 1 =", "choices": [" 2", " 3"], "answer": 0}\n'


def test_editing_a_task_file_changes_only_the_evaluations(here):
    (here / "task.jsonl").write_text(TASK)
    spec = _task_spec(here, "task.jsonl")
    before = build_graph(spec)
    _rewrite(here / "task.jsonl", '"answer": 0', '"answer": 1')
    after = build_graph(spec)
    keys, configs_changed, expected = changes(before, after)
    assert keys == configs_changed == expected == {n.instance for n in after.of("eval_phase")}
    assert len(keys) == 4


def test_editing_a_file_in_an_lm_eval_task_folder_changes_only_the_evaluations(here):
    folder = here / "tasks"
    folder.mkdir()
    (folder / "my_task.yaml").write_text("task: my_task\ndataset_path: json\n")
    (folder / "data.jsonl").write_text(TASK)
    text = TINY.read_text() + "eval:\n  tasks:\n    - {name: harness, kind: lm_eval, task: my_task, path: tasks}\n"
    spec = _spec(here, text)
    before = build_graph(spec)
    _rewrite(folder / "data.jsonl", '"answer": 0', '"answer": 1')  # data beside the task's YAML
    after = build_graph(spec)
    keys, configs_changed, _ = changes(before, after)
    assert keys == configs_changed == {n.instance for n in after.of("eval_phase")}


def test_the_eval_stage_refuses_a_task_file_edited_after_keying(here):
    (here / "task.jsonl").write_text(TASK)
    spec = _task_spec(here, "task.jsonl")
    config = configs.eval_configs(spec, derive(spec))[3]
    _rewrite(here / "task.jsonl", '"answer": 0', '"answer": 1')
    from runlib.eval.stage import evaluate_phase

    with pytest.raises(UserError, match=r"eval\.tasks \(from-file\)\.path: input file task\.jsonl changed"):
        evaluate_phase(config, here / "no-model", here / "no-tokenizer", {}, here / "out")


def test_a_missing_named_file_is_an_error_naming_the_field_except_in_diff(here):
    spec = _pretrained_spec(here)  # tok/tokenizer.json does not exist
    with pytest.raises(UserError, match=r"tokenizer\.pretrained: 'tok/tokenizer\.json' is not a file here"):
        build_graph(spec)
    with configs.placeholder_files() as missing:  # runlib diff: the spec may run on another machine
        build_graph(spec)
    assert missing == ["tokenizer.pretrained"]


def test_builtin_sources_are_keyed_by_the_python_that_reads_them(here, monkeypatch):
    spec = load_spec(TINY).spec
    before = build_graph(spec)
    shard = before.find("curate_shard", source="docs", shard=0).config
    assert shard.python == f"cpython {platform.python_version()}" == builtin_python("python_docs")
    assert before.find("curate_shard", source="arithmetic", shard=0).config.python is None  # generated text

    monkeypatch.setattr(platform, "python_version", lambda: "3.99.0")
    after = build_graph(spec)
    keys, configs_changed, expected = changes(before, after)
    sources = {i.split()[1].split("/")[0] for i in configs_changed}
    assert {i.split()[0] for i in configs_changed} == {"curate_shard"} and sources == {"docs", "code"}
    assert keys == expected and not any(i.startswith("curate") and "arithmetic" in i for i in keys)


def test_the_curation_stage_refuses_another_python_than_its_key_names():
    with pytest.raises(UserError, match=r"data\.sources\.docs\.input\.name: .*key was computed for cpython 3\.0\.0"):
        builtin_documents("python_docs", 5, "docs", python="cpython 3.0.0")
    # arithmetic reads no Python files: no version to check
    docs, provenance = builtin_documents("arithmetic", 5, "arithmetic", python=builtin_python("arithmetic"))
    assert len(docs) == 5 and provenance["root"] is None
