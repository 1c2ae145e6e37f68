"""Helpers several checks share (a leading underscore keeps this module out of the catalog)."""

from __future__ import annotations

from collections.abc import Callable

from runlib.audit.registry import Context, summarize
from runlib.plan import PhasePlan
from runlib.spec.models import PhaseSpec
from runlib.spec.units import Duration, format_count


def who(names: list[str], total: int) -> str:
    """Which phases a global setting concerns, for a message: 'all phases', "phase 'long'", ..."""
    if not names:
        return "the global layout (no phase uses it)"
    if total > 1 and len(names) == total:
        return "all phases"
    return ("phase " if len(names) == 1 else "phases ") + summarize([repr(n) for n in names])


def split_by_override(ctx: Context, overrides: Callable[[PhaseSpec], bool]) -> tuple[list[PhasePlan], list[str]]:
    """(phases that override the setting, names of the phases that use the global value).

    A problem in an override is reported at the phase's path; a problem in the global value once, at
    the global path, naming the phases it concerns."""
    own = [p for p in ctx.plan.phases if overrides(p.settings.phase)]
    global_names = [p.name for p in ctx.plan.phases if not overrides(p.settings.phase)]
    return own, global_names


def overrides_parallelism(field: str) -> Callable[[PhaseSpec], bool]:
    return lambda phase: phase.parallelism is not None and getattr(phase.parallelism, field) is not None


def tokens_and_steps(ctx: Context, tokens: float) -> str:
    """A token amount on this run's timeline, in tokens and in steps."""
    steps = ctx.plan.duration_steps(Duration(tokens, "tokens"))
    return f"{format_count(tokens)} tokens ({f'{steps:,.1f}'.removesuffix('.0')} steps)"
