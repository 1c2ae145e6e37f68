"""A decoder-only transformer built from a ModelSpec, written to be read (nanoGPT style).

    Transformer(model_spec, vocab_rows, max_seq_len, ep=None)   # ep: the expert mesh (expert parallelism)
    model(input_ids [n, L], position_ids [n, L] | None, doc_ids [n, L] | None) -> logits [n, L, V], float32
    (in training mode under context parallelism: logits [n, L / cp, V] of this rank's tokens,
    model.context_parallel.local(targets) are their targets)

The parts, by the papers that introduced them:
  * pre-norm blocks (x + attn(norm(x)), then x + mlp(norm(x))) and a final norm, with RMSNorm
    (Zhang & Sennrich 2019, arXiv 1910.07467) or LayerNorm (Ba et al. 2016; with a bias when
    model.norm_bias, default model.bias) or LayerNorm-1p (Megatron, Nemotron-4), all in runlib.model.norms;
    or parallel blocks, x + attn(norm(x)) + mlp(norm(x)) with one
    norm (model.parallel_block: GPT-J, PaLM section 2, Falcon) or one per branch (GPT-NeoX); an optional norm after the input
    embedding (model.embedding_norm: BLOOM);
  * rotary position embedding, RoPE (Su et al. 2021, arXiv 2104.09864), in the rotate-half form of
    GPT-NeoX and Llama; `set_rope(theta, max_seq_len)` recomputes its cos/sin tables (a long-context
    phase changes both); or learned absolute positions (GPT-2) of max_seq_len rows; or ALiBi (Press et
    al. 2022, arXiv 2108.12409): no position parameters, each head's score minus slope_h x (i - j), with
    the paper's geometric slopes (a power of two of heads: 2^(-8h/heads); otherwise those of the nearest
    lower power of two, then every other one of the next: ofirpress/attention_with_linear_biases,
    fairseq/models/transformer.py, get_slopes). In a packed row, i - j is the distance within the
    document (keys of other documents are masked), so the bias needs no position_ids. Transformer-XL
    relative positions (model.position: relative) are not built (the audit refuses them, RUN008);
  * grouped-query attention (Ainslie et al. 2023, arXiv 2305.13245): kv_heads key/value heads shared
    by groups of query heads; optional QK-norm (OLMo 2, arXiv 2501.00656): an RMSNorm over the whole q
    and the whole k projection, before they are split into heads;
  * SwiGLU MLP (Shazeer 2020, arXiv 2002.05202): w2(silu(w1 x) * w3 x), or w2(act(w1 x)) with GELU,
    ReLU (OPT) or squared ReLU (Primer, So et al. 2021, arXiv 2109.08668);
  * dropout (model.dropout, GPT-2/Megatron style) on the embedding output, the attention
    probabilities and each block's attention and MLP outputs, in training mode only; with dropout the
    sdpa backend is used in training (flex_attention has no dropout);
  * an LM head tied to the token embedding or its own matrix.
The parameter count equals runlib.plan.params.count_params exactly (tested for every spec in specs/).

Attention with document masking (packed rows): with doc_ids, a query at i reads key j only if
doc_ids[i] == doc_ids[j] and j <= i. Backends (`Transformer.attention_backend`):
  * "sdpa": torch's scaled_dot_product_attention, with is_causal=True when no row holds more than one
    document, else an explicit boolean mask [n, 1, L, L] built once per forward. Works everywhere,
    with gradients (the CPU training path).
  * "flex": torch.nn.attention.flex_attention with a BlockMask from `create_block_mask` over the
    document mask_mod (`document_causal_mask_mod`), which skips the blocks that are fully masked. On
    CUDA flex_attention is compiled (once, lazily); elsewhere it runs eagerly, which in torch 2.13 on
    CPU is an unfused reference implementation without backward (inference only).
  * "auto" (default): flex on CUDA tensors, sdpa elsewhere.
The two backends agree (tests/model/test_transformer.py: the mask_mod evaluated on index grids equals
the boolean mask; flex and sdpa forwards agree on CPU under no_grad).

Parallel training (runlib.model.parallelize) needs two hooks here: Attention reshapes q/k/v with -1
heads, so a tensor-parallel rank runs on its own heads only; `Block.recompute` (full) and
`Attention.recompute_core` (selective) switch on activation recomputation with
torch.utils.checkpoint inside forward, so parameter names (and checkpoints) stay the same.

Initialisation (GPT-2, Radford et al. 2019): normal(0, 0.02) for every linear and embedding weight,
normal(0, 0.02 / sqrt(2 * layers)) for the two projections that write into the residual stream
(attention output, MLP down projection), zeros for biases, ones for norm weights. Deterministic
given torch.manual_seed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

import torch
import torch.utils.checkpoint
from torch import nn
from torch.distributed.device_mesh import DeviceMesh

from runlib.model.attention import (
    Attention,
    AttentionMask,
    alibi_bias,
    alibi_slopes,
    context_parallel_mask,
    context_parallel_mask_mod,
    document_causal_mask,
    document_causal_mask_mod,
    flex_block_mask,
    has_documents,
    rope_tables,
    window_band,
    windowed_mask_mod,
)
from runlib.model.context_parallel import ContextParallel
from runlib.model.mla import MultiHeadLatentAttention
from runlib.model.mlp import MLP
from runlib.model.moe import GroupedExperts, MoE
from runlib.model.mtp import MultiTokenPrediction
from runlib.model.norms import LayerNorm1P, RMSNorm, make_norm
from runlib.plan.params import head_dim as spec_head_dim
from runlib.plan.params import moe_layers, rotary_dims, windowed_layers
from runlib.spec.models import ModelSpec, RopeScalingSpec

AttentionBackend = Literal["auto", "sdpa", "flex"]
INIT_STD = 0.02
# what other modules and tests import from here: the model's parts, defined in attention.py and mlp.py
__all__ = ["Block", "Transformer"]


class Block(nn.Module):
    """Pre-norm block: x + attention(norm(x)), then x + mlp(norm(x)); parallel: x + attention(h) + mlp(h),
    h = norm(x), one norm; model.norm_position output: x + norm(attention(x)), then x + norm(mlp(x))
    (OLMo 2); sandwich: x + norm'(attention(norm(x))), then the same for the MLP (Gemma 2). Dropout
    (model.dropout) on each branch's output in training."""

    recompute = False  # full activation recomputation of the block (set by runlib.model.parallelize)
    recompute_mlp = False  # the MLP recomputed in the backward pass (activation_checkpointing: mlp)
    windowed = False  # attends to model.sliding_window keys (set by Transformer)
    nope = False  # attends without RoPE (model.nope_every; set by Transformer)
    # with recompute: a policy of what to keep anyway (op-level selective: parallelize.op_selective_context)
    recompute_context_fn: Callable[[], tuple[Any, Any]] | None = None

    def __init__(self, model: ModelSpec, moe: bool = False, ep: DeviceMesh | None = None) -> None:
        super().__init__()
        self.parallel = model.parallel_block
        self.attention_norm = make_norm(model, model.d_model)
        # DeepSeek's latent attention (model.attention kind mla) or grouped-query attention
        self.attention: Attention | MultiHeadLatentAttention = (
            MultiHeadLatentAttention(model) if model.attention is not None else Attention(model)
        )
        # a parallel block's MLP reads the attention's norm unless it has its own (model.parallel_norms 2)
        own_mlp_norm = not self.parallel or model.parallel_norms == 2
        self.mlp_norm = make_norm(model, model.d_model) if own_mlp_norm else None
        # a mixture of experts' layer (model.moe), its routed experts split over the expert mesh's ep ranks
        self.mlp: nn.Module = MoE(model, ep_mesh=ep) if moe else MLP(model)
        self.norm_position = model.norm_position
        sandwich = model.norm_position == "sandwich"
        self.attention_post_norm = make_norm(model, model.d_model) if sandwich else None
        self.mlp_post_norm = make_norm(model, model.d_model) if sandwich else None
        self.dropout = nn.Dropout(model.dropout) if model.dropout > 0 else None

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None, mask: Any) -> torch.Tensor:
        if self.recompute and torch.is_grad_enabled():
            # full recomputation (Chen et al. 2016, arXiv 1604.06174): keep only the block's input (and,
            # with a context_fn, the op outputs its policy keeps: runlib.model.parallelize.op_selective_policy)
            extra: dict[str, Any] = {}
            if self.recompute_context_fn is not None:
                extra["context_fn"] = self.recompute_context_fn
            out: torch.Tensor = torch.utils.checkpoint.checkpoint(
                self.body, x, rope, mask, use_reentrant=False, **extra
            )
            return out
        return self.body(x, rope, mask)

    def _drop(self, y: torch.Tensor) -> torch.Tensor:
        return self.dropout(y) if self.dropout is not None else y

    def _mlp(self, x: torch.Tensor) -> torch.Tensor:
        """The MLP, recomputed in the backward pass under activation_checkpointing mlp (only its input kept)."""
        if self.recompute_mlp and torch.is_grad_enabled():
            out: torch.Tensor = torch.utils.checkpoint.checkpoint(self.mlp, x, use_reentrant=False)
            return out
        y: torch.Tensor = self.mlp(x)
        return y

    def body(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None, mask: Any) -> torch.Tensor:
        if self.mlp_norm is None or self.parallel:  # one norm for both branches, or one each (GPT-NeoX)
            h = self.attention_norm(x)
            g = h if self.mlp_norm is None else self.mlp_norm(x)
            return x + self._drop(self.attention(h, rope, mask)) + self._drop(self._mlp(g))
        if self.norm_position == "output":
            x = x + self._drop(self.attention_norm(self.attention(x, rope, mask)))
            return x + self._drop(self.mlp_norm(self._mlp(x)))
        if self.attention_post_norm is not None and self.mlp_post_norm is not None:  # sandwich
            x = x + self._drop(self.attention_post_norm(self.attention(self.attention_norm(x), rope, mask)))
            return x + self._drop(self.mlp_post_norm(self._mlp(self.mlp_norm(x))))
        x = x + self._drop(self.attention(self.attention_norm(x), rope, mask))
        return x + self._drop(self._mlp(self.mlp_norm(x)))


