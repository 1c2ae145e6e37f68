"""Every spec field that names a file or a capability is checked at the workflow gate, at its line.

Files: the schema's fields that name a file carry NAMES_FILE (runlib.spec.models); each is listed in
runlib.audit.named_files.FILE_FIELDS and has a case here in which its file is missing (or unreadable as
what the stage reads): the gate (runlib.workflow.snake.Workflow, what the Snakefile loads) must refuse the
spec before any job, printing `<spec>:<line>` and the field. A new file field without a case fails
test_each_file_field_is_refused_at_the_gate; one whose docstring speaks of a file or path without the
marker fails test_fields_that_name_files_are_marked.

Capabilities: every value of every enumerated (Literal) field that a stage reads is either written out in
the module that enacts it, enacted as that module's fall-through branch (listed with the branch), or
refused by a RUN check (NOT_ENACTED, each checked to raise its finding). A new enumerated field or value
fails test_every_enum_value_is_enacted_or_refused until it is placed in one of them.
"""

from __future__ import annotations

import re
import typing
from typing import Literal

import pytest

from runlib.audit import audit
from runlib.audit.cases import case_data
from runlib.audit.named_files import FILE_FIELDS
from runlib.spec import validate_data
from runlib.spec.models import RunSpec
from runlib.workflow.snake import GateRefused, Workflow
from tests.annotations import strip_optional
from tests.conftest import ROOT
from tests.spec.test_fields_enacted import LEAVES, planning_only
from tests.workflow.conftest import TINY


def names_file(info) -> bool:
    extra = info.json_schema_extra
    return isinstance(extra, dict) and extra.get("names_file") is True


MARKED = sorted(p for p, i in LEAVES.items() if names_file(i))
FILE_WORDS = re.compile(r"\b(path|paths|file|files|folder|directory|tokenizer\.json)\b", re.IGNORECASE)
# text fields whose docstring speaks of files without naming one, with the reason
NOT_FILES: dict[str, str] = {"eval.tasks[].task": "an lm-eval task name; the file that defines it is `path`"}


def test_fields_that_name_files_are_marked():
    RunSpec.model_json_schema()  # attaches the field docstrings as descriptions (done lazily, for the schema)
    suspects = {
        p
        for p, i in LEAVES.items()
        if strip_optional(i.annotation) is str
        and (FILE_WORDS.search(i.description or "") or p.endswith((".path", ".pretrained")))
    }
    assert "tokenizer.pretrained" in suspects and "eval.tasks[].task" in suspects  # the docstrings are read
    unmarked = sorted(suspects - set(MARKED) - set(NOT_FILES))
    assert not unmarked, f"fields that seem to name a file without json_schema_extra=NAMES_FILE: {unmarked}"
    assert set(MARKED) == set(FILE_FIELDS), "runlib.audit.named_files.FILE_FIELDS must list the NAMES_FILE fields"
    assert MARKED == [
        "data.sources.*.curate.ner.model",
        "data.sources.*.curate.url_filter.blocklist",
        "data.sources.*.input.path",
        "eval.tasks[].path",
        "tokenizer.pretrained",
    ]


# ------------------------------------------------------------------------------------- gate cases

MISSING = "no-such-dir/missing"
TASK_LINE = "    - {name: from-file, kind: multiple_choice, path: %s}\n"


def _tiny(text_edit) -> str:
    return text_edit(TINY.read_text())


def _pretrained(path: str):
    def edit(text: str) -> str:
        text = text.replace("  vocab_size: 768\n", f"  pretrained: {path}\n")
        assert f"pretrained: {path}" in text
        return text

    return edit


def _task(path: str):
    def edit(text: str) -> str:
        return text + "eval:\n  tasks:\n" + TASK_LINE % path

    return edit


def _lm_eval_task(path: str):
    def edit(text: str) -> str:
        return text + f"eval:\n  tasks:\n    - {{name: harness, kind: lm_eval, task: my_task, path: {path}}}\n"

    return edit


