"""runlib.ladder.rungs and the ladder's stage graph: shapes, tokens, shared data stages, the fit node."""

import pytest

from runlib.errors import UserError
from runlib.graph.build import build_graph, is_rung
from runlib.ladder.rungs import ladder_rungs, rung_model
from runlib.plan import derive
from runlib.spec import load_spec
from runlib.spec.models import LadderSpec
from tests.conftest import ROOT
from tests.helpers import DATA_STAGES

DEMO = ROOT / "specs" / "demo.yaml"


def _demo(**ladder):
    spec = load_spec(DEMO).spec
    return spec.model_copy(update={"ladder": LadderSpec(**ladder)})


def test_rung_shape_keeps_aspect_ratio_head_dim_and_gqa():
    model = load_spec(DEMO).spec.model  # d_model 128, 4 layers, 4 heads of 32, 2 kv heads, d_ff 384
    small = rung_model(model, 64)
    assert (small.d_model, small.layers, small.heads, small.kv_heads, small.d_ff) == (64, 2, 2, 1, 192)
    with pytest.raises(UserError, match="not a multiple of the target's head_dim 32"):
        rung_model(model, 48)


def test_rungs_keep_phase_fractions_whole_steps_and_schedule_shape():
    spec = _demo(widths=[32, 64, 96], tokens_per_param=[10, 20], min_steps=10)
    target = derive(spec)
    ladder = ladder_rungs(spec, target)
    assert [r.name for r in ladder.rungs] == [f"w{w}-tpp{k}" for w in (32, 64, 96) for k in (10, 20)]
    assert [r.held_out for r in ladder.rungs] == [False] * 5 + [True]  # the largest compute
    for rung in ladder.rungs:
        plan = rung.plan
        assert rung.tokens == pytest.approx(rung.params * int(rung.name.split("tpp")[1]), rel=0.02)
        for p, t in zip(plan.phases, target.phases, strict=True):
            assert p.tokens % p.tokens_per_step == 0 and p.tokens_per_step == t.tokens_per_step
            assert p.tokens / plan.tokens_total == pytest.approx(t.tokens / target.tokens_total, abs=0.02)
        # WSD: the decay is the anneal phase, as in the target (8% of the run)
        assert plan.decay_tokens == plan.phases[-1].tokens
        assert plan.warmup_tokens == pytest.approx(0.02 * plan.tokens_total, rel=0.05)
        assert rung.spec.eval.tasks == [] and not rung.spec.eval.after_each_phase


def test_graph_shares_the_targets_data_stages_and_fits_every_rung():
    spec = _demo(widths=[32, 64, 96], tokens_per_param=[10, 20], min_steps=10)
    plain = build_graph(load_spec(DEMO).spec)
    graph = build_graph(spec)
    assert {(n.stage, n.key) for n in graph.nodes if n.stage in DATA_STAGES} == {
        (n.stage, n.key) for n in plain.nodes if n.stage in DATA_STAGES
    }
    assert not [n for n in graph.nodes if n.stage == "train_phase" and not is_rung(n)]  # train_target: false
    (fit,) = graph.of("fit_ladder")
    rung_evals = [n for n in graph.of("eval_phase") if is_rung(n)]
    assert sorted(fit.inputs.values()) == sorted(n.key for n in rung_evals) and len(rung_evals) == 6
    assert fit.config.target.params == derive(spec).params.non_embedding
    with_target = build_graph(spec.model_copy(update={"ladder": spec.ladder.model_copy(update={"train_target": True})}))
    assert {n.key for n in plain.nodes} <= {n.key for n in with_target.nodes}


@pytest.mark.parametrize(
    ("ladder", "message"),
    [
        ({"widths": [32, 64, 96], "tokens_per_param": [20]}, "needs at least 5 fitted rungs"),
        ({"widths": [32, 64], "tokens_per_param": [10], "compute_flops": [1e12]}, "exactly one of them"),
        ({"widths": [32, 64, 96], "tokens_per_param": [1, 2]}, "needs at least 5 fitted rungs"),  # min_steps
    ],
)
def test_ladders_that_cannot_fit_are_refused_with_the_fix(ladder, message):
    with pytest.raises(UserError, match=message):
        ladder_rungs(_demo(**ladder))


def test_isoflop_rungs_spend_their_budget():
    spec = _demo(widths=[32, 64, 96], compute_flops=[2e12, 8e12], min_steps=10)
    ladder = ladder_rungs(spec)
    for rung in ladder.rungs:
        budget = 2e12 if rung.name.endswith("c2e12") else 8e12
        assert rung.flops == pytest.approx(budget, rel=0.1)
