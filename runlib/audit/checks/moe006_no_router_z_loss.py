"""MOE006: no router z-loss with many experts.

Why it matters:
    The router's softmax over the experts is where large sparse models diverge: its logits grow, and
    exponentials of large logits in bf16 lose the precision the top-k choice depends on. ST-MoE (Zoph et
    al. 2022, arXiv 2202.08906, section 3.3, eq. 5, Table 4) adds the router z-loss, the mean squared
    logsumexp of the router logits (coefficient 0.001), which stabilised its largest models without a
    loss in quality, where other remedies cost quality; OLMoE (Muennighoff et al. 2024, arXiv 2409.02060)
    trains its 64 experts with it at 0.001, its ablation finding training more stable with it. The risk
    grows with the experts a softmax spans; from 64 experts on (OLMoE's count) it is a warning. With
    sigmoid scores (DeepSeek-V3, arXiv 2412.19437, section 2.1.2, eq. 15) each expert's affinity is its
    own sigmoid: there is no softmax normalizer to blow up, and DeepSeek-V3 trained 256 experts without
    a z-loss, so it is advice only (info).

Flagged:
    model: {moe: {experts: 64, top_k: 8, z_loss: 0}}                   # warning
    model: {moe: {experts: 256, top_k: 8, score: sigmoid, z_loss: 0}}  # info

Preferred:
    model: {moe: {experts: 64, top_k: 8, z_loss: 0.001}}

How to fix:
    Set model.moe.z_loss: 0.001 (ST-MoE's and OLMoE's coefficient).
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "MOE006"
NAME = "no-router-z-loss"
SEVERITY = "warning"
MANY_EXPERTS = 64  # OLMoE's count, trained with z-loss
Z_LOSS = 0.001  # ST-MoE eq. 5, OLMoE


def check(ctx: Context) -> Iterator[Finding]:
    moe = ctx.spec.model.moe
    if moe is None or moe.z_loss > 0 or moe.experts < MANY_EXPERTS:
        return
    if moe.score == "sigmoid":
        why = (
            "with sigmoid scores each expert's affinity is its own sigmoid, with no softmax normalizer to blow "
            "up (DeepSeek-V3 trained 256 experts so, without z-loss): advice only, as nothing keeps the router "
            "logits small"
        )
    else:
        why = (
            f"the router's softmax over {moe.experts} experts has nothing keeping its logits small, and large "
            "logits in bf16 make the top-k choice and its gradients unstable (ST-MoE section 3.3)"
        )
    yield ctx.finding(
        "model.moe.z_loss",
        f"z_loss 0 with {moe.experts} experts: {why}",
        f"set model.moe.z_loss: {Z_LOSS:g} (ST-MoE's router z-loss coefficient, as OLMoE trained its 64 experts)",
        value=Z_LOSS,
        severity="info" if moe.score == "sigmoid" else None,
    )


_MOE = {"experts": 64, "top_k": 8, "expert_d_ff": 256, "aux_loss": 0.01}
PASS = [
    {},
    {"model.moe": {**_MOE, "z_loss": 0.001}},
    {"model.moe": {**_MOE, "experts": 32}},
    {"model.moe": {**_MOE, "experts": 256, "score": "sigmoid", "z_loss": 0.0001}},
]
FAIL = [
    case({"model.moe": _MOE}, "warning"),
    case({"model.moe": {**_MOE, "experts": 256, "score": "sigmoid", "bias_update_rate": 0.001}}, "info"),
]
