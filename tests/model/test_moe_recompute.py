"""A mixture of experts under every activation-recomputation policy: the balancing and z-losses ride on the
MoE layer's output (runlib.model.aux_loss), so the gradients equal those of the plain backward of
token loss + scale x aux loss, and selective checkpointing does not refuse a second way into its region."""

import pytest
import torch

from runlib.model import moe as moe_module
from runlib.model.moe import MoE
from runlib.model.parallelize import RECOMPUTE_MODES, set_recompute
from runlib.model.transformer import Transformer
from runlib.spec.models import ModelSpec

SPEC = ModelSpec(
    layers=2,
    d_model=32,
    heads=4,
    d_ff=64,
    seq_len=16,
    moe={"experts": 4, "top_k": 2, "expert_d_ff": 16, "aux_loss": 0.1, "z_loss": 0.01},
)
SCALE = 0.5


def gradients(mode: str) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    # the grouped-matmul probe not yet run: the first forward, inside the checkpointed blocks, runs it (on a
    # thread of its own, so selective recomputation does not count its ops as the block's)
    moe_module._GROUPED_MM_WORKS.clear()
    torch.manual_seed(0)
    model = Transformer(SPEC, 64, 16)
    set_recompute(model, mode)
    for m in model.modules():
        if isinstance(m, MoE):
            m.aux_loss_scale = SCALE
    ids = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(1))
    model.train()
    logits = model(ids)
    logits.float().logsumexp(-1).mean().backward()
    aux = torch.stack([m.aux_loss for m in model.modules() if isinstance(m, MoE) and m.aux_loss is not None])
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}, aux.detach()


def test_the_aux_loss_gradient_is_its_scale_times_its_own():
    """Without recomputation: the gradients equal autograd's of the token loss + SCALE x the aux losses."""
    torch.manual_seed(0)
    model = Transformer(SPEC, 64, 16)
    ids = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(1))
    model.train()
    logits = model(ids)  # aux_loss_scale None: the losses are only recorded
    aux = sum(m.aux_loss for m in model.modules() if isinstance(m, MoE) and m.aux_loss is not None)
    (logits.float().logsumexp(-1).mean() + SCALE * aux).backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    carried, _ = gradients("none")
    assert expected.keys() == carried.keys() and any("router" in n for n in expected)
    for name in expected:
        torch.testing.assert_close(carried[name], expected[name], rtol=1e-5, atol=1e-7, msg=name)


@pytest.mark.parametrize("mode", [m for m in RECOMPUTE_MODES if m != "none"])
def test_every_recompute_policy_gives_the_plain_gradients(mode):
    plain, plain_aux = gradients("none")
    recomputed, aux = gradients(mode)
    torch.testing.assert_close(aux, plain_aux)
    for name in plain:
        torch.testing.assert_close(recomputed[name], plain[name], rtol=1e-5, atol=1e-7, msg=name)
