"""Sparse and latent parts of the model: mixture-of-experts feed-forward layers (`model.moe`), multi-head
latent attention (`model.attention`) and multi-token prediction (`model.mtp`).

Whether the values make a trainable run (top-k above the experts, no load balancing, experts that do not
divide over the expert-parallel ranks) is the auditor's (the MOE checks); the schema parses them.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator

from runlib.spec.models.base import MAX_WIDTH, KeyedWhenSet, SpecModel

MAX_EXPERTS = 65_536  # DeepSeek-V3 routes over 256, Kimi K2 over 384: far beyond any published layer
MAX_LOSS_COEFFICIENT = 1e3


class MoeSpec(KeyedWhenSet):
    """Mixture-of-experts feed-forward layers: each token's hidden state goes to the top_k of `experts`
    routed expert MLPs chosen by a learned router, plus `shared_experts` every token passes through
    (token-choice top-k routing: Shazeer et al. 2017, arXiv 1701.06538; Switch Transformer, Fedus et al.
    2021, arXiv 2101.03961; DeepSeekMoE, Dai et al. 2024, arXiv 2401.06066, for the shared experts).
    Each expert is an MLP of model.activation with expert_d_ff hidden units."""

    KEYED_WHEN_SET: ClassVar[frozenset[str]] = frozenset(
        {"shared_d_ff", "shared_gate", "groups", "groups_per_token", "route_scale", "capacity_factor"}
    )

    experts: int = Field(ge=1, le=MAX_EXPERTS)
    """Routed experts per MoE layer (Mixtral 8, OLMoE 64, Qwen3-30B-A3B 128, DeepSeek-V3 256)."""

    top_k: int = Field(ge=1, le=MAX_EXPERTS)
    """Routed experts each token is sent to (Mixtral 2, OLMoE and DeepSeek-V3 8)."""

    expert_d_ff: int = Field(ge=1, le=2**24)
    """Hidden size of each routed expert's MLP (DeepSeek-V3 2048, OLMoE 1024); the dense layers keep model.d_ff."""

    shared_experts: int = Field(0, ge=0, le=MAX_EXPERTS)
    """Experts every token passes through besides the routed ones (DeepSeekMoE's shared expert isolation, arXiv 2401.06066 section 3.2: DeepSeek-V3 1, V2 2; Qwen2-MoE 1); 0: none."""

    shared_d_ff: int | None = Field(None, ge=1, le=2**24)
    """Hidden size of the shared experts taken together, one MLP (Qwen2-MoE-57B-A14B: 20480); omitted: shared_experts x expert_d_ff, as DeepSeek's."""

    shared_gate: bool = False
    """The shared experts' output scaled by sigmoid(w . x), one d_model weight vector per layer (Qwen2-MoE's shared_expert_gate; transformers' Qwen2MoeSparseMoeBlock); false: added as is (DeepSeek)."""

    dense_layers: int = Field(0, ge=0, le=100_000)
    """The first dense_layers layers keep a dense MLP of model.d_ff (DeepSeek-V3's first_k_dense_replace: 3, V2's 1); 0: none."""

    every: int = Field(1, ge=1, le=100_000)
    """Of the layers after dense_layers, layer i (from 0) is an MoE layer when (i + 1) % every == 0, the others dense (Qwen2-MoE's decoder_sparse_step, Llama 4's interleave_moe_layer_step: 2 alternates); 1: every one."""

    score: Literal["softmax", "sigmoid"] = "softmax"
    """The router's affinity of a token to each expert from its logits: softmax over the experts (Switch, Mixtral, OLMoE, Qwen-MoE, DeepSeek-V2), or sigmoid per expert (DeepSeek-V3, arXiv 2412.19437 section 2.1.2 eq. 15)."""

    normalize_top_k: bool = True
    """The top_k selected scores renormalized to sum to 1 before they weight the experts' outputs (Mixtral, Qwen3-MoE, DeepSeek-V3: norm_topk_prob); false: used as scored (OLMoE, DeepSeek-V2)."""

    route_scale: float = Field(1.0, gt=0, le=1e3)
    """The routed experts' weighted sum times this (DeepSeek-V3's routed_scaling_factor 2.5, V2's 16); 1: none."""

    groups: int | None = Field(None, ge=1, le=MAX_EXPERTS)
    """Node-limited routing: the experts fall in `groups` equal groups, and each token picks its top_k among the groups_per_token best groups only (DeepSeek-V2 section 2.1.3 device-limited routing, V3 section 2.1.2 node-limited: n_group 8, topk_group 4); omitted: among all experts."""

    groups_per_token: int | None = Field(None, ge=1, le=MAX_EXPERTS)
    """With groups: the groups a token's experts may come from (DeepSeek-V3: 4 of 8)."""

    @field_validator("groups_per_token")
    @classmethod
    def _groups_per_token_needs_groups(cls, per_token: int | None, info: ValidationInfo) -> int | None:
        groups = info.data.get("groups")
        if per_token is not None and groups is None:
            raise ValueError("groups_per_token without groups: give groups (equal groups of experts), or omit it")
        if per_token is not None and groups is not None and per_token > groups:
            raise ValueError(f"groups_per_token {per_token} above groups {groups}: use at most {groups}")
        return per_token

    aux_loss: float = Field(0.0, ge=0, le=MAX_LOSS_COEFFICIENT)
    """Coefficient alpha of the auxiliary load-balancing loss alpha x experts x sum_i f_i P_i, f_i the share of the routed assignments that went to expert i and P_i its mean router probability (Switch Transformer, arXiv 2101.03961 eq. 4: 0.01; OLMoE 0.01; Mixtral's config 0.02); 0: none."""

    aux_loss_scope: Literal["micro_batch", "sequence"] = "micro_batch"
    """Over which tokens f_i and P_i of the auxiliary loss are taken: the micro-batch's (Switch, OLMoE), or each sequence's, then averaged (DeepSeek-V3's complementary sequence-wise balance loss, section 2.1.2 eq. 17-20, alpha 0.0001)."""

    bias_update_rate: float = Field(0.0, ge=0, le=1)
    """Auxiliary-loss-free balancing: a bias per expert added to its score for the top-k choice only (not to the weights), lowered by this rate after each step for experts above the mean load and raised for those below (DeepSeek-V3 section 2.1.2, Wang et al. 2024 arXiv 2408.15664: gamma 0.001); 0: none."""

    z_loss: float = Field(0.0, ge=0, le=MAX_LOSS_COEFFICIENT)
    """Coefficient of the router z-loss, the mean over tokens of logsumexp(router logits)^2 (ST-MoE, Zoph et al. 2022, arXiv 2202.08906 eq. 5: 0.001; OLMoE 0.001); 0: none."""

    capacity_factor: float | None = Field(None, gt=0, le=1e3)
    """Each expert takes at most capacity_factor x tokens x top_k / experts tokens per micro-batch, the rest of its assignments dropped (Switch Transformer section 2.2: 1.0 to 1.25; GShard); omitted: dropless, every assignment computed (MegaBlocks, Gale et al. 2022; OLMoE, DeepSeek-V3)."""


