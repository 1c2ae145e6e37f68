"""The eval_phase stage: built from its EvalConfig and its inputs' artifacts (no spec), with RoPE or
learned positions, the phase's context and RoPE base applied."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from runlib.eval.config import EvalConfig, EvalModelConfig
from runlib.eval.stage import evaluate_phase
from runlib.model.transformer import Transformer
from runlib.spec.models import EvalTaskSpec, ModelSpec
from runlib.train import checkpoint as ckpt
from runlib.train.heldout import heldout_metrics
from tests.helpers import write_fake_manifest

SEQ_LEN, POSITION_ROWS, THETA = 96, 128, 20000.0
BYTES_PER_TOKEN = 3.0


@pytest.mark.parametrize("position", ["rope", "learned"])
def test_evaluate_phase(source, tmp_path: Path, position: str) -> None:
    tokenizer_dir = shutil.copytree(source.token_dir.parent.parent / "tokenizer", tmp_path / "tokenizer")
    token_dir = shutil.copytree(source.token_dir, tmp_path / "tokens")
    write_fake_manifest(tokenizer_dir, details={"eos_id": source.eos})
    write_fake_manifest(token_dir, counts={"tokens_heldout": 1000, "bytes_heldout": int(1000 * BYTES_PER_TOKEN)})
    spec = ModelSpec(layers=2, d_model=32, heads=4, kv_heads=2, d_ff=64, seq_len=64, position=position)
    torch.manual_seed(0)
    trained = Transformer(spec, source.vocab, POSITION_ROWS)
    model_dir = tmp_path / "model"
    ckpt.save(model_dir / "final.pt", {"model": trained.state_dict()})
    config = EvalConfig(
        phase="long",
        phase_index=2,
        end_tokens=12345,
        seq_len=SEQ_LEN,
        rope_theta=THETA if position == "rope" else None,
        model=EvalModelConfig(spec=spec, vocab_rows=source.vocab, position_rows=POSITION_ROWS),
        heldout_tokens=2048,
        tasks=[
            EvalTaskSpec(name="mc", kind="multiple_choice", from_heldout="web", examples=4),
            EvalTaskSpec(name="more", kind="answer_loglik", from_heldout="web", examples=60),
        ],
    )
    out = tmp_path / "out"
    out.mkdir()
    summary = evaluate_phase(config, model_dir, tokenizer_dir, {"web": token_dir}, out)

    result = json.loads((out / "eval.json").read_text())
    assert (result["phase"], result["phase_index"], result["tokens"]) == ("long", 2, 12345)
    if position == "rope":
        trained.set_rope(THETA, SEQ_LEN)  # the phase's base and context, not the model's first ones
    want = heldout_metrics(trained, token_dir, SEQ_LEN, source.eos, BYTES_PER_TOKEN, max_tokens=2048)
    assert result["heldout"]["web"]["loss"] == pytest.approx(want["loss"], rel=1e-6)
    assert result["heldout"]["web"]["bits_per_byte"] == pytest.approx(want["bits_per_byte"], rel=1e-6)
    assert result["heldout"]["web"]["tokens"] == want["tokens"] <= 2048
    assert result["tasks"]["mc"]["kind"] == "multiple_choice" and result["tasks"]["mc"]["n"] == 4
    assert result["tasks"]["mc"]["chance_acc"] == pytest.approx(0.25)  # 4 choices per held-out example
    assert (result["tasks"]["mc"]["examples_requested"], result["tasks"]["mc"]["examples_cap"]) == (4, None)
    docs = len(source.heldout_texts)
    more = result["tasks"]["more"]
    assert (more["n"], more["examples_requested"]) == (docs, 60)  # capped by the 12 held-out documents
    assert more["examples_cap"].startswith(f"{docs} of 60 examples:") and "data.heldout_docs" in more["examples_cap"]
    assert "mc_acc" in summary["counts"] and "mc_chance_acc" not in summary["counts"]
    assert "more_examples_requested" not in summary["counts"]
    assert summary["counts"]["web_loss"] == result["heldout"]["web"]["loss"]
