"""`runlib export SPEC --phase NAME --out DIR`: a built phase of the spec (or a branch or the soup of its last
phase, NAME = <phase>@<branch>, <phase>@<soup>) as a Hugging Face checkpoint.

The I/O edge of runlib.export.hf: finds the phase's train_phase artifact and the tokenizer artifact in the
spec's graph, verifies both against their manifests (sizes and digests) before reading, and writes the
export atomically.
"""

from __future__ import annotations

from pathlib import Path

from runlib.errors import UserError
from runlib.export.hf import ExportShape, hf_architecture, write_export
from runlib.graph.build import build_graph
from runlib.spec import load_spec
from runlib.store.artifacts import verify_node
from runlib.store.command import snakemake_command
from runlib.tokenizer.special import PAD
from runlib.train.config import TrainPhaseConfig


def export_phase(spec_path: str, phase: str, out_dir: Path) -> Path:
    from runlib.train import checkpoint as ckpt  # lazy: torch, paid only by `runlib export`

    spec = load_spec(spec_path).spec
    hf_architecture(spec.model)  # refuse before reading gigabytes
    graph = build_graph(spec)
    node = graph.named_phase_node(spec, "train_phase", phase, f"{spec_path}: --phase")
    if not node.manifest_path.exists():
        raise UserError(
            f"{spec_path}: phase {phase!r} is not built ({node.stage} {node.key}); "
            f"fix: {snakemake_command(spec_path, cores='all')}"
        )
    # a soup (soup_phase) is shaped as its ingredients: its first one's config and tokenizer describe it
    trained = graph.input_nodes(node)["ingredient0"] if node.stage == "soup_phase" else node
    tokenizer = graph.input_nodes(trained)["tokenizer"]
    verify_node(node, spec_path=spec_path)
    details = verify_node(tokenizer, spec_path=spec_path).details
    cfg = trained.config_as(TrainPhaseConfig)
    special_ids = dict(details["special_ids"])
    shape = ExportShape(
        model=cfg.model,
        vocab_rows=cfg.vocab_rows,
        position_rows=cfg.position_rows,
        seq_len=cfg.seq_len,
        rope_theta=cfg.rope_theta,
        rope_scaling=cfg.rope_scaling,
        eos_id=int(details["eos_id"]),
        pad_id=special_ids.get(PAD),
    )
    state = ckpt.load(node.dir / "final.pt")["model"]
    provenance = {"spec": str(spec_path), "run": spec.name, "phase": phase, f"{node.stage}_key": node.key}
    provenance["tokenizer_key"] = tokenizer.key
    tokenizer_json = (tokenizer.dir / "tokenizer.json").read_text()
    return write_export(state, shape, tokenizer_json, special_ids, out_dir, provenance)
