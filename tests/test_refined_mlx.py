"""The MLX closed form (introspect.refined.mlx): counts from the graph, checked against the
replay of real mlx-lm steps at shapes the counts were not derived at."""

from __future__ import annotations

import pytest
from specs import mlx_lm_setup as setup_for

from introspect import refined
from introspect.refined import execution, mlx
from introspect.refined.mlx_counts import all_counts

#: Not a derivation shape (those are d=128, 8 heads, f=216, B=3, T ∈ {44, 176}).
SHAPE = dict(d=96, layers=3, ffn=256, heads=4, kv=2, vocab=3000)


def family_spec(family: str):
    from introspect.adapters.hf_config import spec_from_config

    from introspect.measure import mlx_replay as mr

    kv = SHAPE["heads"] if family in ("phi", "gpt2") else SHAPE["kv"]
    cfg = mr.family_config(
        family, SHAPE["d"], SHAPE["layers"], SHAPE["ffn"], SHAPE["heads"], kv, SHAPE["vocab"]
    )
    if family in ("llama", "qwen2"):
        cfg["tie_word_embeddings"] = True  # mlx-lm's default
    return cfg, spec_from_config(cfg, use_transformers=False)


@pytest.mark.parametrize(
    "family,dtype,compiled",
    [("llama", "bf16", True), ("gpt2", "fp32", False), ("qwen3", "fp32", True)],
)
def test_closed_form_within_5_percent_of_the_replay(family, dtype, compiled):
    """A real mlx-lm step, traced (nothing evaluated) and replayed: the closed form,
    whose counts come from other shapes, lands within 5% of the replayed peak."""
    pytest.importorskip("mlx.core")
    pytest.importorskip("mlx_lm")
    import mlx.core as mx
    import mlx.optimizers as optim

    from introspect.measure import mlx_replay as mr

    cfg, spec = family_spec(family)
    setup = setup_for(dtype, compiled)
    model = mr.mlx_lm_model(cfg, mx.bfloat16 if dtype == "bf16" else None, evaluate=False)
    optimizer = optim.Adam(learning_rate=1e-4)
    optimizer.init(model.trainable_parameters())
    batch = mr.mlx_lm_batch(SHAPE["vocab"], setup.batch_size, setup.seq_len, evaluate=False)
    step = mr.make_step(model, optimizer, mr.mlx_lm_loss, compiled)
    replayed = mr.predict(model, optimizer, step, batch, compiled).peak_bytes
    assert refined.estimate(spec, setup).total == pytest.approx(replayed, rel=0.05)


def test_counts_are_whole_tensors_and_the_state_is_three_copies():
    """Every count is a whole number of bytes per element, and the state under every
    moment is the weights plus Adam's m and v in the weights' dtype."""
    for candidates in all_counts().values():
        assert candidates
        for c in candidates:
            # DEPTHS, and for a MoE structure more (benchmarks/mlx_derive.py's MOE_LAYERS)
            assert set(mlx.DEPTHS) <= set(c.at)
            for counts in c.at.values():
                assert all(isinstance(v, int) for v in counts.values())
    _, spec = family_spec("llama")
    from introspect.params import parameter_count

    n = parameter_count(spec)
    for dtype, s in (("fp32", 4), ("bf16", 2)):
        for _, terms in mlx.moments(spec, setup_for(dtype, False)):
            assert terms["weights"] == terms["optimizer/adam_m"] == n * s


def test_the_peak_grows_with_each_size_it_is_made_of():
    """Longer sequences, a larger vocabulary and more layers each raise the peak; BF16
    lowers it."""
    _, spec = family_spec("qwen2")
    base = refined.estimate(spec, setup_for("fp32", False)).total
    assert refined.estimate(spec, setup_for("fp32", False, seq=192)).total > base
    assert refined.estimate(spec.replace(vocab_size=6000), setup_for("fp32", False)).total > base
    deeper = spec.replace(num_hidden_layers=6)
    assert refined.estimate(deeper, setup_for("fp32", False)).total > base
    assert refined.estimate(spec, setup_for("bf16", False)).total < base


def test_checkpointing_keeps_one_input_per_layer():
    """mlx-lm's grad_checkpoint: a layer keeps its B·T·d input, one layer is recomputed —
    so the checkpointed step saves more the deeper the model."""
    _, spec = family_spec("llama")

    def saving(layers: int) -> int:
        deeper = spec.replace(num_hidden_layers=layers)
        plain = refined.estimate(deeper, setup_for("fp32", True)).total
        ckpt = refined.estimate(deeper, setup_for("fp32", True, ckpt=True)).total
        return plain - ckpt

    assert 0 < saving(4) < saving(12)


def test_setups_outside_the_derivation_keep_torch_moments():
    """SGD or LoRA on MLX are not what the counts were derived from: the closed form
    says so by not applying (and the estimate still answers)."""
    assert mlx.applies(setup_for("fp32", False))
    sgd = setup_for("fp32", False).replace(optimizer="sgd")
    assert not mlx.applies(sgd)
    _, spec = family_spec("llama")
    assert refined.estimate(spec, sgd).total > 0
    assert execution.framework_extra(spec, sgd, {"weights": 1}) == ({"weights": 1}, 0)


