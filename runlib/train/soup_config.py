"""The config of the soup_phase stage: what averaging the weights of a phase's branches reads besides the
ingredients' final.pt (PhaseSpec.soup)."""

from __future__ import annotations

from pydantic import Field

from runlib.store.stageconfig import StageConfig


class SoupConfig(StageConfig):
    """A uniform soup (Wortsman et al. 2022, arXiv 2203.05482, section 2): each parameter the weighted mean
    of the ingredients' (input roles ingredient0, ingredient1, ..., in this order)."""

    phase_index: int
    """The souped phase's position in the run (the last phase)."""

    weights: list[float] = Field(min_length=2)
    """One weight per ingredient, summing to 1 (a uniform soup: 1/n each)."""
