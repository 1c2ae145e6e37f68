"""MOE003: the router has no load balancing.

Why it matters:
    A learned router left to itself collapses onto a few experts: "the gating network tends to converge
    to a state where it always produces large weights for the same few experts. This imbalance is
    self-reinforcing, as the favored experts are trained more rapidly and thus are selected even more by
    the gating network" (Shazeer et al. 2017, arXiv 1701.06538, section 4). The idle experts' parameters
    are wasted, and with expert parallelism the favoured experts' ranks take most of the tokens (and drop
    them with a capacity factor). Every published MoE balances: an auxiliary loss (Switch Transformer,
    Fedus et al. 2021, arXiv 2101.03961, section 2.2, eq. 4: alpha 0.01; OLMoE 0.01), or DeepSeek-V3's
    auxiliary-loss-free bias (arXiv 2412.19437, section 2.1.2; Wang et al. 2024, arXiv 2408.15664:
    update rate 0.001) with a small sequence-wise loss (alpha 0.0001). Not flagged when top_k equals the
    experts: every token goes to every expert, so there is nothing to balance.

Flagged:
    model: {moe: {experts: 64, top_k: 8, aux_loss: 0, bias_update_rate: 0}}

Preferred:
    model: {moe: {experts: 64, top_k: 8, aux_loss: 0.01}}
    model: {moe: {experts: 256, top_k: 8, bias_update_rate: 0.001, aux_loss: 0.0001, aux_loss_scope: sequence}}

How to fix:
    Set model.moe.aux_loss: 0.01 (Switch Transformer, OLMoE), or model.moe.bias_update_rate: 0.001 with
    aux_loss: 0.0001 and aux_loss_scope: sequence (DeepSeek-V3).
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "MOE003"
NAME = "no-load-balancing"
SEVERITY = "warning"
AUX_LOSS = 0.01  # Switch Transformer eq. 4, OLMoE


def check(ctx: Context) -> Iterator[Finding]:
    moe = ctx.spec.model.moe
    if moe is None or moe.top_k >= moe.experts or moe.aux_loss > 0 or moe.bias_update_rate > 0:
        return
    yield ctx.finding(
        "model.moe.aux_loss",
        f"no load balancing: aux_loss 0 and bias_update_rate 0 with top_k {moe.top_k} of {moe.experts} experts: "
        "nothing keeps the router from collapsing onto a few experts (Shazeer et al. 2017 section 4), "
        "leaving the others untrained",
        f"set model.moe.aux_loss: {AUX_LOSS:g} (Switch Transformer, OLMoE), or model.moe.bias_update_rate: 0.001 "
        "with aux_loss: 0.0001 and aux_loss_scope: sequence (DeepSeek-V3's auxiliary-loss-free balancing)",
        value=AUX_LOSS,
    )


_MOE = {"experts": 64, "top_k": 8, "expert_d_ff": 256, "z_loss": 0.001}
PASS = [
    {},
    {"model.moe": {**_MOE, "aux_loss": 0.01}},
    {"model.moe": {**_MOE, "bias_update_rate": 0.001}},
    {"model.moe": {**_MOE, "experts": 8, "top_k": 8}},  # every token to every expert: nothing to balance
]
FAIL = [
    case({"model.moe": _MOE}, "warning"),
    case({"model.moe": {**_MOE, "aux_loss": 0.0, "bias_update_rate": 0.0, "score": "sigmoid"}}, "warning"),
]
