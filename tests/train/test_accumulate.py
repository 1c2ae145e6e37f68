"""Handout #16 section 7 through the project's own accumulation code (runlib.train.accumulate)."""

import math

import pytest
import torch

from runlib.train.accumulate import accumulate, token_loss_sum


def sgd_step_weight(micro_batches, rule: str) -> tuple[float, float]:
    """f_w(x) = w x, targets 0, MSE; return (gradient, w after one SGD step at 0.01)."""
    w = torch.tensor(1.0, requires_grad=True)
    if rule in ("token_mean", "micro_batch_mean"):
        normalization = "global_tokens" if rule == "token_mean" else "micro_batch_mean"
        loss = accumulate(
            micro_batches, lambda x: ((w * x) ** 2).sum(), lambda x: x.numel(), normalization=normalization
        )
        with torch.no_grad():  # the returned step loss: the token mean, or the mean of micro-batch means
            means = [float(((w * x) ** 2).mean()) for x in micro_batches]
            whole = float(((w * torch.cat(micro_batches)) ** 2).mean())
        assert loss == pytest.approx(whole if rule == "token_mean" else sum(means) / len(means))
    else:  # the wrong rule: average the micro-batch means equally
        for x in micro_batches:
            (((w * x) ** 2).mean() / len(micro_batches)).backward()
    grad = float(w.grad)
    return grad, 1.0 - 0.01 * grad


def test_unequal_micro_batches_reproduce_the_full_batch_gradient():
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    full_grad, full_w = sgd_step_weight([x], "token_mean")
    assert full_grad == pytest.approx(15.0) and full_w == pytest.approx(0.85)
    grad, w = sgd_step_weight([x[:1], x[1:]], "token_mean")
    assert grad == pytest.approx(15.0) and w == pytest.approx(0.85)
    wrong_grad, wrong_w = sgd_step_weight([x[:1], x[1:]], "mean_of_means")
    assert wrong_grad == pytest.approx(32 / 3) and wrong_w == pytest.approx(0.893333, abs=1e-6)
    # data.loss_normalization: micro_batch_mean enacts exactly that rule, on purpose
    assert sgd_step_weight([x[:1], x[1:]], "micro_batch_mean")[0] == pytest.approx(32 / 3)
    # equal-sized micro-batches: dividing each mean by K is also right
    assert sgd_step_weight([x[:2], x[2:]], "mean_of_means")[0] == pytest.approx(15.0)


BOS, A, B, C, EOS = range(5)


def bigram_batches():
    """Two padded documents (BOS a b c EOS) and (BOS a EOS): six scored targets in total."""
    inputs = torch.tensor([[BOS, A, B, C], [BOS, A, EOS, EOS]])
    targets = torch.tensor([[A, B, C, EOS], [A, EOS, -100, -100]])
    return inputs, targets


def bigram_grad(split: str):
    table = torch.zeros(5, 5, requires_grad=True)
    inputs, targets = bigram_batches()
    if split == "full":
        micro = [(inputs, targets)]
    else:
        micro = [(inputs[:1], targets[:1]), (inputs[1:], targets[1:])]
    if split == "doc_means":
        for x, y in micro:
            (
                torch.nn.functional.cross_entropy(table[x].reshape(-1, 5), y.reshape(-1), ignore_index=-100) / 2
            ).backward()
    else:
        accumulate(micro, lambda mb: token_loss_sum(table[mb[0]], mb[1]), lambda mb: int((mb[1] != -100).sum()))
    return table.grad.clone()


