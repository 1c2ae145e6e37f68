"""Nothing in the spec is silently ignored: every leaf field of the schema either
reaches a stage key or is documented as planning-only.

The walk visits every leaf field of RunSpec (through sub-models, lists and dicts of them). A field
passes when its Field carries the planning-only marker (runlib.spec.models.PLANNING_ONLY), or when
giving it another valid value changes at least one stage key of build_graph(spec) on specs/demo.yaml
or tests/fixtures/tiny.yaml, or when NOT_KEYED names it with a reason. Keys are read only through
build_graph(spec) and node.key, so the test holds whatever the stage configs look like. A field absent
from a base spec (a null optional section, an empty list) is first given a valid value (SCAFFOLD),
on both sides of the comparison.

The converse: a field marked planning-only changes no key (else the marker, the schema and the
README would say something false).
"""

from __future__ import annotations

import copy
import json
import typing
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from runlib.errors import SpecError, UserError
from runlib.graph.build import build_graph
from runlib.spec import validate_data
from runlib.spec.loader import parse_yaml
from runlib.spec.models import RunSpec
from runlib.spec.units import BatchSize, Duration, parse_count
from tests.annotations import strip_optional
from tests.conftest import ROOT

BASES = {
    "demo": ROOT / "specs" / "demo.yaml",
    "tiny": ROOT / "tests" / "fixtures" / "tiny.yaml",
    "ladder": ROOT / "tests" / "ladder" / "ladder-tiny.yaml",
}
DELETE = object()

# Fields that reach no stage key by design, with the reason. Keep this list tiny: a field a stage
# ignores belongs in a stage config, and one only the plan and the audit read is planning-only.
NOT_KEYED: dict[str, str] = {
    "name": "names the run's reports and MLflow runs; renaming a run must change no key",
    "tracking.experiment": "where MLflow records the run, not what any stage computes",
    "phases[].branches[].name": "names a branch's stages (train_phase anneal@<name>), not what they compute",
    "phases[].soup.name": "names the soup's stages (soup_phase anneal@<name>), not what they compute",
    "model.attention.kind": "one value (mla): writing model.attention at all is the keyed choice",
}


# ---------------------------------------------------------------------------------------------- walk


def _submodel(annotation: Any) -> tuple[type[BaseModel] | None, str]:
    """(the spec section a field holds, "" | "[]" | ".*" for one, a list or a dict of them)."""
    t = strip_optional(annotation)
    if isinstance(t, type) and issubclass(t, BaseModel):
        return t, ""
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin is list and args and isinstance(args[0], type) and issubclass(args[0], BaseModel):
        return args[0], "[]"
    if origin is dict and len(args) == 2 and isinstance(args[1], type) and issubclass(args[1], BaseModel):
        return args[1], ".*"
    return None, ""


def leaf_fields(model: type[BaseModel] = RunSpec, prefix: str = "") -> Iterator[tuple[str, FieldInfo]]:
    """(pattern, field) of every leaf: "phases[].parallelism.context", "data.sources.*.fim.rate", ..."""
    for name, info in model.model_fields.items():
        sub, container = _submodel(info.annotation)
        if sub is None:
            yield prefix + name, info
        else:
            yield from leaf_fields(sub, f"{prefix}{name}{container}.")


def planning_only(info: FieldInfo) -> bool:
    extra = info.json_schema_extra
    return isinstance(extra, dict) and extra.get("planning_only") is True


LEAVES = dict(leaf_fields())


# ----------------------------------------------------------------------------------- spec variants


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """Input files for fields that only mean something with a file behind them."""
    root = tmp_path_factory.mktemp("inputs")
    out = {}
    for name, text in (("a", "first"), ("b", "second")):
        path = root / f"{name}.jsonl"
        path.write_text("".join(json.dumps({"text": f"{text} document {i}", "body": "x"}) + "\n" for i in range(3)))
        out[name] = str(path)
    texts = root / "texts"
    texts.mkdir()
    (texts / "one.txt").write_text("a plain text document\n")
    out["dir"] = str(texts)
    for name in ("ner_a", "ner_b"):  # spaCy pipeline folders as the gate sees them (spaCy reads them in the stage)
        (root / name).mkdir()
        (root / name / "config.cfg").write_text(f"[nlp]\n# {name}\n")
        out[name] = str(root / name)
    return out