class MlaSpec(SpecModel):
    """Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434 section 2.1; DeepSeek-V3 section 2.1.1):
    keys and values come from one kv_lora_rank latent per token (cached instead of the heads' keys and
    values), queries from a q_lora_rank latent, and each head's query and key are a qk_nope_head_dim
    part without positions and a qk_rope_head_dim part rotated by RoPE, the key's rotated part shared by
    the heads. model.heads are the heads; model.head_dim and kv_heads do not apply."""

    kind: Literal["mla"]
    """mla: multi-head latent attention (the only kind besides the default multi-head / grouped-query attention, which writes no model.attention)."""

    q_lora_rank: int | None = Field(None, ge=1, le=MAX_WIDTH)
    """Width of the query latent, d_model -> q_lora_rank -> heads x (qk_nope + qk_rope), with an RMSNorm on the latent (DeepSeek-V3 1536); omitted: queries projected from d_model directly (DeepSeek-V2-Lite)."""

    kv_lora_rank: int = Field(ge=1, le=MAX_WIDTH)
    """Width of the key/value latent, with an RMSNorm on it (DeepSeek-V2 and V3: 512)."""

    qk_rope_head_dim: int = Field(ge=2, le=MAX_WIDTH, multiple_of=2)
    """Per-head dimensions of the query and key that RoPE rotates (64); the key's are one projection shared by the heads."""

    qk_nope_head_dim: int = Field(ge=0, le=MAX_WIDTH)
    """Per-head dimensions of the query and key without positions (128)."""

    v_head_dim: int = Field(ge=1, le=MAX_WIDTH)
    """Per-head width of the values, and so of the attention output (128)."""


class MtpSpec(SpecModel):
    """Multi-token prediction (DeepSeek-V3, arXiv 2412.19437 section 2.2): `depth` sequential modules, the
    k-th predicting the token k + 1 ahead from the previous module's hidden state and the embedding of
    the token k ahead: an RMSNorm on each, a 2 d_model x d_model projection of their concatenation and one
    transformer block (an MoE block past moe.dense_layers), sharing the embedding and the output head with
    the main model. Training adds loss_weight x the mean of the modules' cross-entropies; inference may
    drop the modules."""

    depth: int = Field(ge=1, le=64)
    """Modules, each predicting one token further (DeepSeek-V3: 1)."""

    loss_weight: float = Field(ge=0, le=MAX_LOSS_COEFFICIENT)
    """lambda, the MTP loss's weight (DeepSeek-V3: 0.3 for the first 10T tokens, then 0.1)."""
