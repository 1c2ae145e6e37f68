"""The plan: every quantity derived from a spec, by pure functions (no I/O, no torch)."""

from runlib.plan.derive import PhasePlan, Plan, SourcePlan, derive

__all__ = ["Plan", "PhasePlan", "SourcePlan", "derive"]