def _global_batch_tokens(data: dict[str, Any]) -> int:
    hw, batch = data["hardware"], data["batch"]
    devices = hw.get("nodes", 1) * hw.get("devices_per_node", 1)
    return batch["micro_batch"] * batch.get("grad_accum", 1) * devices * data["model"]["seq_len"]


# a valid value for a section or list a base spec leaves out (pattern -> value, or data -> value)
SCAFFOLD: dict[str, Any] = {
    "data.sources.*.fim": {"rate": 0.5},
    "batch.ramp": lambda data: [{"after": "50%", "global_batch": f"{2 * _global_batch_tokens(data)} tokens"}],
    "eval.tasks": lambda data: [
        {"name": "scaffold", "kind": "multiple_choice", "from_heldout": next(iter(data["data"]["sources"]))}
    ],
    # a Megatron-style ramp from one micro-step per rank to grad_accum 4 (SCAFFOLD_ALSO sets it)
    "batch.linear_ramp": lambda data: {
        "start": f"{_global_batch_tokens(data)} tokens",
        "increment": f"{_global_batch_tokens(data)} tokens",
        "over": "50%",
    },
    "schedule.lr_steps": [{"after": "50%", "lr_ratio": 0.3}, {"after": "80%", "lr_ratio": 0.1}],
    # Llama 3.1's frequency scaling (YaRN's own fields: EXPLICIT)
    "phases[].rope_scaling": {"kind": "llama3", "factor": 4.0, "original_seq_len": 64},
    # quality filters anchored on the spec's last source (invalid, so skipped, on that source itself)
    "data.sources.*.curate.classifier": lambda data: {"positives": [list(data["data"]["sources"])[-1]]},
    "data.sources.*.curate.perplexity": lambda data: {"reference": [list(data["data"]["sources"])[-1]]},
    # a branch of the last phase at half the context (valid only there: on another phase the graph refuses it)
    "phases[].branches": lambda data: [
        {"name": "scaffold", "mixture": dict(data["phases"][-1]["mixture"]), "seq_len": data["model"]["seq_len"] // 2}
    ],
    # a soup of the last phase and one of two reseeded branches (SCAFFOLD_ALSO adds them)
    "phases[].soup": lambda data: {"ingredients": [data["phases"][-1]["name"], "scaffold"]},
    # a small mixture of experts, DeepSeek's latent attention and one MTP module
    "model.moe": {"experts": 4, "top_k": 2, "expert_d_ff": 32, "aux_loss": 0.01},
    "model.attention": {
        "kind": "mla",
        "kv_lora_rank": 16,
        "qk_rope_head_dim": 8,
        "qk_nope_head_dim": 8,
        "v_head_dim": 16,
    },
    "model.mtp": {"depth": 1, "loss_weight": 0.3},
}

# what a scaffolded field needs beside it in its section (pattern of the field -> patch of its parent, a
# value or a function of the spec data)
SCAFFOLD_ALSO: dict[str, dict[str, Any]] = {
    "phases[].soup": {"branches": [{"name": "scaffold", "seed": 99}, {"name": "scaffold2", "seed": 98}]},
    "data.sources.*.curate.ner": {"pii": "ner"},
    "model.attention": {"kv_heads": DELETE, "head_dim": DELETE},
    "batch.linear_ramp": {"grad_accum": 4, "global_batch": DELETE},
    "schedule.lr_steps": {"kind": "multistep", "decay": DELETE, "min_lr_ratio": DELETE},
}

Variant = tuple[dict[str, Any], dict[str, Any]]  # (setup on the leaf's parent, both sides; the edit, one side)


def _jsonl_input(files: dict[str, str]) -> dict[str, Any]:
    return {"format": "jsonl", "path": files["a"], "name": DELETE}


# fields whose other valid value depends on the context: (current, spec data, files) -> variants
EXPLICIT: dict[str, Callable[[Any, dict[str, Any], dict[str, str]], list[Variant]]] = {
    "hardware.accelerator": lambda cur, data, files: [
        ({}, {"accelerator": a}) for a in ("a100-80gb", "h100-sxm", "cpu") if a != cur
    ],
    "data.sources.*.input.format": lambda cur, data, files: [
        ({}, {"format": "jsonl", "path": files["a"]}),
        ({"format": "jsonl", "path": files["a"]}, {"format": "text", "path": files["dir"]}),
    ],
    "data.sources.*.input.path": lambda cur, data, files: [(_jsonl_input(files), {"path": files["b"]})],
    "data.sources.*.input.shard_bytes": lambda cur, data, files: [(_jsonl_input(files), {"shard_bytes": 64})],
    "data.sources.*.input.text_field": lambda cur, data, files: [(_jsonl_input(files), {"text_field": "body"})],
    "data.sources.*.input.name": lambda cur, data, files: [
        ({"format": "builtin"}, {"name": n}) for n in ("python_docs", "python_code", "arithmetic") if n != cur
    ],
    "eval.tasks[].path": lambda cur, data, files: [
        ({"from_heldout": DELETE, "path": files["a"]}, {"path": files["b"]})
    ],
    "eval.tasks[].from_heldout": lambda cur, data, files: [
        ({"path": DELETE}, {"from_heldout": s}) for s in data["data"]["sources"] if s != cur
    ],
    "batch.ramp[].global_batch": lambda cur, data, files: [
        ({}, {"global_batch": f"{4 * _global_batch_tokens(data)} tokens"})
    ],
    "batch.global_batch": lambda cur, data, files: [
        ({}, {"global_batch": f"{k * _global_batch_tokens(data)} tokens"}) for k in (2, 4)
    ],
    "phases[].batch.global_batch": lambda cur, data, files: [
        ({}, {"global_batch": f"{k * _global_batch_tokens(data)} tokens"}) for k in (2, 4)
    ],
    "tokenizer.pretrained": lambda cur, data, files: [({}, {"pretrained": files["a"]})],
    # inverse_sqrt only
    "schedule.hold": lambda cur, data, files: [({"kind": "inverse_sqrt", "decay": DELETE}, {"hold": "10%"})],
    # the shape of a phase's own decay
    "phases[].optimizer.lr_decay_shape": lambda cur, data, files: [
        ({"lr_decay_to": 0.0}, {"lr_decay_shape": v}) for v in ("cosine", "linear")
    ],
    # an expert degree that divides the base specs' 2 data-parallel ranks
    "parallelism.expert": lambda cur, data, files: [({}, {"expert": 2})],
    "phases[].parallelism.expert": lambda cur, data, files: [({}, {"expert": 2})],
    # node-limited routing's groups (groups_per_token needs them)
    "model.moe.groups_per_token": lambda cur, data, files: [({"groups": 2}, {"groups_per_token": 1})],
    # hsdp's shard groups (on these one-node specs a refused value, but a keyed one)
    "parallelism.hsdp_shard_nodes": lambda cur, data, files: [({"sharding": "hsdp"}, {"hsdp_shard_nodes": 2})],
    "phases[].parallelism.hsdp_shard_nodes": lambda cur, data, files: [({"sharding": "hsdp"}, {"hsdp_shard_nodes": 2})],
    # YaRN's fields, with kind yarn
    "phases[].rope_scaling.beta_fast": lambda cur, data, files: [({"kind": "yarn"}, {"beta_fast": 16.0})],
    "phases[].rope_scaling.beta_slow": lambda cur, data, files: [({"kind": "yarn"}, {"beta_slow": 2.0})],
    # which of the windowed layers are global: only with a window
    "model.global_every": lambda cur, data, files: [({"sliding_window": 16}, {"global_every": 2})],
    # true (over the whole projections) or per_head
    "model.qk_norm": lambda cur, data, files: [({}, {"qk_norm": v}) for v in (True, "per_head") if v != cur],
    # the list's content is keyed: another file (or none) is another key
    "data.sources.*.curate.url_filter.blocklist": lambda cur, data, files: [
        ({}, {"blocklist": files["a"]}),
        ({"blocklist": files["a"]}, {"blocklist": files["b"]}),
    ],
    # the model folder's content is keyed, and so are the labels it masks
    "data.sources.*.curate.ner.model": lambda cur, data, files: [
        ({"model": files["ner_a"]}, {"model": files["ner_b"]})
    ],
    "data.sources.*.curate.ner.labels": lambda cur, data, files: [
        ({"model": files["ner_a"]}, {"labels": ["PERSON", "GPE"]})
    ],
    # an anchor is another source of the spec
    "data.sources.*.curate.classifier.positives": lambda cur, data, files: [
        ({}, {"positives": [s]}) for s in data["data"]["sources"] if s not in cur
    ],
    "data.sources.*.curate.perplexity.reference": lambda cur, data, files: [
        ({}, {"reference": [s]}) for s in data["data"]["sources"] if s not in cur
    ],
    "data.sources.*.curate.perplexity.keep_range": lambda cur, data, files: [({}, {"keep_range": [1.0, 500.0]})],
    "data.sources.*.curate.perplexity.order": lambda cur, data, files: [({}, {"order": 4})],
    "data.sources.*.curate.classifier.bucket": lambda cur, data, files: [({}, {"bucket": 50_000})],
    "hardware.peak_tflops": lambda cur, data, files: [({}, {"peak_tflops": {"fp32": 1.0, "bf16": 2.0}})],
    "audit.ignore": lambda cur, data, files: [({}, {"ignore": {**(cur or {}), "PAR005": "a reason"}})],
    # an lm-eval task names its task (runlib's shipped ones run offline) instead of path / from_heldout
    "eval.tasks[].task": lambda cur, data, files: [
        ({"kind": "lm_eval", "task": "runlib_arith_mc", "from_heldout": DELETE}, {"task": "runlib_arith_loglik"})
    ],
    "eval.tasks[].download": lambda cur, data, files: [
        ({"kind": "lm_eval", "task": "my_task", "path": files["a"], "from_heldout": DELETE}, {"download": True})
    ],
    # a ladder needs >= 5 fitted rungs over 2 sizes and 2 token ratios: edits that keep it fittable
    "ladder.widths": lambda cur, data, files: [({}, {"widths": [*cur, 2 * cur[-1] - cur[-2]]})] if cur else [],
    "ladder.tokens_per_param": lambda cur, data, files: (
        [({}, {"tokens_per_param": [*cur, 2 * cur[-1]]})] if cur else []
    ),
    "ladder.compute_flops": lambda cur, data, files: [
        ({"tokens_per_param": DELETE, "compute_flops": [1e11, 2e11, 4e11]}, {"compute_flops": [1e11, 2e11, 8e11]})
    ],
    "ladder.min_steps": lambda cur, data, files: [({"holdout": 0}, {"min_steps": 30})],  # drops the shortest rung
    "ladder.holdout": lambda cur, data, files: [({}, {"holdout": 0})],
    # a branch's decay must end within it: lengthen the branch, or shorten it with a decay that fits
    "phases[].branches[].tokens": lambda cur, data, files: [
        ({}, {"tokens": "12%"}),
        ({"decay": "2%"}, {"tokens": "4%"}),
    ],
    # another set of models to average (the soup's scaffold has two branches)
    "phases[].soup.ingredients": lambda cur, data, files: [({}, {"ingredients": [*cur, "scaffold2"]})] if cur else [],
    # read with parallel_block only (2 without it is a spec error)
    "model.parallel_norms": lambda cur, data, files: [({"parallel_block": True}, {"parallel_norms": 2})],
    # meaningful with layernorm only (true with rmsnorm is a spec error)
    "model.norm_bias": lambda cur, data, files: [({"norm": "layernorm"}, {"norm_bias": v}) for v in (True, False)],
}


def _values(info: FieldInfo, current: Any) -> list[Any]:
    """Other valid values of a field, from its type and its current value."""
    t = strip_optional(info.annotation)
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin is Literal:
        return [v for v in args if v != current]
    if t is bool:  # an absent field holds its default (true for some: optimizer.decay_embeddings)
        if current is None and info.default is None:  # a phase override: either value
            return [True, False]
        return [not (info.default if current is None else current)]
    if t is int:
        c = parse_count(current) if current is not None else None
        return [1, 64, 512] if c is None else [c + 1, 2 * c, c - 1]
    if t is float:
        c = current
        return [0.5, 100.0, 12345.0] if c is None else [0.1, 1e-3] if c == 0 else [2 * c, c / 2, c + 0.5]
    if t is Duration:
        return ["7 steps", "3%", "1000 tokens", "11 steps"]
    if t is BatchSize:
        return ["64 sequences", "8Ki tokens"]
    if t is str:
        return [(current or "x") + "x"]
    if origin is tuple:
        return [tuple(round(v * 0.9, 6) for v in current or (0.9, 0.95))]
    if origin is list:
        items = list(current or [])
        item_type = strip_optional(args[0])
        if typing.get_origin(item_type) is Literal:
            extra = [v for v in typing.get_args(item_type) if v not in items]
            return [items[:-1]] * bool(items) + [items + extra[:1]] * bool(extra)
        return [items + ["zz-added"], items[1:]] if items else [["en"], ["zz-added"]]
    if origin is dict:
        mapping = dict(current or {})
        keys = list(mapping)
        if len(keys) >= 2 and all(isinstance(v, int | float) for v in mapping.values()):
            shift = min(mapping[keys[1]], 0.1)
            return [{**mapping, keys[0]: mapping[keys[0]] + shift, keys[1]: mapping[keys[1]] - shift}]
        return [{**mapping, "zz": 1.0}]
    raise AssertionError(f"no candidate values for a field of type {t!r}: add it to EXPLICIT")


def _get(data: Any, path: list[Any]) -> Any:
    for part in path:
        data = data[part]
    return data


def _pattern(path: list[Any], shape: list[str]) -> str:
    return ".".join(shape[: len(path)]).replace(".[]", "[]")


def _segments(pattern: str) -> list[str]:
    return pattern.replace("[]", ".[]").split(".")


def _locations(data: dict[str, Any], pattern: str) -> Iterator[tuple[dict[str, Any], list[Any]]]:
    """(spec data with the sections on the way filled in, concrete path of the leaf) for each place
    the pattern names in the spec: every source, every phase, ..."""
    segs = _segments(pattern)

    def walk(data: dict[str, Any], done: list[Any]) -> Iterator[tuple[dict[str, Any], list[Any]]]:
        if len(done) == len(segs) - 1:
            yield data, done + [segs[-1]]
            return
        seg, node = segs[len(done)], _get(data, done)
        if seg == "[]":
            for i in range(len(node)):
                yield from walk(data, done + [i])
        elif seg == "*":
            for key in list(node):
                yield from walk(data, done + [key])
        else:
            if node.get(seg) in (None, []):
                data = copy.deepcopy(data)
                value = SCAFFOLD.get(_pattern(done + [seg], segs), {})
                _get(data, done)[seg] = value(data) if callable(value) else copy.deepcopy(value)
                for key, also in SCAFFOLD_ALSO.get(_pattern(done + [seg], segs), {}).items():
                    if also is DELETE:
                        _get(data, done).pop(key, None)
                    else:
                        _get(data, done)[key] = also
            yield from walk(data, done + [seg])

    yield from walk(data, [])


def _patched(data: dict[str, Any], parent: list[Any], patch: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(data)
    node = _get(out, parent)
    for key, value in patch.items():
        if value is DELETE:
            node.pop(key, None)
        else:
            node[key] = value
    return out


@cache
def _base(name: str) -> str:
    data, _ = parse_yaml(BASES[name].read_text(), str(BASES[name]))
    return json.dumps(data)


_KEYS: dict[str, tuple[str, ...] | None] = {}


def stage_keys(data: dict[str, Any]) -> tuple[str, ...] | None:
    """The sorted keys of every stage of the spec; None for data that is no valid spec or no graph."""
    text = json.dumps(data, sort_keys=True, default=str)
    if text not in _KEYS:
        try:
            _KEYS[text] = tuple(sorted(node.key for node in build_graph(validate_data(data).spec).nodes))
        except (SpecError, UserError, ValueError, ZeroDivisionError, KeyError):
            _KEYS[text] = None
    return _KEYS[text]


def key_changes(pattern: str, info: FieldInfo, files: dict[str, str]) -> tuple[list[str], int]:
    """(descriptions of the edits of this field that changed a stage key, edits tried on valid specs)."""
    changed, tried = [], 0
    for base in BASES:
        for data, path in _locations(json.loads(_base(base)), pattern):
            parent, leaf = path[:-1], path[-1]
            current = _get(data, parent).get(leaf)
            variants = (
                EXPLICIT[pattern](current, data, files)
                if pattern in EXPLICIT
                else [({}, {leaf: v}) for v in _values(info, current)]
            )
            for setup, edit in variants:
                before_data = _patched(data, parent, setup)
                before, after = stage_keys(before_data), stage_keys(_patched(before_data, parent, edit))
                if before is None or after is None:
                    continue
                tried += 1
                if before != after:
                    changed.append(f"{base}: {'.'.join(map(str, path))} -> {edit[leaf] if leaf in edit else edit}")
                    return changed, tried  # one is enough to show the field is read
    return changed, tried


# -------------------------------------------------------------------------------------------- tests


def test_the_walk_sees_every_section():
    assert len(LEAVES) > 100
    for pattern in (
        "hardware.mfu",
        "data.sources.*.curate.dedup.minhash.bands",
        "phases[].parallelism.context",
        "batch.ramp[].after",
        "eval.tasks[].examples",
        "monitor.spike.rollback",
    ):
        assert pattern in LEAVES, pattern
    assert set(NOT_KEYED) <= set(LEAVES)
    assert not {p for p in NOT_KEYED if planning_only(LEAVES[p])}


def test_every_field_is_enacted_or_planning_only(files):
    unread = []
    for pattern, info in LEAVES.items():
        if planning_only(info) or pattern in NOT_KEYED:
            continue
        changed, tried = key_changes(pattern, info, files)
        if not changed:
            unread.append(f"{pattern} ({tried} valid edits tried, none changed a stage key)")
    assert not unread, (
        "spec fields that no stage key covers: add each to its stage's config, or mark it planning-only "
        "(json_schema_extra=PLANNING_ONLY and the docstring note):\n  " + "\n  ".join(unread)
    )


def test_planning_only_fields_change_no_key(files):
    marked = {p: i for p, i in LEAVES.items() if planning_only(i)}
    assert "hardware.mfu" in marked and "budget.gpu_hours" in marked
    keyed = {}
    for pattern, info in marked.items():
        changed, tried = key_changes(pattern, info, files)
        assert tried, f"{pattern}: no valid edit to try"
        if changed:
            keyed[pattern] = changed[0]
    assert not keyed, (
        "fields marked planning-only that change a stage key (remove the marker, or the field from the config):\n  "
        + "\n  ".join(f"{p}: {c}" for p, c in keyed.items())
    )


def test_readme_lists_exactly_the_planning_only_fields():
    text = (ROOT / "README.md").read_text()
    start = text.index("<!-- planning-only fields -->")
    end = text.index("<!-- end planning-only fields -->")
    listed = {line.split("`")[1] for line in text[start:end].splitlines() if line.startswith("- `")}
    assert listed == {p for p, i in LEAVES.items() if planning_only(i)}


def test_the_candidates_are_other_valid_values():
    # the machinery itself: an edit that changes the value of a field that is read changes a key,
    # and a variant of a base spec still validates
    data = json.loads(_base("tiny"))
    assert stage_keys(data) is not None
    assert stage_keys(_patched(data, ["model"], {"d_model": 96})) != stage_keys(data)
    assert stage_keys(_patched(data, ["model"], {"heads": "many"})) is None
    assert Path(BASES["demo"]).exists()
