"""Held-out loss, perplexity and bits per byte of one source's held-out shard.

    heldout_metrics(model, token_dir, seq_len, eos_id, bytes_per_token) -> {"loss", "perplexity",
        "bits_per_byte", "tokens", "text_tokens", "bytes", "windows"}

The held-out shard (TokenShard(token_dir, "heldout"): every document's ids followed by EOS, end to
end) is cut into windows of seq_len + 1 tokens starting every seq_len tokens, from the first token on:
consecutive windows share one token (the last target of one is the first input of the next, as in
runlib.data.loader), so the windows' targets do not overlap and every token but the first is a target
once. The last, shorter window is evaluated too. A window gives inputs w[:-1] and targets w[1:], packed by document as in training (data.packing: document): a document's tokens attend
only to earlier tokens of the same document, positions restart at 0 at each document start (and at
the window start), and the target after an EOS (the next document's first token, which its own
document cannot predict) is not scored. Everything else is scored, the EOS targets included.

    loss           mean nats per scored token
    perplexity     exp(loss)
    bytes          text_tokens * bytes_per_token: the UTF-8 bytes the scored tokens stand for, with
                   bytes_per_token the source's bytes per text token (tokenize stage, EOS excluded),
                   and text_tokens the scored targets that are not EOS
    bits_per_byte  loss * tokens / (ln 2 * bytes): the EOS targets' nats are charged to the text they end

Runs under torch.no_grad in eval mode (the model's mode is restored); the windows and batches are
fixed, so the result is deterministic for given weights.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from runlib.data.shards import TokenDirs, open_split


def document_layout(input_ids: torch.Tensor, eos_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """position_ids and doc_ids [n, L] of packed rows: a new document starts after each EOS (and at 0)."""
    n, length = input_ids.shape
    is_eos = (input_ids == eos_id).long()
    doc_ids = torch.cumsum(is_eos, dim=1) - is_eos  # EOS ends its own document
    index = torch.arange(length, device=input_ids.device).expand(n, length)
    starts = torch.zeros_like(is_eos, dtype=torch.bool)
    starts[:, 0] = True
    starts[:, 1:] = is_eos[:, :-1].bool()
    last_start = torch.cummax(torch.where(starts, index, torch.zeros_like(index)), dim=1).values
    return index - last_start, doc_ids


def _windows(tokens: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Windows [n, seq_len + 1] starting every seq_len tokens, and the shorter last one (or None)."""
    full = max(0, (tokens.size - 1) // seq_len)
    body = tokens[np.arange(full)[:, None] * seq_len + np.arange(seq_len + 1)]
    tail = tokens[full * seq_len :]
    return body, (tail if tail.size >= 2 else None)


def _device(model: torch.nn.Module) -> torch.device:
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def score_windows(model: torch.nn.Module, windows: np.ndarray, eos_id: int) -> tuple[float, int, int]:
    """(sum of nats, scored targets, scored targets that are not EOS) of windows [n, W] of token ids."""
    device = _device(model)
    w = torch.from_numpy(windows.astype(np.int64)).to(device)
    inputs, targets = w[:, :-1], w[:, 1:]
    position_ids, doc_ids = document_layout(inputs, eos_id)
    logits = model(inputs, position_ids, doc_ids)
    if logits is None:  # a pipeline stage before the last (runlib.model.pipeline.PipelineForward): no logits here
        return 0.0, 0, 0
    nats = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view_as(targets)
    scored = inputs != eos_id  # the target after an EOS opens the next document: masked
    total = nats.double()[scored].sum().item()
    return total, int(scored.sum()), int((scored & (targets != eos_id)).sum())


def heldout_metrics(
    model: torch.nn.Module,
    token_dir: TokenDirs,
    seq_len: int,
    eos_id: int,
    bytes_per_token: float,
    batch_size: int = 8,
    max_tokens: int | None = None,
) -> dict[str, Any]:
    """Loss, perplexity and bits per byte on the held-out shard of token_dir (at most max_tokens of it)."""
    shard = open_split(token_dir, "heldout")
    tokens = np.asarray(shard.tokens[:max_tokens] if max_tokens is not None else shard.tokens)
    body, tail = _windows(tokens, seq_len)
    nats = 0.0
    scored = text = 0
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            batches = [body[i : i + batch_size] for i in range(0, len(body), batch_size)]
            if tail is not None:
                batches.append(tail[None])
            for batch in batches:
                s, n, t = score_windows(model, batch, eos_id)
                nats, scored, text = nats + s, scored + n, text + t
    finally:
        model.train(was_training)
    loss = nats / scored if scored else math.nan
    nbytes = text * bytes_per_token
    return {
        "loss": loss,
        "perplexity": math.exp(loss) if scored else math.nan,
        "bits_per_byte": nats / (math.log(2) * nbytes) if nbytes else math.nan,
        "tokens": scored,
        "text_tokens": text,
        "bytes": nbytes,
        "windows": len(body) + (tail is not None),
    }
