"""A stage instance's address in the store: its stage, key, config, inputs and CLI parameters, and the
places its artifact and done stamp live. The stage graph (runlib.graph.build) is made of these."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from runlib.store.manifest import MANIFEST
from runlib.store.settings import artifacts_dir, done_stamp
from runlib.store.stageconfig import StageConfig

C = TypeVar("C", bound=StageConfig)


@dataclass(frozen=True)
class StageNode:
    stage: str  # = rule name = `runlib <stage>` subcommand = artifact folder
    instance: str  # human name of this instance, e.g. "curate_shard code/0"
    key: str
    config: StageConfig  # all the stage reads besides its inputs' artifacts
    inputs: dict[str, str] = field(default_factory=dict)  # role -> input node key
    params: dict[str, Any] = field(default_factory=dict)  # CLI arguments that select the instance

    @property
    def dir(self) -> Path:
        return artifacts_dir() / self.stage / self.key

    @property
    def manifest_path(self) -> Path:
        return self.dir / MANIFEST

    @property
    def done_path(self) -> Path:
        """The done stamp: the Snakemake target of this node (runlib.store.settings.done_stamp)."""
        return done_stamp(self.stage, self.key)

    def config_as(self, kind: type[C]) -> C:
        """The node's config as its stage kind's config type (runlib.graph.registry): the typed hop from the
        graph, which holds every kind's nodes, to one stage's code."""
        if not isinstance(self.config, kind):
            raise TypeError(f"{self.instance}: config is a {type(self.config).__name__}, not a {kind.__name__}")
        return self.config


@dataclass(frozen=True)
class ArtifactRef:
    """An artifact named by its stage and key alone (no spec, no graph): what the lock, the orphan
    cleanup and the cheap verification of runlib.store.artifacts read of a StageNode."""

    stage: str
    key: str
    instance: str

    @property
    def dir(self) -> Path:
        return artifacts_dir() / self.stage / self.key

    @property
    def manifest_path(self) -> Path:
        return self.dir / MANIFEST


class Addressed(Protocol):
    """What the lock, the orphan cleanup and the cheap verification of runlib.store.artifacts read of an
    artifact: a StageNode or an ArtifactRef."""

    @property
    def stage(self) -> str: ...

    @property
    def key(self) -> str: ...

    @property
    def instance(self) -> str: ...

    @property
    def dir(self) -> Path: ...

    @property
    def manifest_path(self) -> Path: ...
