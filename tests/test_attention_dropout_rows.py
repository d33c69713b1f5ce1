"""Eager attention under autocast and checkpointing: dropout on its probabilities and
MPT's boolean mask (the ``amp ckpt`` every-type misses at T = 512: BioGPT 0.818, Emu3
0.819, Seed-OSS 0.859, MPT 1.052; ``benchmarks/results/every-type-long.md``): each the
real transformers class at a small shape, the refined closed form against its dry run
(FakeTensorMode, :func:`introspect.measure.hf_models.measure`) within ±3%, with the peak
in the moment the mechanism adds. B = 1, the labels loop and AdamW, as ``benchmarks/every_type.py``.

* the dropout's backward holds its mask beside the two gradients
  (:func:`introspect.refined.execution.dropout_transient`);
* BioGPT's softmax is not cast back, so under autocast the dropout runs in FP32
  (``ClassFacts.softmax_uncast``);
* the dropped probabilities the attention returns stay bound in the decoder layer through
  its recomputed feed-forward (:func:`introspect.refined.execution.returned_probs`);
* MPT casts its causal mask to bool (``ClassFacts.bool_causal_mask``)."""

from __future__ import annotations

import pytest
from introspect.adapters.hf_config import spec_from_config

from introspect.setup import TrainingSetup

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.slow

AMP_CKPT = dict(precision="amp", attention="eager", activation_checkpointing=True)

BIOGPT = dict(
    model_type="biogpt", hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
    intermediate_size=256, vocab_size=512, max_position_embeddings=1024,
    attention_probs_dropout_prob=0.1, hidden_dropout_prob=0.1,
)  # fmt: skip
#: Llama's class with dropout on the probabilities (rotary: the query, and so the
#: dropout, FP32 under autocast).
LLAMA = dict(
    model_type="llama", hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=1, intermediate_size=176, vocab_size=512, attention_dropout=0.1,
)  # fmt: skip
#: Seed-OSS: attention and residual dropout, a wider feed-forward.
SEED_OSS = dict(
    model_type="seed_oss", hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=1, head_dim=16, intermediate_size=432, vocab_size=512,
    attention_dropout=0.1, residual_dropout=0.1,
)  # fmt: skip


def _closed_and_dry(raw: dict, T: int):
    from introspect import refined
    from introspect.measure import hf_models

    spec = spec_from_config(raw)
    assert not spec.unmodelled
    setup = TrainingSetup(
        batch_size=1, seq_len=T, implementation="transformers", loop="labels",
        device="cpu", optimizer="adamw", **AMP_CKPT,
    )  # fmt: skip
    measured, _ = hf_models.measure(
        raw, raw["model_type"], spec, setup, device="fake", census=False
    )
    return refined.estimate(spec, setup), measured.peak_bytes


@pytest.mark.parametrize("raw", [BIOGPT, LLAMA], ids=["biogpt", "llama"])
def test_the_dropout_backward_moment_against_the_dry_run(raw):
    """At T = 256 the step peaks inside the attention dropout's backward: probabilities,
    mask and the two gradients, four B·h·T² tensors (FP32: BioGPT's uncast softmax,
    Llama's FP32 query)."""
    from introspect.refined.execution import DROPOUT_GRAD

    est, dry = _closed_and_dry(raw, 256)
    assert DROPOUT_GRAD in est.execution.to_json()["terms"]
    assert est.total / dry == pytest.approx(1, abs=0.03)


def test_biogpt_dropout_runs_in_fp32_under_autocast():
    """The mask the dropout keeps is FP32 (4 bytes) under autocast: the softmax's output is
    not cast back (``ClassFacts.softmax_uncast``)."""
    from introspect.refined import hf_saved

    spec = spec_from_config(BIOGPT)
    setup = TrainingSetup(batch_size=1, seq_len=64, implementation="transformers", **AMP_CKPT)
    assert hf_saved.dropped_bytes(spec, setup) == 4


def test_the_returned_probabilities_against_the_dry_run():
    """Seed-OSS's wider feed-forward makes its recomputation the step's peak: the layer's
    saved set with the FP32 dropped probabilities the attention returned still bound."""
    from introspect.refined.execution import RETURNED_PROBS

    est, dry = _closed_and_dry(SEED_OSS, 256)
    assert f"activations/layer/{RETURNED_PROBS}" in est.execution.to_json()["terms"]
    assert est.total / dry == pytest.approx(1, abs=0.03)


#: MPT: ALiBi, the causal mask cast to bool before the blocks.
MPT = dict(
    model_type="mpt", d_model=64, n_heads=4, n_layers=4, expansion_ratio=4, vocab_size=512,
    max_seq_len=2048,
)  # fmt: skip


def test_mpt_checkpointing_keeps_a_boolean_mask():
    """``create_causal_mask(...).to(torch.bool)``: the mask the checkpointed blocks keep is
    B·T² bytes (``ClassFacts.bool_causal_mask``), and the step at T = 256 within ±3%."""
    from introspect.refined import hf_saved

    spec = spec_from_config(MPT)
    setup = TrainingSetup(batch_size=1, seq_len=256, implementation="transformers", **AMP_CKPT)
    assert hf_saved.eager_masks(spec, setup, {"full"}) == 256 * 256
    est, dry = _closed_and_dry(MPT, 256)
    assert est.total / dry == pytest.approx(1, abs=0.03)


#: Falcon (rotary, one K/V head, the parallel block) and BLOOM (ALiBi): the blocks return
#: the attention's probabilities to the model's loop.
FALCON = dict(
    model_type="falcon", hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
    vocab_size=512,
)  # fmt: skip
BLOOM = dict(model_type="bloom", hidden_size=64, n_layer=4, n_head=8, vocab_size=512)


@pytest.mark.parametrize("raw", [FALCON, BLOOM], ids=["falcon", "bloom"])
def test_the_checkpointed_forward_at_the_softmax_against_the_dry_run(raw):
    """At T = 512 the step peaks in the top layer's first forward, at its softmax: the raw
    and masked scores, the softmax (and BLOOM's cast) beside the previous block's
    probabilities the model's loop still holds
    (:func:`introspect.refined.execution.checkpointed_softmax_forward`)."""
    from introspect.refined.execution import SOFTMAX_FORWARD

    est, dry = _closed_and_dry(raw, 512)
    assert est.peak_phase == "forward"
    assert SOFTMAX_FORWARD in est.execution.to_json()["terms"]
    assert est.total / dry == pytest.approx(1, abs=0.03)