def test_structure_of_maps_unknown_families_by_their_structure():
    _, spec = family_spec("llama")
    s = setup_for("fp32", False)
    assert mlx.structure_of(spec, s) == "llama"
    assert mlx.structure_of(spec.replace(tie_word_embeddings=False), s) == "llama-untied"
    assert mlx.structure_of(spec.replace(model_type="mistral"), s) == "llama"
    assert mlx.structure_of(spec.replace(model_type="olmo", qk_norm="head"), s) == "qwen3"


def test_every_structure_is_counted_from_one_layer():
    """No depth is extrapolated: every candidate of every key has counts at L = 1, 2 and 3
    (``benchmarks/mlx_derive.py --shallow``) — Gemma 3 from L = 2, the fewest layers
    mlx-lm's class runs (``mlx_derive.runs``) — and the closed form reads those counts
    themselves there."""
    for key, candidates in all_counts().items():
        first = 2 if mlx.STRUCTURES[key.split("/")[0]][0] == "gemma3_text" else 1
        for c in candidates:
            assert set(range(first, 4)) <= set(c.shallow) | set(c.at), key
            for depth in range(first, 4):
                counts = {**c.shallow, **c.at}[depth]
                assert all(isinstance(v, int) for v in counts.values())
                read = {kind: v for kind, v in mlx.counts_at(c, depth).items() if v}
                assert read == pytest.approx({kind: v for kind, v in counts.items() if v})


@pytest.mark.parametrize("layers,compiled", [(1, False), (2, True)])
def test_few_layers_with_a_large_vocabulary_match_a_real_step(layers, compiled):
    """A real mlx-lm step with one or two layers and a vocabulary whose logits outweigh
    the blocks (the B·T·V logits, their soft-max and gradients at the loss's backward):
    the counts read at that depth land within 5% of ``mx.get_peak_memory()`` (the line
    from L = 4 to 10 run down to it overshot such steps by 7–12%,
    ``benchmarks/results/mlx-regimes.md``)."""
    pytest.importorskip("mlx.core")
    pytest.importorskip("mlx_lm")
    import mlx.optimizers as optim
    from introspect.adapters.hf_config import spec_from_config

    from introspect.measure import mlx_replay as mr

    cfg = mr.family_config("llama", 64, layers, 160, 4, 2, 12000)
    cfg["tie_word_embeddings"] = True
    spec = spec_from_config(cfg, use_transformers=False)
    setup = setup_for("fp32", compiled, batch=1, seq=128)
    model = mr.mlx_lm_model(cfg)
    optimizer = optim.Adam(learning_rate=1e-4)
    optimizer.init(model.trainable_parameters())
    batch = mr.mlx_lm_batch(cfg["vocab_size"], 1, 128)
    step = mr.make_step(model, optimizer, mr.mlx_lm_loss, compiled)
    _, peaks = mr.measure(model, optimizer, step, batch, repeats=1)
    assert refined.estimate(spec, setup).total == pytest.approx(max(peaks), rel=0.05)


def test_weight_dominated_short_steps_keep_the_backward_reduce_moment():
    """With T short and many layers the weights' kinds outweigh every activation (as in
    SmolLM2-135M at T = 128), and the largest moment is one no T = 44 or 176 shape puts
    on top: a weight gradient's ``Reduce`` in the backward with many layers' gradients
    and updates alive. The T = 12 candidates (``mlx_derive.py --short``) hold it: the
    closed form lands on the replay of a real mlx-lm step at a shape of its own, where
    the candidates of the other shapes alone are 9% under (a measured SmolLM2-135M step
    at T = 128: 0.946 before, 1.000 with them, ``benchmarks/results/mlx-regimes.md``)."""
    pytest.importorskip("mlx.core")
    pytest.importorskip("mlx_lm")
    import mlx.optimizers as optim
    from introspect.adapters.hf_config import spec_from_config

    from introspect.measure import mlx_replay as mr

    cfg = mr.family_config("llama", 160, 24, 432, 5, 1, 16000)
    cfg["tie_word_embeddings"] = True
    spec = spec_from_config(cfg, use_transformers=False)
    setup = setup_for("fp32", False, batch=1, seq=16)
    model = mr.mlx_lm_model(cfg, evaluate=False)
    optimizer = optim.Adam(learning_rate=1e-4)
    optimizer.init(model.trainable_parameters())
    batch = mr.mlx_lm_batch(cfg["vocab_size"], 1, 16, evaluate=False)
    step = mr.make_step(model, optimizer, mr.mlx_lm_loss, False)
    replayed = mr.predict(model, optimizer, step, batch, False).peak_bytes
    assert refined.estimate(spec, setup).total == pytest.approx(replayed, rel=0.02)
    state = sum(mlx.state_terms(spec, setup).values())
    x = mlx.dims(spec, setup)
    others = max(
        state + sum(mlx.candidate_terms(c, 24, x, "llama").values())
        for c in all_counts()["llama/fp32/eager"]
        if c.shape["seq"] != 12
    )
    assert others < 0.95 * replayed