def _source(path: str):
    def edit(text: str) -> str:
        old = "input: {format: builtin, name: python_docs, max_docs: 150}"
        assert old in text
        return text.replace(old, f'input: {{format: jsonl, path: "{path}/*.jsonl"}}')

    return edit


def _blocklist(path: str):
    def edit(text: str) -> str:
        old = "input: {format: builtin, name: python_docs, max_docs: 150}\n      tokens: 100K\n      curate: {min_chars: 200}"
        assert old in text
        return text.replace(
            old,
            f'input: {{format: warc, path: "{ROOT / "README.md"}"}}\n      tokens: 100K\n'
            f"      curate: {{min_chars: 200, url_filter: {{blocklist: {path}}}}}",
        )

    return edit


def _ner_model(path: str):
    def edit(text: str) -> str:
        old = "input: {format: builtin, name: python_docs, max_docs: 150}\n      tokens: 100K\n      curate: {min_chars: 200}"
        assert old in text
        return text.replace(old, old[:-1] + f", pii: ner, ner: {{model: {path}}}}}")

    return edit


# field pattern -> [(case id, spec edit, the field's path in the finding, a word of the reason)]
GATE_CASES = {
    "tokenizer.pretrained": [
        ("missing", _pretrained(f"{MISSING}/tokenizer.json"), "tokenizer.pretrained", "does not exist"),
        ("sentencepiece", _pretrained(str(ROOT / "README.md")), "tokenizer.pretrained", "not a Hugging Face"),
        ("folder", _pretrained(str(ROOT / "specs")), "tokenizer.pretrained", "folder"),
        # os.stat of a NUL byte raised ValueError: a traceback of `runlib audit` and of the gate
        ("nul_byte", _pretrained('"tok\\0enizer.json"'), "tokenizer.pretrained", "NUL character"),
    ],
    "eval.tasks[].path": [
        ("multiple_choice", _task(f"{MISSING}/task.jsonl"), "eval.tasks[0].path", "does not exist"),
        ("lm_eval", _lm_eval_task(f"{MISSING}/tasks"), "eval.tasks[0]", ""),
        ("nul_byte", _task('"task\\0.jsonl"'), "eval.tasks[0].path", "NUL character"),
    ],
    "data.sources.*.input.path": [
        ("missing", _source(MISSING), "data.sources.docs.input.path", "matches no file"),
    ],
    "data.sources.*.curate.url_filter.blocklist": [
        ("missing", _blocklist(MISSING), "data.sources.docs.curate.url_filter.blocklist", "not a file"),
    ],
    "data.sources.*.curate.ner.model": [
        ("missing", _ner_model(MISSING), "data.sources.docs.curate.ner.model", "not a folder"),
        ("not_a_pipeline", _ner_model(str(ROOT / "specs")), "data.sources.docs.curate.ner.model", "no config.cfg"),
    ],
}


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


@pytest.fixture
def gate_env(work, tmp_path, monkeypatch):
    # Workflow sets these for the stage jobs; monkeypatch restores them after the test
    for name in ("RUNLIB_SPEC", "RUNLIB_PYTHON"):
        monkeypatch.setenv(name, "")
    return tmp_path


@pytest.mark.parametrize("pattern", sorted(FILE_FIELDS))
def test_each_file_field_is_refused_at_the_gate(pattern, gate_env, capsys):
    assert pattern in GATE_CASES, f"{pattern}: add a case of a missing file the gate must refuse"
    for name, edit, field, reason in GATE_CASES[pattern]:
        text = _tiny(edit)
        spec = gate_env / f"{name}.yaml"
        spec.write_text(text)
        with pytest.raises(GateRefused):
            Workflow(str(spec))
        err = capsys.readouterr().err
        needle = {
            "tokenizer.pretrained": "pretrained:",
            "eval.tasks[0].path": "path:",
            "eval.tasks[0]": "path:",
            "data.sources.docs.curate.url_filter.blocklist": "blocklist:",
            "data.sources.docs.curate.ner.model": "ner:",
        }.get(field, "format: jsonl")
        line = _line_of(text, needle)
        assert f"{spec}:{line}" in err, f"{pattern} ({name}): line {line} not named:\n{err}"
        assert field in err and reason in err, f"{pattern} ({name}):\n{err}"
        assert not (gate_env / "work" / "artifacts").exists()  # no job ran


