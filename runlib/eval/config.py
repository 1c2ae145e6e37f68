"""The config of the eval_phase stage: exactly what `evaluate_phase` reads besides its inputs
(the phase's model, the tokenizer, every source's tokens)."""

from __future__ import annotations

from runlib.curate.config import InputFile
from runlib.spec.models import EvalTaskSpec, ModelSpec, RopeScalingSpec
from runlib.store.stageconfig import StageConfig


class EvalModelConfig(StageConfig):
    """The shape of the model to load: what `Transformer(model, vocab_rows, position_rows)` is built from."""

    spec: ModelSpec
    """The spec's model section."""

    vocab_rows: int
    """Embedding rows (the tokenizer's ids padded, or model.vocab_size)."""

    position_rows: int
    """Positions the model is built for: the longest context of any phase (and model.seq_len)."""


class EvalConfig(StageConfig):
    """One phase's evaluation: held-out loss per source and the spec's tasks, at the phase's context."""

    KEYED_WHEN_SET = frozenset({"task_files", "rope_scaling"})

    phase: str
    """Name of the evaluated phase (recorded in eval.json)."""

    phase_index: int
    """Its position in the run, from 0 (recorded in eval.json)."""

    end_tokens: int
    """Tokens seen by the end of the phase (eval.json's `tokens`: the report's x axis)."""

    seq_len: int
    """Context length of the phase: held-out windows and task prompts are cut to it."""

    rope_theta: float | None
    """RoPE base of the phase (None with learned positions)."""

    rope_scaling: RopeScalingSpec | None = None
    """The phase's RoPE frequency scaling (phases[].rope_scaling)."""

    model: EvalModelConfig
    """The model's shape."""

    heldout_tokens: int | None
    """Held-out tokens per source at most (None: all)."""

    tasks: list[EvalTaskSpec]
    """Downstream tasks (a task from_heldout reads that source's `tokens:<source>` input)."""

    task_files: dict[str, list[InputFile]] = {}
    """Task name -> the files its `path` names (the file, or every file under a folder), each with its size
    and content digest: editing a task file changes the key of every evaluation and nothing else. The stage
    checks them before scoring (runlib.curate.inputs.check_unchanged)."""
