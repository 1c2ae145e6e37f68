"""Benchmarks: scripts that print figures (medians, and ratios against a baseline measured in the same run)."""
