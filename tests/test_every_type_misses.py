"""The every-type rows the closed form modelled but missed (issue 22, part 3): one test
per mechanism fixed, each the real transformers class at a small shape, the refined
closed form against its dry run (FakeTensorMode, :func:`introspect.measure.hf_models.
measure`) within ±3%. B = 1, T = 64, the labels loop and AdamW, as
``benchmarks/every_type.py``; before/after ratios in
``benchmarks/results/every-type-misses.md``."""

from __future__ import annotations

import pytest
from introspect.adapters.hf_config import spec_from_config

from introspect.setup import TrainingSetup

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.slow

SETUPS = {
    "fp32 eager": dict(precision="fp32", attention="eager", activation_dtype="fp32"),
    "amp ckpt": dict(precision="amp", attention="eager", activation_checkpointing=True),
    "bf16 sdpa": dict(precision="bf16", attention="memory_efficient"),
}


def _ratio(raw: dict, setup_name: str) -> float:
    from introspect import refined
    from introspect.measure import hf_models

    spec = spec_from_config(raw)
    assert not spec.unmodelled
    setup = TrainingSetup(
        batch_size=1, seq_len=64, implementation="transformers", loop="labels",
        device="cpu", optimizer="adamw", **SETUPS[setup_name],
    )  # fmt: skip
    measured, _ = hf_models.measure(
        raw, raw["model_type"], spec, setup, device="fake", census=False
    )
    return refined.estimate(spec, setup).total / measured.peak_bytes


#: Classes built from the walker (no family reader) whose configs enable dropout under
#: their own key names: BERT-style ``attention_probs_dropout_prob`` and
#: ``hidden_dropout_prob`` (BioGPT), GPT-2's ``attn_pdrop``/``resid_pdrop``/``embd_pdrop``
#: (GPT-SW3), Seed-OSS's ``attention_dropout``/``residual_dropout``.
DROPOUT = {
    "biogpt": dict(
        model_type="biogpt", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=256, vocab_size=512, hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
    ),
    "gpt-sw3": dict(
        model_type="gpt-sw3", n_embd=64, n_layer=2, n_head=4, vocab_size=512,
        attn_pdrop=0.1, resid_pdrop=0.1, embd_pdrop=0.1,
    ),
    "seed_oss": dict(
        model_type="seed_oss", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, intermediate_size=128, vocab_size=512,
        attention_dropout=0.1, residual_dropout=0.1,
    ),
}  # fmt: skip


def test_walker_built_specs_carry_the_class_dropouts():
    """The probabilities come from the built class's config, its defaults applied."""
    biogpt = spec_from_config(DROPOUT["biogpt"])
    assert (biogpt.attention_dropout, biogpt.hidden_dropout, biogpt.embedding_dropout) == (
        0.1, 0.1, 0.1,
    )  # fmt: skip
    seed = spec_from_config(DROPOUT["seed_oss"])
    assert (seed.attention_dropout, seed.hidden_dropout, seed.embedding_dropout) == (0.1, 0.1, 0)


@pytest.mark.parametrize("setup_name", ["fp32 eager", "bf16 sdpa"])
@pytest.mark.parametrize("name", list(DROPOUT))
def test_dropout_masks_and_the_cpu_math_fallback(name, setup_name):
    """Dropout masks (CPU: the input's dtype) and, with dropout on the probabilities,
    SDPA's CPU math kernel in FP32 (:mod:`introspect.refined.hf_saved`)."""
    assert _ratio(DROPOUT[name], setup_name) == pytest.approx(1, abs=0.03)


COHERE = dict(
    model_type="cohere", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=4, intermediate_size=176, vocab_size=512,
)  # fmt: skip


@pytest.mark.parametrize("setup_name", ["fp32 eager", "bf16 sdpa"])
def test_cohere_layernorm_written_out_in_fp32(setup_name):
    """CohereLayerNorm (models/cohere/modeling_cohere.py l. 58-65) keeps two ``x - mean``,
    the rstd and the normalized value in FP32, as Cohere2's
    (:data:`introspect.refined.transformers_classes.CLASSES`, ``layernorm_by_hand``)."""
    from introspect.refined.transformers_classes import facts

    assert facts(spec_from_config(COHERE)).layernorm_by_hand
    assert _ratio(COHERE, setup_name) == pytest.approx(1, abs=0.03)
