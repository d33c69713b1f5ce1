"""The libraries' chunked losses (``--cross-entropy torchtune | trl | liger``): each
measured step (transformers' Llama class, the loss as the library writes it,
:mod:`introspect.measure.losses`) real on CPU and as a FakeTensorMode dry run, byte for
byte; the closed form (:mod:`introspect.refined.losses`) within 1% of it, in the phase
the tracker names; the mirrored losses compute the cross-entropy and its gradients.

Shapes: width 64 and a vocabulary of 8000 or 40000, so the loss's moments are the peak
(or close to it); B·T not a multiple of torchtune's 8 chunks, and a vocabulary wider
than TRL's 32768-column tile, in some.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from introspect.adapters.hf_config import spec_from_config  # noqa: E402

from introspect.measure import hf_models  # noqa: E402
from introspect.setup import TrainingSetup  # noqa: E402

pytestmark = pytest.mark.slow

LOSSES = ("torchtune", "trl", "liger")


def llama(vocab: int, hidden: int = 64) -> dict:
    return dict(
        model_type="llama", hidden_size=hidden, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=160, vocab_size=vocab,
    )  # fmt: skip


def measure(loss, precision, device, *, vocab=8000, batch=2, seq=128, hidden=64):
    raw = llama(vocab, hidden)
    spec = spec_from_config(raw, source="llama-small")
    s = TrainingSetup(
        batch_size=batch, seq_len=seq, implementation="transformers", loop="labels",
        precision=precision, cross_entropy=loss, device="cpu",
    )  # fmt: skip
    return spec, s, hf_models.measure(raw, "llama-small", spec, s, device=device, census=False)[0]


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("precision", ["fp32", "bf16", "amp"])
def test_the_dry_run_equals_the_real_cpu_step(loss, precision):
    _, _, real = measure(loss, precision, "cpu")
    _, _, fake = measure(loss, precision, "fake")
    assert fake.peak_bytes == real.peak_bytes
    assert fake.categories == real.categories
    assert fake.peak_phase == real.peak_phase
    assert any(note.startswith(f"loss {loss}:") for note in real.notes)


@pytest.mark.parametrize(
    "loss, precision, vocab, batch, seq, hidden",
    [
        ("torchtune", "fp32", 8000, 2, 128, 64),
        ("torchtune", "bf16", 8000, 1, 100, 64),  # chunks of 13 tokens, the last 9
        ("torchtune", "amp", 8000, 2, 128, 64),
        # wide: the peak is lm_head's backward, its 8 weight gradients summed
        ("torchtune", "bf16", 8000, 1, 512, 512),
        ("torchtune", "fp32", 8000, 1, 512, 512),
        ("trl", "bf16", 8000, 2, 128, 64),
        ("trl", "mixed", 8000, 1, 100, 64),
        ("trl", "bf16", 40000, 1, 64, 64),  # two vocabulary tiles
        ("trl", "amp", 40000, 1, 64, 64),
        ("liger", "bf16", 8000, 2, 128, 64),
        ("liger", "amp", 8000, 2, 128, 64),
        ("liger", "bf16", 40000, 1, 64, 64),
    ],
)
def test_the_closed_form_holds_to_the_measured_step(loss, precision, vocab, batch, seq, hidden):
    from introspect.refined import execution_estimate
    from introspect.refined.causes import tracker_phase

    spec, s, m = measure(loss, precision, "fake", vocab=vocab, batch=batch, seq=seq, hidden=hidden)
    est = execution_estimate(spec, s)
    assert abs(est.total / m.peak_bytes - 1) < 0.01, (est.total, m.peak_bytes)
    assert tracker_phase(est.meta["peak_phase"]) == m.peak_phase
    # the standard loss's estimate is not that figure: the loss's own terms carry it
    standard = execution_estimate(spec, s.replace(cross_entropy="standard"))
    assert abs(standard.total / m.peak_bytes - 1) > 0.02


@pytest.mark.parametrize("loss", LOSSES)
def test_the_mirrored_losses_compute_the_cross_entropy(loss):
    """Loss and gradients of the hidden states and of the head weight equal the plain
    ``F.cross_entropy`` over the shifted labels (FP32; the mirrors are the libraries'
    algorithms, so they must compute the same function)."""
    from introspect.measure import losses

    torch.manual_seed(0)
    V, d, B, T = 300, 16, 2, 24

    class Backbone(torch.nn.Module):
        def forward(self, input_ids, **_):
            return type("Out", (), {"last_hidden_state": hidden})()

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.base_model = Backbone()
            self.lm_head = torch.nn.Linear(d, V, bias=False)

        def get_output_embeddings(self):
            return self.lm_head

    model = Model()
    ids = torch.randint(0, V, (B, T))
    hidden = torch.randn(B, T, d, requires_grad=True)
    # the mirror for trl (TRL's own add_fused_lm_head needs a transformers model)
    function = losses.trl_mirror_loss if loss == "trl" else losses.library_loss(loss)
    value, _ = function(model, ids, None)
    value.backward()
    got = (value.detach(), hidden.grad.clone(), model.lm_head.weight.grad.clone())
    hidden.grad, model.lm_head.weight.grad = None, None
    logits = model.lm_head(hidden)[:, :-1].reshape(-1, V)
    want = torch.nn.functional.cross_entropy(logits, ids[:, 1:].reshape(-1))
    want.backward()
    torch.testing.assert_close(got[0], want.detach())
    torch.testing.assert_close(got[1], hidden.grad)
    torch.testing.assert_close(got[2], model.lm_head.weight.grad)


def test_chunked_is_the_fused_loss():
    """``--cross-entropy chunked`` (the old name) parses as ``fused``, priced the same."""
    from introspect.commands._args import ALIASES, choice
    from introspect.setup import CROSS_ENTROPIES

    assert choice(CROSS_ENTROPIES)("chunked") == "fused" == ALIASES["chunked"]


def test_liger_chunk_matches_its_source_formula():
    from introspect.measure.losses import liger_chunk_size
    from introspect.refined.losses import liger_chunk
    from introspect.spec import ModelSpec

    # Liger's own example (fused_linear_cross_entropy.py): BT = 4096·4, V = 32000,
    # H = 4096 → inc_factor 8, chunk 2048.
    assert liger_chunk_size(4096 * 4, 32000, 4096) == 2048
    spec = ModelSpec(vocab_size=32000, hidden_size=4096, num_hidden_layers=1,
                     num_attention_heads=32, intermediate_size=11008)  # fmt: skip
    assert liger_chunk(spec, TrainingSetup(batch_size=4, seq_len=4096)) == 2048


def test_soft_capped_logits_are_refused_with_a_library_loss():
    """Gemma 2's final_logit_softcapping is not in torchtune's and Liger's pricing or
    steps: one line naming the flag, before anything is priced (TRL's head runs it)."""
    from introspect import applies

    spec = spec_from_config(dict(llama(8000), model_type="gemma2", final_logit_softcapping=30.0))
    with pytest.raises(applies.NotApplicable, match="--cross-entropy liger: .*final_logit"):
        applies.check_model(spec, TrainingSetup(cross_entropy="liger"))
    applies.check_model(spec, TrainingSetup(cross_entropy="fused"))
    applies.check_model(spec, TrainingSetup(cross_entropy="trl"))  # TRL runs the softcap
