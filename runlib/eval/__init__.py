"""Evaluation: held-out loss and bits per byte per source (heldout), downstream tasks from JSONL (tasks)."""
