"""The config of the tokenize stage: exactly what `tokenize_part` reads besides its inputs."""

from __future__ import annotations

from typing import Literal

from runlib.store.stageconfig import StageConfig


class TokenizeConfig(StageConfig):
    """How a curated shard's token ids are stored (the tokenizer and the documents are inputs)."""

    token_dtype: Literal["auto", "uint16", "uint32"]
    """Storage of token ids on disk; auto: the smallest that holds the tokenizer's largest id."""
