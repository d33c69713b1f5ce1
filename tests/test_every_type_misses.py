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


FALCON = dict(
    model_type="falcon", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
    vocab_size=512, multi_query=True,
)  # fmt: skip


@pytest.mark.parametrize(
    "arch", [dict(), dict(new_decoder_architecture=True, num_kv_heads=2)], ids=["mqa", "new"]
)
def test_falcon_sdpa_gets_unrepeated_kv_and_runs_the_math_kernel(arch):
    """Falcon's original block hands SDPA one K/V head beside four query heads and no
    ``enable_gqa`` (modeling_falcon.py l. 313-346): the fused kernels refuse, the math
    kernel keeps the FP32 T×T softmax and FP32 Q, K, V. The new block repeats K/V first
    and gets the flash kernel."""
    raw = {**FALCON, **arch}
    assert spec_from_config(raw).sdpa_kv_heads_broadcast is not bool(arch)
    assert _ratio(raw, "bf16 sdpa") == pytest.approx(1, abs=0.03)


BEAM = dict(
    model_type="beam", vocab_size=512, hidden_size=64, intermediate_size=256,
    num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=1, head_dim=16,
    moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
    layer_types=["sliding_attention"] * 3 + ["full_attention"],
    mlp_layer_types=["dense"] * 4,
)  # fmt: skip


def test_beam_swiglu_in_fp32_matches_the_census():
    """``(self.act_fn(gate.float()) * up.float()).to(gate.dtype)`` (modeling_beam.py
    ``BeamMLP``): under BF16 the feed-forward keeps FP32 gate, up and activation and the
    BF16 product — the closed form's feed-forward terms equal what a census of the real
    CPU step finds under each ``mlp``. (Beam's whole step still misses, by parts not
    modelled yet: benchmarks/results/every-type-misses.md.)"""
    from introspect.measure.census import census
    from introspect.refined import hf_saved
    from introspect.refined.transformers_classes import facts

    spec = spec_from_config(BEAM)
    assert facts(spec).swiglu_fp32
    setup = TrainingSetup(
        batch_size=1, seq_len=64, implementation="transformers", precision="bf16",
        attention="memory_efficient", device="cpu",
    )  # fmt: skip
    terms = hf_saved.per_layer(spec, setup)
    names = ("feed_forward/gate", "feed_forward/up", "feed_forward/act", "feed_forward/product")
    expected = spec.num_hidden_layers * sum(terms[n] for n in names)
    keys = {k: v for k, v in BEAM.items() if k != "model_type"}
    cfg = transformers.AutoConfig.for_model("beam", **keys, attn_implementation="sdpa")
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    x = torch.randint(0, 512, (1, 64))
    cen = census(model, lambda: model(input_ids=x, labels=x).loss, tokens=64, seq_len=64)
    found = sum(r[4] for r in cen.rows if r[0].split(".")[-1] in ("mlp", "act_fn"))
    assert found == expected


EXAONE_MOE = dict(
    model_type="exaone_moe", vocab_size=512, hidden_size=64, intermediate_size=256,
    num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4,
    moe_intermediate_size=16, num_experts=4, num_experts_per_tok=2, first_k_dense_replace=1,
    mlp_layer_types=["dense", "sparse", "sparse", "sparse"],
    layer_types=["sliding_attention"] * 3 + ["full_attention"],
)  # fmt: skip


def test_walker_reads_each_differing_block_and_the_shared_experts():
    """A dense first block before MoE blocks is its own layer kind (the walker read block
    0 for every block), and the dense feed-forward beside the routed experts is their
    shared expert (``shared_experts`` in modeling_exaone_moe.py); its ``layer_types``
    mark the first three sliding (``adapters/hf_transformers.py`` ``sliding_windows``)."""
    kinds = spec_from_config(EXAONE_MOE).kinds
    assert [(k.attention.kind, n) for k, n in kinds] == [
        ("sliding", 1),
        ("sliding", 2),
        ("full", 1),
    ]
    (dense, n_dense), (moe, n_moe) = kinds[0], kinds[1]
    assert (n_dense, n_moe) == (1, 2)
    assert kinds[2][0].feed_forward == moe.feed_forward
    assert dense.feed_forward.num_experts == 0 and dense.feed_forward.intermediate_size == 256
    ff = moe.feed_forward
    assert (ff.num_experts, ff.top_k, ff.intermediate_size) == (4, 2, 16)
    assert ff.shared_intermediate_size == 16  # num_shared_experts 1 × moe_intermediate_size


@pytest.mark.parametrize("setup_name", list(SETUPS))
def test_exaone_moe_dense_then_routed_within_three_percent(setup_name):
    assert _ratio(EXAONE_MOE, setup_name) == pytest.approx(1, abs=0.03)
