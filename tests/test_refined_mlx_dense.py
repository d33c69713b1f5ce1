"""The MLX closed form for mlx-lm's Gemma 2, Gemma 3, Phi-3, OLMo 2 and StarCoder2
(introspect.refined.mlx.dense_structure): its counts, read off replays at other shapes,
against the replay and a real measured step of each class."""

from __future__ import annotations

import pytest
from specs import mlx_lm_setup as setup_for

from introspect import refined
from introspect.refined import mlx

#: Not a derivation shape (those are d=128, 8 heads, f=216, B=3, T ∈ {44, 176}, and for
#: these classes L ∈ {2, …, 10, 16, 32}: L = 12 is on the line between two of them).
SHAPE = dict(d=96, layers=12, ffn=256, heads=4, kv=2, vocab=3000)


def dense_spec(family: str, tied: bool | None = None, **extra):
    """mlx-lm's config for ``family`` at :data:`SHAPE`, tied as its structure was derived,
    and the spec read from it."""
    from introspect.adapters.hf_config import spec_from_config

    from introspect.measure import mlx_replay as mr

    cfg = mr.family_config(
        family, SHAPE["d"], SHAPE["layers"], SHAPE["ffn"], SHAPE["heads"], SHAPE["kv"],
        SHAPE["vocab"],
    )  # fmt: skip
    cfg["tie_word_embeddings"] = mlx.STRUCTURES[family][1] if tied is None else tied
    cfg.update(extra)
    return cfg, spec_from_config(cfg)


@pytest.mark.parametrize(
    "family,tied,dtype,compiled",
    [
        ("gemma2", True, "fp32", False),
        ("gemma3_text", True, "bf16", True),
        ("phi3", False, "fp32", True),
        ("olmo2", False, "bf16", False),
        ("starcoder2", True, "fp32", False),
    ],
)
def test_closed_form_within_5_percent_of_the_replay(family, tied, dtype, compiled):
    """A real mlx-lm step of each class, traced (nothing evaluated) and replayed: the
    closed form, whose counts come from other shapes, lands within 5% of the replayed
    peak (Gemma 3 tied as its checkpoints load: ``sanitize`` drops ``lm_head``)."""
    pytest.importorskip("mlx.core")
    pytest.importorskip("mlx_lm")
    import mlx.core as mx
    import mlx.optimizers as optim

    from introspect.measure import mlx_lm_models
    from introspect.measure import mlx_replay as mr

    cfg, spec = dense_spec(family, tied)
    setup = setup_for(dtype, compiled)
    assert mlx.structure_of(spec, setup) == family
    model = mr.mlx_lm_model(cfg, mx.bfloat16 if dtype == "bf16" else None, evaluate=False)
    mlx_lm_models.tie_as_checkpoint(model, family, tied)
    optimizer = optim.Adam(learning_rate=1e-4)
    optimizer.init(model.trainable_parameters())
    batch = mr.mlx_lm_batch(SHAPE["vocab"], setup.batch_size, setup.seq_len, evaluate=False)
    step = mr.make_step(model, optimizer, mr.mlx_lm_loss, compiled)
    replayed = mr.predict(model, optimizer, step, batch, compiled).peak_bytes
    assert refined.estimate(spec, setup).total == pytest.approx(replayed, rel=0.05)


