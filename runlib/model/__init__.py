"""The model: a decoder-only transformer built from the spec (runlib.model.transformer)."""