# ----------------------------------------------------------------------------------------- model


class Transformer(nn.Module):
    """The decoder of a ModelSpec, with vocab_rows embedding rows and positions up to max_seq_len."""

    attention_backend: AttentionBackend = "auto"
    alibi: torch.Tensor  # buffers (register_buffer), typed for mypy
    rope_cos: torch.Tensor
    rope_sin: torch.Tensor
    runlib_autocast: torch.dtype | None = None  # set by runlib.model.parallelize: the dtype forward_context casts to
    # set by runlib.model.parallelize: in training mode each rank computes its share of every row's tokens
    context_parallel: ContextParallel | None = None

    def __init__(self, model: ModelSpec, vocab_rows: int, max_seq_len: int, ep: DeviceMesh | None = None) -> None:
        super().__init__()
        self.spec, self.vocab_rows, self.max_seq_len = model, vocab_rows, max_seq_len
        self.head_dim = spec_head_dim(model)
        if model.position == "rope" and self.head_dim % 2:
            raise ValueError(f"RoPE needs an even head_dim, got {self.head_dim}")
        if model.position == "relative":
            raise ValueError(
                "model.position relative (Transformer-XL) is not enacted by runlib's model (RUN008 refuses it): "
                "use alibi, rope or learned"
            )
        self.tok_embeddings = nn.Embedding(vocab_rows, model.d_model)
        self.pos_embeddings = nn.Embedding(max_seq_len, model.d_model) if model.position == "learned" else None
        self.embedding_norm = make_norm(model, model.d_model) if model.embedding_norm else None
        self.embedding_dropout = nn.Dropout(model.dropout) if model.dropout > 0 else None
        self.register_buffer(
            "alibi", alibi_slopes(model.heads) if model.position == "alibi" else torch.empty(0), persistent=False
        )
        # ep: the expert mesh of expert parallelism (runlib.model.expert_parallel), for the MoE layers
        self.layers = nn.ModuleList(Block(model, moe=sparse, ep=ep) for sparse in moe_layers(model))
        for i, (block, windowed) in enumerate(zip(self.blocks(), windowed_layers(model), strict=True)):
            block.windowed = windowed  # a sliding-window layer (model.sliding_window, global_every)
            block.nope = model.nope_every is not None and (i + 1) % model.nope_every == 0  # no RoPE (SmolLM3)
        self.norm = make_norm(model, model.d_model)
        # DeepSeek-V3's MTP modules (arXiv 2412.19437 section 2.2): a block each, MoE past moe.dense_layers
        mtp_moe = model.moe is not None and model.layers >= model.moe.dense_layers
        self.mtp = (
            MultiTokenPrediction(model, lambda: Block(model, moe=mtp_moe, ep=ep)) if model.mtp is not None else None
        )
        # the last training forward's auxiliary loss: the MoE layers' balancing and z-losses and the MTP loss
        # times its weight, a mean over the tokens (None without them); the step adds it (runlib.train.step)
        self.aux_loss: torch.Tensor | None = None
        self.lm_head = nn.Linear(model.d_model, vocab_rows, bias=False)
        if model.tie_embeddings:
            self.lm_head.weight = self.tok_embeddings.weight
        self.rope_theta = model.rope_theta
        self.register_buffer("rope_cos", torch.empty(0), persistent=False)
        self.register_buffer("rope_sin", torch.empty(0), persistent=False)
        if model.position == "rope":
            self.set_rope(model.rope_theta, max_seq_len)
        self.reset_parameters()

    def blocks(self) -> list[Block]:
        """The transformer blocks, typed (nn.ModuleList yields Modules)."""
        return [block for block in self.layers if isinstance(block, Block)]

    # -- set-up

    def reset_parameters(self) -> None:
        """GPT-2 initialisation: N(0, 0.02), residual projections N(0, 0.02/sqrt(2*layers)), zero biases, unit norms."""
        residual_std = INIT_STD / math.sqrt(2 * self.spec.layers)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                std = residual_std if getattr(module, "residual_projection", False) else INIT_STD
                if not (module is self.lm_head and self.spec.tie_embeddings):
                    nn.init.normal_(module.weight, mean=0.0, std=std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)
            elif isinstance(module, GroupedExperts):  # the experts' [E, d, f] weights, as the MLP's
                module.reset_parameters(INIT_STD, residual_std)
            elif isinstance(module, (RMSNorm, nn.LayerNorm)):
                if module.weight is not None:  # a scale of 1 (LayerNorm1P stores it as 1 + 0)
                    (nn.init.zeros_ if isinstance(module, LayerNorm1P) else nn.init.ones_)(module.weight)
                bias = getattr(module, "bias", None)
                if isinstance(bias, torch.Tensor):
                    nn.init.zeros_(bias)

    def set_rope(self, theta: float, max_seq_len: int | None = None, scaling: RopeScalingSpec | None = None) -> None:
        """Recompute the RoPE cos/sin tables for base theta (and a phase's frequency scaling) and positions up to
        max_seq_len."""
        if self.spec.position != "rope":
            raise ValueError("set_rope: the model has learned positions, not RoPE")
        max_seq_len = max_seq_len or self.max_seq_len
        cos, sin = rope_tables(rotary_dims(self.spec), max_seq_len, theta, self.rope_cos.device, scaling)
        self.rope_cos, self.rope_sin = cos, sin  # buffers stay buffers (non-persistent: not in state_dict)
        self.rope_theta = theta

    # -- forward

    def context_parallel_attention_mask(
        self, cp: ContextParallel, doc_ids: torch.Tensor | None, n: int, length: int, device: torch.device
    ) -> AttentionMask:
        """The mask of this rank's queries over the gathered keys of rows of `length` tokens (built once)."""
        query, keys = cp.query_index(length, device), cp.key_index(length, device)
        docs = doc_ids if doc_ids is not None and has_documents(doc_ids) else None
        if self.attention_backend == "flex" or (self.attention_backend == "auto" and device.type == "cuda"):
            mask_mod = context_parallel_mask_mod(query, keys, docs)
            block = flex_block_mask(docs, n, query.numel(), device, mask_mod=mask_mod, kv_length=length)
            return AttentionMask(block_mask=block, context_parallel=cp)
        return AttentionMask(bool_mask=context_parallel_mask(query, keys, docs), context_parallel=cp)

    def attention_mask(
        self,
        doc_ids: torch.Tensor | None,
        n: int,
        length: int,
        device: torch.device,
        dtype: torch.dtype,
        window: int | None = None,
    ) -> AttentionMask:
        """The mask every layer of this forward uses (built once; a second one, `window`, for the
        sliding-window layers: a query sees its `window` latest keys); ALiBi's additive mask in `dtype` (the
        residual stream's: the embedding's output)."""
        if window is not None and window >= length:
            window = None  # the window holds the whole row: the plain mask
        backend = self.attention_backend
        if self.training and self.spec.dropout > 0 and torch.is_grad_enabled():
            backend = "sdpa"  # flex_attention has no dropout on the attention probabilities
        alibi = self.spec.position == "alibi"
        if backend == "flex" or (backend == "auto" and device.type == "cuda"):
            # no host sync to look for documents: a BlockMask skips the masked blocks either way
            score_mod = None
            if alibi:
                slopes = self.alibi

                def score_mod(
                    score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor
                ) -> torch.Tensor:
                    return score + slopes[h] * (kv_idx - q_idx)

            mask_mod = windowed_mask_mod(document_causal_mask_mod(doc_ids), window) if window else None
            block = flex_block_mask(doc_ids, n, length, device, mask_mod=mask_mod)
            return AttentionMask(block_mask=block, score_mod=score_mod)
        documents = doc_ids is not None and has_documents(doc_ids)
        if alibi or documents or window:
            if doc_ids is not None and documents:
                allowed = document_causal_mask(doc_ids)
            else:
                allowed = torch.ones(length, length, dtype=torch.bool, device=device).tril()[None, None]
            if window:
                allowed = allowed & window_band(length, window, device)
            return AttentionMask(bool_mask=alibi_bias(self.alibi, allowed, dtype) if alibi else allowed)
        return AttentionMask()

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        doc_ids: torch.Tensor | None = None,
        targets: torch.Tensor | None = None,
    ) -> torch.Tensor:
        # a pipeline stage after the first (runlib.model.pipeline) receives the residual stream [n, L, d] (a
        # tensor-parallel rank's sequence shard of it): the row length is position_ids'
        first_stage = self.tok_embeddings is not None
        n, length = input_ids.shape[0], (input_ids.shape[1] if position_ids is None else position_ids.shape[1])
        device = input_ids.device
        if position_ids is None:
            position_ids = torch.arange(length, device=device).expand(n, length)
        # context parallelism splits training rows only: evaluation runs whole windows on every rank
        cp = self.context_parallel if self.training else None
        if cp is not None:
            if self.spec.position == "alibi":
                raise ValueError("context parallelism with ALiBi is not enacted (RUN001 refuses it)")
            input_ids, position_ids = cp.local(input_ids), cp.local(position_ids)
        x = self.tok_embeddings(input_ids) if first_stage else input_ids
        if first_stage and self.spec.embedding_multiplier is not None:
            x = x * torch.tensor(self.spec.embedding_multiplier, dtype=x.dtype)  # Gemma: sqrt(d_model)
        rope = None
        if self.pos_embeddings is not None:
            x = x + self.pos_embeddings(position_ids)
        elif self.spec.position == "rope":  # (alibi: positions enter as the attention bias, attention_mask)
            if device.type != "cuda" and int(position_ids.max()) >= self.rope_cos.shape[0]:
                raise ValueError(
                    f"position {int(position_ids.max())} is beyond the RoPE table of {self.rope_cos.shape[0]}; "
                    "call set_rope(theta, max_seq_len) first"
                )
            cos, sin = self.rope_cos[position_ids], self.rope_sin[position_ids]  # [n, L, hd]
            rope = (cos[:, None], sin[:, None])
        if self.embedding_norm is not None:
            x = self.embedding_norm(x)
        if self.embedding_dropout is not None:
            x = self.embedding_dropout(x)
        local = None
        if cp is not None:
            if self.spec.sliding_window is not None:
                raise ValueError("context parallelism with sliding_window is not enacted (RUN001 refuses it)")
            mask = self.context_parallel_attention_mask(cp, doc_ids, n, length, device)
        else:
            mask = self.attention_mask(doc_ids, n, length, device, x.dtype)
            if self.spec.sliding_window is not None:
                local = self.attention_mask(doc_ids, n, length, device, x.dtype, window=self.spec.sliding_window)
        for layer in self.blocks():
            x = layer(x, None if layer.nope else rope, local if layer.windowed and local is not None else mask)
        if self.lm_head is None:  # a pipeline stage before the last: the residual stream goes on
            return x
        logits = self.head(self.norm(x))
        self.aux_loss = self.auxiliary_loss(x, input_ids, targets, doc_ids, rope, mask)
        return logits

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """The output logits of normed hidden states, float32, soft-capped with model.final_softcap."""
        logits: torch.Tensor = self.lm_head(x).float()
        cap = self.spec.final_softcap
        return cap * torch.tanh(logits / cap) if cap is not None else logits

    def auxiliary_loss(
        self,
        h: torch.Tensor,
        input_ids: torch.Tensor,
        targets: torch.Tensor | None,
        doc_ids: torch.Tensor | None,
        rope: Any,
        mask: Any,
    ) -> torch.Tensor | None:
        """What training adds to the token loss, a mean over tokens: given the targets, mtp.loss_weight x the
        MTP modules' mean cross-entropy from the last layer's output h (DeepSeek-V3 eq. 25); None without MTP
        modules or outside training. (The MoE layers' balancing and z-losses ride on their outputs instead:
        runlib.model.aux_loss, with MoE.aux_loss_scale.)"""
        if not (self.training and torch.is_grad_enabled()):
            return None
        parts: list[torch.Tensor] = []
        if self.mtp is not None and targets is not None and self.spec.mtp is not None:
            embed = self.tok_embeddings
            multiplier = self.spec.embedding_multiplier

            def embed_fn(ids: torch.Tensor) -> torch.Tensor:
                e: torch.Tensor = embed(ids)
                return e * torch.tensor(multiplier, dtype=e.dtype) if multiplier is not None else e

            mtp = self.mtp(h, embed_fn, self.head, input_ids, targets, rope, mask, doc_ids)
            parts.append(self.spec.mtp.loss_weight * mtp)
        return torch.stack([p.float() for p in parts]).sum() if parts else None
