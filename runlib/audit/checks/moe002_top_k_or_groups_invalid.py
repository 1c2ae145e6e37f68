"""MOE002: the router cannot choose top_k experts as the groups allow.

Why it matters:
    Token-choice routing sends each token to the top_k highest-scoring of the `experts` routed experts of
    a layer (Shazeer et al. 2017, arXiv 1701.06538, section 2.1, noisy top-k gating): more than `experts`
    distinct experts cannot be chosen, and torch.topk raises on it. Node-limited routing (DeepSeek-V2,
    arXiv 2405.04434, section 2.1.3, device-limited routing; DeepSeek-V3, arXiv 2412.19437, section
    2.1.2, each token sent to at most 4 nodes: its config's n_group 8, topk_group 4) splits the experts
    into `groups` equal groups and lets a token pick among the experts of its groups_per_token best
    groups only: the groups must be equal (experts % groups == 0: DeepSeek-V3's router views the scores
    as [groups, experts / groups]), and those groups must hold at least top_k experts (DeepSeek-V3: 4
    groups of 32 experts for its top 8).

Flagged:
    model: {moe: {experts: 8, top_k: 10}}                              # 10 of 8 experts
    model: {moe: {experts: 64, top_k: 8, groups: 6}}                   # 64 experts in 6 groups
    model: {moe: {experts: 16, top_k: 4, groups: 8, groups_per_token: 1}}   # 2 candidates for top 4

Preferred:
    model: {moe: {experts: 256, top_k: 8, groups: 8, groups_per_token: 4}}  # DeepSeek-V3

How to fix:
    Keep top_k <= experts; give groups a divisor of experts; with groups_per_token, keep top_k <=
    groups_per_token x experts / groups (the finding gives the groups_per_token that fits).
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case
from runlib.plan.layout import divisors_above_one

CODE = "MOE002"
NAME = "top-k-or-groups-invalid"
SEVERITY = "error"


def check(ctx: Context) -> Iterator[Finding]:
    moe = ctx.spec.model.moe
    if moe is None:
        return
    experts, top_k, groups, per_token = moe.experts, moe.top_k, moe.groups, moe.groups_per_token
    if top_k > experts:
        yield ctx.finding(
            "model.moe.top_k",
            f"top_k {top_k} above the {experts} routed experts: a token cannot be sent to {top_k} distinct experts",
            f"use top_k at most {experts} (Mixtral: 2 of 8, DeepSeek-V3: 8 of 256), or at least {top_k} experts",
        )
    if groups is not None and experts % groups:
        valid = [1, *divisors_above_one(experts)]
        nearest = min(valid, key=lambda d: (abs(d - groups), d))
        yield ctx.finding(
            "model.moe.groups",
            f"{experts} experts do not fall into {groups} equal groups ({experts / groups:.3g} per group)",
            f"use groups {nearest} (a divisor of the {experts} experts: {experts // nearest} per group), "
            "or omit groups",
            value=nearest,
        )
    elif groups is not None and per_token is not None and top_k <= experts:
        per_group = experts // groups
        candidates = per_token * per_group
        if top_k > candidates:
            needed = -(-top_k // per_group)
            yield ctx.finding(
                "model.moe.groups_per_token",
                f"top_k {top_k} above the {candidates} experts a token may choose from: groups_per_token "
                f"{per_token} of {groups} groups x {per_group} experts each",
                f"use groups_per_token {needed} ({needed * per_group} candidates), or top_k at most {candidates}",
                value=needed,
            )


_MOE = {"experts": 16, "top_k": 2, "expert_d_ff": 256, "aux_loss": 0.01}
PASS = [
    {},
    {"model.moe": _MOE},
    {"model.moe": {**_MOE, "top_k": 16}},
    {"model.moe": {**_MOE, "experts": 256, "top_k": 8, "groups": 8, "groups_per_token": 4}},
    {"model.moe": {**_MOE, "top_k": 4, "groups": 8, "groups_per_token": 2}},  # exactly 4 candidates
    {"model.moe": {**_MOE, "groups": 4}},
]
FAIL = [
    case({"model.moe": {**_MOE, "experts": 8, "top_k": 10}}, "error"),
    case({"model.moe": {**_MOE, "experts": 64, "top_k": 8, "groups": 6}}, "error"),
    case({"model.moe": {**_MOE, "top_k": 4, "groups": 8, "groups_per_token": 1}}, "error"),
]