def test_bigram_table_whole_gradient():
    full = bigram_grad("full")
    per_doc = bigram_grad("token_mean")
    assert torch.allclose(full, per_doc, atol=1e-7)
    # at zero logits every target costs log 5; the reference full-batch gradient of row BOS
    expected_bos = torch.full((5,), 2 / 5 / 6)
    expected_bos[A] -= 2 / 6
    assert torch.allclose(full[BOS], expected_bos, atol=1e-7)
    # averaging document means gives the same scalar loss at init but a different gradient
    wrong = bigram_grad("doc_means")
    assert not torch.allclose(full, wrong, atol=1e-4)
    inputs, targets = bigram_batches()
    table = torch.zeros(5, 5)
    loss = torch.nn.functional.cross_entropy(table[inputs].reshape(-1, 5), targets.reshape(-1), ignore_index=-100)
    assert float(loss) == pytest.approx(math.log(5))


def test_z_loss_adds_log_z_squared():
    logits = torch.tensor([[[0.0, 1.0, 2.0]]])
    targets = torch.tensor([[2]])
    plain = token_loss_sum(logits, targets)
    with_z = token_loss_sum(logits, targets, z_loss=1e-2)
    assert float(with_z - plain) == pytest.approx(1e-2 * float(torch.logsumexp(logits[0, 0], -1)) ** 2)


def reference_loss_sum(logits, targets, z_loss):
    """The straightforward formula: F.cross_entropy summed over scored targets, plus z_loss * sum(log Z^2)."""
    flat, flat_targets = logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1)
    loss = torch.nn.functional.cross_entropy(flat, flat_targets, ignore_index=-100, reduction="sum")
    if z_loss:
        loss = loss + z_loss * (torch.logsumexp(flat[flat_targets != -100], dim=-1) ** 2).sum()
    return loss


@pytest.mark.parametrize("z_loss", [0.0, 1e-4, 0.1])
@pytest.mark.parametrize("chunk_elements", [None, 50])  # None: one chunk; 50: a row per chunk
def test_token_losses_equal_the_reference_loss_and_gradient(z_loss, chunk_elements, monkeypatch):
    from runlib.train import accumulate as acc

    if chunk_elements is not None:
        monkeypatch.setitem(acc.CHUNK_ELEMENTS, "cpu", chunk_elements)
    torch.manual_seed(0)
    logits = (torch.randn(3, 11, 37) * 4).requires_grad_()
    targets = torch.randint(0, 37, (3, 11))
    targets[0, :4] = -100
    targets[2, -1] = -100
    loss, cross_entropy = acc.token_losses(logits, targets, z_loss)
    assert loss.shape == cross_entropy.shape == targets.shape and not cross_entropy.requires_grad
    # the reported per-token CE is F.cross_entropy's, 0 on ignored targets
    expected_ce = torch.nn.functional.cross_entropy(
        logits.detach().reshape(-1, 37), targets.reshape(-1), ignore_index=-100, reduction="none"
    ).view_as(targets)
    torch.testing.assert_close(cross_entropy, expected_ce, rtol=1e-6, atol=1e-6)
    assert torch.all(loss[targets == -100] == 0)
    (2.5 * loss.sum()).backward()  # an upstream gradient other than 1 (the accumulation's scale)
    ours = logits.grad.clone()
    logits.grad = None
    reference = reference_loss_sum(logits, targets, z_loss)
    (2.5 * reference).backward()
    torch.testing.assert_close(loss.sum().detach(), reference.detach(), rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(ours, logits.grad, rtol=1e-5, atol=1e-7)
    assert torch.all(ours[targets == -100] == 0)  # ignored positions get no gradient
    assert float(acc.token_loss_sum(logits, targets, z_loss).detach()) == pytest.approx(float(loss.sum().detach()))


def test_token_losses_gradcheck_in_float64():
    from runlib.train.accumulate import token_losses

    targets = torch.tensor([[1, -100, 3, 0]])
    logits = torch.randn(1, 4, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: token_losses(x, targets, 0.1)[0], (logits,))


def test_token_losses_reject_targets_outside_the_vocabulary():
    from runlib.train.accumulate import token_losses

    with pytest.raises(RuntimeError):
        token_losses(torch.zeros(1, 2, 5), torch.tensor([[1, 5]]))
