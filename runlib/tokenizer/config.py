"""The config of the train_tokenizer stage: exactly what `train_tokenizer` reads."""

from __future__ import annotations

from typing import Literal

from runlib.curate.config import InputFile
from runlib.store.stageconfig import StageConfig


class TokenizerConfig(StageConfig):
    """The tokenizer to train (byte-level BPE) or to copy (pretrained), with its edits."""

    KEYED_WHEN_SET = frozenset({"pretrained_file"})

    vocab_size: int | None
    """Learned BPE vocabulary before reserved tokens (None with `pretrained`)."""

    reserved_tokens: int
    """Special tokens at ids 0 .. reserved_tokens - 1; id 0 is the end-of-document token."""

    digits: Literal["single", "triplets", "none"]
    """Digit pre-tokenization: single | triplets | none."""

    domain_tokens: list[str]
    """Strings added whole to the vocabulary."""

    drop_tokens: list[str]
    """Strings no learned token may contain."""

    train_on: dict[str, float]
    """Source name -> sampling weight; the sources are this stage's `source:<name>` inputs."""

    train_bytes: int | None
    """UTF-8 bytes of text sampled for training (None: up to 1 GB, without repeating a document)."""

    min_frequency: int
    """Minimum pair frequency for a merge."""

    pretrained: str | None
    """Path of a tokenizer.json used instead of training one."""

    pretrained_file: InputFile | None = None
    """`pretrained`'s size and content digest (XXH3-128), so replacing the tokenizer.json changes this stage's
    key and everything downstream; the stage refuses a file whose bytes no longer match (None: trained)."""