@pytest.mark.parametrize(
    "family,dtype,compiled",
    [
        ("gemma2", "bf16", False),
        ("gemma3_text", "fp32", False),
        ("phi3", "fp32", False),
        ("olmo2", "fp32", True),
        ("starcoder2", "bf16", False),
    ],
)
def test_closed_form_within_5_percent_of_a_measured_step(family, dtype, compiled):
    """mlx-lm's class built from the config and its trainer's step, measured (the largest
    of three steps): within 5% of the closed form. Gemma 3 built from a config keeps its
    ``lm_head`` (untied), with a sliding window shorter than T."""
    pytest.importorskip("mlx.core")
    pytest.importorskip("mlx_lm")
    from introspect.measure import mlx_lm_models

    window = dict(sliding_window=32) if family == "gemma3_text" else {}
    tied = False if family == "gemma3_text" else None
    cfg, spec = dense_spec(family, tied, **window)
    setup = setup_for(dtype, compiled)
    assert mlx.structure_of(spec, setup) == family + ("-untied" if tied is False else "")
    m = mlx_lm_models.measure(cfg, "config", spec, setup, compiled=compiled)
    assert refined.estimate(spec, setup).total == pytest.approx(m.peak_bytes, rel=0.05)


def test_structure_of_the_dense_families_and_their_ties():
    """Each class its own structure where its tie was derived; another tie falls back to
    the nearest of the first six, as every other model type still does."""
    s = setup_for("fp32", False)
    for family in mlx.DENSE_STRUCTURES:
        _, spec = dense_spec(family)
        assert mlx.structure_of(spec, s) == family
    _, gemma3 = dense_spec("gemma3_text", tied=False)
    assert mlx.structure_of(gemma3, s) == "gemma3_text-untied"
    _, gemma2 = dense_spec("gemma2", tied=False)  # mlx-lm's Gemma 2 has no lm_head
    assert mlx.structure_of(gemma2, s) == "gemma2"
    _, phi3 = dense_spec("phi3", tied=True)
    assert mlx.structure_of(phi3, s) == "llama"
    _, olmo2 = dense_spec("olmo2", tied=True)
    assert mlx.structure_of(olmo2, s) == "qwen3"
    assert mlx.structure_of(olmo2.replace(model_type="olmo"), s) == "qwen3"


def test_dense_counts_are_read_at_every_depth_up_to_ten():
    """Each dense candidate, full fine-tuning's and LoRA's, has whole-number counts at the
    shared depths, at L = 2, 3 (``shallow``) and 5–9 (``between``), and the closed form
    reads those counts there (the LoRA ones: ``mlx_derive.py --lora STRUCTURE``, whose
    L = 5–9 for Gemma 3, OLMo 2 and Phi-3 ``mlx_derive.py --between`` added)."""
    from introspect.refined.mlx_counts import all_counts

    derived = all_counts()
    keys = [k for k in derived if mlx.STRUCTURES[k.split("/")[0]][0] in mlx.DENSE_STRUCTURES]
    assert {k.split("/")[0] for k in keys} == set(mlx.DENSE_STRUCTURES) | {"gemma3_text-untied"}
    for k in keys:
        for c in derived[k]:
            assert set(c.at) == set(mlx.DEPTHS)
            assert {2, 3} <= set(c.shallow)
            assert set(c.between) == {5, 6, 7, 8, 9}
            for depth, counts in (*c.shallow.items(), *c.between.items()):
                assert all(isinstance(v, int) for v in counts.values())
                read = {kind: v for kind, v in mlx.counts_at(c, depth).items() if v}
                assert read == pytest.approx({kind: v for kind, v in counts.items() if v})


def test_measure_ties_gemma3_as_its_checkpoint_loads():
    """A tied Gemma 3 spec is measured tied: mlx-lm drops ``lm_head`` when the checkpoint
    has none (``sanitize``), which ``measure`` does too, so the step is the published
    model's and matches the tied counts."""
    pytest.importorskip("mlx.core")
    pytest.importorskip("mlx_lm")
    from introspect.measure import mlx_lm_models

    cfg, spec = dense_spec("gemma3_text", True, sliding_window=32)
    setup = setup_for("fp32", False)
    assert mlx.structure_of(spec, setup) == "gemma3_text"
    m = mlx_lm_models.measure(cfg, "config", spec, setup, compiled=False)
    assert m.n_params == spec.n_params
    assert refined.estimate(spec, setup).total == pytest.approx(m.peak_bytes, rel=0.05)