def test_a_warc_only_field_on_another_format_is_refused_at_the_gate_with_line_and_fix(gate_env, capsys):
    """input.extract on a builtin source would extract nothing: the gate refuses it with its line and fix."""
    text = _tiny(
        lambda t: t.replace(
            "input: {format: builtin, name: python_docs, max_docs: 150}",
            "input: {format: builtin, name: python_docs, max_docs: 150, extract: trafilatura}",
        )
    )
    spec = gate_env / "extract.yaml"
    spec.write_text(text)
    with pytest.raises(GateRefused, match="cannot run"):
        Workflow(str(spec))
    err = capsys.readouterr().err
    line = _line_of(text, "extract: trafilatura")
    assert f"{spec}:{line}: RUN011 data.sources.docs.input.extract" in err
    assert "use format warc" in err
    assert not (gate_env / "work" / "artifacts").exists()  # no job ran


# ------------------------------------------------------------------------------------- capabilities

# enumerated field -> the modules that enact its values (a value is written out there as a string)
ENACTED_IN: dict[str, tuple[str, ...]] = {
    "model.activation": ("runlib/model/mlp.py", "runlib/plan/params.py"),
    "model.norm": ("runlib/model/norms.py",),
    "model.position": ("runlib/model/transformer.py",),
    "model.norm_position": ("runlib/model/transformer.py",),
    "phases[].rope_scaling.kind": ("runlib/model/rope.py",),
    "phases[].optimizer.lr_decay_shape": ("runlib/plan/schedule.py", "runlib/train/config.py"),
    "tokenizer.digits": ("runlib/tokenizer/train.py",),
    "data.sources.*.input.format": ("runlib/curate/readers.py", "runlib/curate/stage.py"),
    "data.sources.*.input.extract": ("runlib/curate/extract.py",),
    "data.sources.*.curate.normalize": ("runlib/curate/stage.py",),
    "data.sources.*.curate.quality": ("runlib/curate/stage.py",),
    "data.sources.*.curate.pii": ("runlib/curate/stage.py",),
    "data.packing": ("runlib/data/loader_config.py",),
    "data.boundary_targets": ("runlib/data/loader_config.py",),
    "data.loss_normalization": ("runlib/train/accumulate.py",),
    "data.token_dtype": ("runlib/data/config.py",),
    "parallelism.sharding": ("runlib/model/parallelize.py", "runlib/plan/layout.py"),
    "parallelism.activation_checkpointing": ("runlib/model/parallelize.py",),
    "phases[].parallelism.sharding": ("runlib/model/parallelize.py", "runlib/plan/layout.py"),
    "phases[].parallelism.activation_checkpointing": ("runlib/model/parallelize.py",),
    "parallelism.pipeline_schedule": ("runlib/model/pipeline.py",),
    "phases[].parallelism.pipeline_schedule": ("runlib/model/pipeline.py",),
    "optimizer.kind": ("runlib/train/optim.py",),
    "schedule.kind": ("runlib/train/config.py", "runlib/plan/schedule.py"),
    "precision.compute": ("runlib/model/parallelize.py", "runlib/train/optim.py"),
    "precision.master_weights": ("runlib/model/parallelize.py", "runlib/train/optim.py"),
    "precision.grads": ("runlib/model/parallelize.py",),
    "precision.optimizer_states": ("runlib/train/optim.py",),
    "precision.loss_scaling": ("runlib/train/worker.py",),
    "checkpoint.state": ("runlib/train/engine.py",),
    "monitor.spike.action": ("runlib/train/loop.py", "runlib/train/spikes.py", "runlib/train/config.py"),
    "eval.tasks[].kind": ("runlib/eval/stage.py", "runlib/eval/tasks.py"),
    "model.moe.score": ("runlib/model/moe.py",),
    "model.moe.aux_loss_scope": ("runlib/model/moe.py",),
    "model.attention.kind": ("runlib/model/transformer.py",),
}

