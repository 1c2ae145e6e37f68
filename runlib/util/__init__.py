"""Small helpers shared across layers."""
