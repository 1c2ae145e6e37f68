"""The config of the fit_ladder stage: the rungs' sizes, token counts and compute, and the target's.

Built by runlib.graph.configs.fit_ladder_config from the spec's ladder; the stage reads each rung's
eval.json through its inputs (role "eval:<rung name>").
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from runlib.store.stageconfig import StageConfig


class LadderPoint(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    width: int  # d_model
    layers: int
    params: int  # non-embedding parameters: the fit's N
    params_total: int
    tokens: int  # the fit's D
    flops: float  # the plan's training FLOPs
    held_out: bool  # kept out of the fit


class FitLadderConfig(StageConfig):
    rungs: list[LadderPoint]
    """Every rung, fitted or held out."""
    skipped: list[str]
    """Rungs left out of the ladder and why (shown in the report)."""
    target: LadderPoint
    """The spec's own run: the point the fit predicts."""
    sources: list[str]
    """Sources with a held-out loss: one fit each, and one of their pooled loss ("overall")."""
    bootstrap: int
    """Bootstrap resamples of the rungs for the prediction interval."""
    seed: int
    """Seed of the bootstrap."""
