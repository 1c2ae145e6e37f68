"""The tokenizer stage: byte-level BPE trained on a sample of the curated sources (or a pretrained one)."""