# values enacted without being written out: the module's fall-through branch, or a value passed on as is
FALL_THROUGH: dict[tuple[str, str], str] = {
    ("model.activation", "gelu"): "Mlp.forward's last branch: F.gelu",
    ("model.attention.kind", "mla"): "Block builds MultiHeadLatentAttention whenever model.attention is set",
    ("model.moe.aux_loss_scope", "micro_batch"): "MoE's load-balancing loss over all its tokens unless sequence",
    ("model.norm", "layernorm"): "make_norm(): nn.LayerNorm unless rmsnorm or layernorm1p",
    ("model.norm_position", "pre"): "Block.body's last branch: the norm before each sublayer",
    ("phases[].rope_scaling.kind", "yarn"): "rope_frequencies: YaRN unless llama3",
    ("tokenizer.digits", "none"): "_new_tokenizer: no digit pre-tokenizer unless single or triplets",
    ("data.sources.*.curate.normalize", "NFC"): "unicodedata.normalize(form) with the value itself",
    ("data.sources.*.curate.normalize", "NFKC"): "unicodedata.normalize(form) with the value itself",
    ("data.sources.*.curate.pii", "mask"): "_pii_step: masking unless drop",
    ("precision.loss_scaling", "dynamic"): "worker's scaler: dynamic unless none or static",
    ("parallelism.sharding", "none"): "DDP when the layout is not sharded",
    ("phases[].parallelism.sharding", "none"): "DDP when the layout is not sharded",
    ("monitor.spike.action", "skip"): "the loop's spike branch: the batch is skipped unless log, or rollback as well",
}

# values the stages cannot enact -> (the RUN check that refuses them, a case patch)
NOT_ENACTED: dict[tuple[str, str], tuple[str, dict]] = {
    ("model.position", "relative"): ("RUN008", {"model.position": "relative"}),
    ("precision.compute", "fp8"): ("RUN006", {"precision.compute": "fp8"}),
    ("precision.grads", "fp16"): ("RUN009", {"precision.grads": "fp16"}),
    ("data.sources.*.curate.pii", "ner"): ("RUN013", {"data.sources.web.curate.pii": "ner"}),
}


def _literal_values(info) -> tuple | None:
    t = strip_optional(info.annotation)
    if typing.get_origin(t) is list:
        t = strip_optional(typing.get_args(t)[0])
    return typing.get_args(t) if typing.get_origin(t) is Literal else None


ENUMS = {p: v for p, i in LEAVES.items() if not planning_only(i) and (v := _literal_values(i)) is not None}


def test_every_enum_value_is_enacted_or_refused():
    assert set(ENUMS) == set(ENACTED_IN), "place each enumerated field read by a stage in ENACTED_IN"
    unplaced = []
    for pattern, values in ENUMS.items():
        sources = "".join((ROOT / m).read_text() for m in ENACTED_IN[pattern])
        for value in values:
            written = f'"{value}"' in sources
            if (pattern, value) in NOT_ENACTED or (pattern, value) in FALL_THROUGH or written:
                continue
            unplaced.append(f"{pattern}: {value}")
    assert not unplaced, f"values neither enacted, nor a listed fall-through, nor refused: {unplaced}"


@pytest.mark.parametrize("item", sorted(NOT_ENACTED), ids=lambda x: f"{x[0]}={x[1]}")
def test_each_value_not_enacted_is_refused(item):
    code, patch = NOT_ENACTED[item]
    spec = validate_data(case_data(patch)).spec
    findings = [f for f in audit(spec, select={code}).findings if f.code == code]
    assert findings and "the runner refuses it" in findings[0].message
