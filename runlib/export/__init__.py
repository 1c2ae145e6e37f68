"""Exports of built artifacts to other ecosystems (runlib.export.hf: a Hugging Face checkpoint)."""
