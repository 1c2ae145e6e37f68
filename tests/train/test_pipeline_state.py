"""The whole-model state dicts a pipelined phase reads and writes (runlib.train.dist_checkpoint): a stage loads
only its own part of the previous phase's final.pt, the last stage's copy of a tied embedding takes the tied
matrix's optimizer state, and the stages' param groups merge into one optimizer's."""

import torch

from runlib.model.pipeline import stage_chunks, stage_module
from runlib.model.transformer import Transformer
from runlib.spec.models import ModelSpec
from runlib.train.dist_checkpoint import _merge_param_groups, _own_part, renamed_optimizer_state

SPEC = ModelSpec(layers=4, d_model=16, heads=2, d_ff=32, seq_len=8, tie_embeddings=True)


def whole_state() -> tuple[dict, dict]:
    model = Transformer(SPEC, 64, 8)
    names = [n for n, _ in model.named_parameters()]
    optim = {
        "state": {n: {"exp_avg": torch.full((1,), float(i))} for i, n in enumerate(names)},
        "param_groups": [{"lr": 1.0, "params": [n for n in names if n.endswith("weight")]}, {"lr": 1.0, "params": []}],
    }
    return model.state_dict(), optim


def test_a_stage_loads_its_own_part_and_the_tied_copy_takes_the_embedding_state():
    model_state, optim = whole_state()
    assert "lm_head.weight" not in optim["state"]  # one state for the tied matrix, under its first name
    first, last = stage_chunks(4, 2)
    last_stage = stage_module(Transformer(SPEC, 64, 8), last, False, True)
    renamed = renamed_optimizer_state(optim, {"tok_embeddings.weight": "lm_head.weight"})
    part, part_optim = _own_part(last_stage, model_state, renamed)
    assert set(part) == set(last_stage.state_dict())  # blocks 2 and 3, the final norm and the head
    assert not any(k.startswith(("layers.0.", "layers.1.", "tok_embeddings")) for k in part)
    assert part_optim is not None
    assert torch.equal(
        part_optim["state"]["lm_head.weight"]["exp_avg"], optim["state"]["tok_embeddings.weight"]["exp_avg"]
    )
    assert "lm_head.weight" in part_optim["param_groups"][0]["params"]
    assert all(p in part for g in part_optim["param_groups"] for p in g["params"])
    first_stage = stage_module(Transformer(SPEC, 64, 8), first, True, False)
    first_part, _ = _own_part(first_stage, model_state, optim)
    assert "tok_embeddings.weight" in first_part and "lm_head.weight" not in first_part


def test_the_whole_model_loads_everything_unfiltered():
    model_state, optim = whole_state()
    part, part_optim = _own_part(Transformer(SPEC, 64, 8), model_state, optim)
    assert part is model_state and part_optim is optim


def test_the_stages_param_groups_merge_group_by_group():
    merged = _merge_param_groups(
        [[{"lr": 1, "params": ["a"]}, {"lr": 2, "params": ["b"]}], [{"lr": 1, "params": ["c"]}]]
    )
    assert merged == [{"lr": 1, "params": ["a", "c"]}, {"lr": 2, "params": ["b"]}]
