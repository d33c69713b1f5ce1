"""mlx-lm's own LoRA step measured: ``model.freeze()`` and ``linear_to_lora_layers`` on
every block, the optimizer over the adapters only, the trainer's loss; our targets mapped
to mlx-lm's keys; one-line refusals for what is not measured."""

from __future__ import annotations

import pytest

pytest.importorskip("mlx.core")
pytest.importorskip("mlx_lm")

from introspect.adapters.hf_config import spec_from_config  # noqa: E402
from small_configs import MLX_LM  # noqa: E402

from introspect.errors import IntrospectError  # noqa: E402
from introspect.measure import mlx_lm_models, mlx_step  # noqa: E402
from introspect.params import parameter_count  # noqa: E402
from introspect.refined.lora import adapter_parameters  # noqa: E402
from introspect.setup import TrainingSetup  # noqa: E402

pytestmark = pytest.mark.slow

QWEN2 = MLX_LM["qwen2"]
SPEC = spec_from_config(QWEN2, source="qwen2")


def lora_setup(framework="mlx", **kw):
    fields = dict(
        seq_len=32, framework=framework, implementation="mlx_lm",
        attention="memory_efficient", finetune="lora", lora_rank=4,
    ) | kw  # fmt: skip
    return TrainingSetup(**fields)


def trainable(model) -> dict[str, tuple[int, ...]]:
    from mlx.utils import tree_flatten

    return {k: v.shape for k, v in tree_flatten(model.trainable_parameters())}


@pytest.mark.parametrize(
    "targets",
    [("all-linear",), ("q_proj", "v_proj"), ("gate_proj", "up_proj", "down_proj")],
)
def test_adapters_are_exactly_the_refined_count_and_the_base_is_frozen(targets):
    setup = lora_setup(lora_targets=targets)
    model = mlx_lm_models.build(QWEN2, "qwen2")
    note = mlx_lm_models.to_lora(model, setup)
    shapes = trainable(model)
    assert all(k.rsplit(".", 1)[-1] in ("lora_a", "lora_b") for k in shapes)
    assert sum(a * b for a, b in shapes.values()) == adapter_parameters(SPEC, setup)
    wanted = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    if targets != ("all-linear",):
        wanted = set(targets)
    assert {k.split(".")[-2] for k in shapes} == wanted
    assert {int(k.split(".")[2]) for k in shapes} == {0, 1}  # every block (--num-layers -1)
    assert ("default keys" in note) == (targets == ("all-linear",))


@pytest.mark.parametrize("framework", ["mlx", "mlx_compiled"])
def test_lora_step_keeps_state_for_the_adapters_only(framework):
    setup = lora_setup(framework)
    m = mlx_lm_models.measure(QWEN2, "qwen2", SPEC, setup, compiled=framework == "mlx_compiled")
    n_adapters = adapter_parameters(SPEC, setup)
    assert m.trainable_params == n_adapters
    assert m.n_params == parameter_count(SPEC) + n_adapters
    # FP32 weights: the frozen base and the adapters; Adam's m and v for the adapters.
    assert m.categories["parameters"] == 4 * (parameter_count(SPEC) + n_adapters)
    # Adam's state also holds its step and learning rate: two scalars.
    assert 0 < m.categories["optimizer_state"] - 8 * n_adapters <= 16
    assert m.peak_bytes > m.categories["parameters"] + m.categories["optimizer_state"]
    assert any("linear_to_lora_layers" in n for n in m.notes)


def test_bf16_base_keeps_fp32_adapters_as_mlx_lm_makes_them():
    setup = lora_setup(precision="bf16")
    m = mlx_lm_models.measure(QWEN2, "qwen2", SPEC, setup, compiled=False)
    n_adapters = adapter_parameters(SPEC, setup)
    assert m.categories["parameters"] == 2 * parameter_count(SPEC) + 4 * n_adapters
    assert 0 < m.categories["optimizer_state"] - 8 * n_adapters <= 16


def test_lora_with_dropout_compiles_with_the_random_state():
    setup = lora_setup("mlx_compiled", lora_dropout=0.1)
    m = mlx_lm_models.measure(QWEN2, "qwen2", SPEC, setup, compiled=True)
    assert m.peak_bytes > m.categories["parameters"]
    assert any("dropout 0.1" in n for n in m.notes)


def test_refusals_are_one_line():
    model = mlx_lm_models.build(QWEN2, "qwen2")
    with pytest.raises(IntrospectError, match="has no c_attn; its linears are down_proj"):
        mlx_lm_models.lora_keys(model, ("c_attn",))
    # bitsandbytes' NF4 QLoRA on MLX is refused by the setup itself (MLX's 4-bit base is
    # --base-quant affine4: tests/test_mlx_quantized.py)
    with pytest.raises(IntrospectError, match="--base-quant affine4 or affine8"):
        lora_setup(finetune="qlora")
    with pytest.raises(IntrospectError, match="--impl mlx-lm"):
        mlx_step.measure_reference(SPEC, lora_setup(implementation="reference"), compiled=False)


def test_cli_refuses_an_mlx_lora_dry_run_of_the_reference_model(capsys):
    from introspect.cli import main

    code = main(["measure", "10M", "--framework", "mlx", "--device", "fake", "--lora-rank", "8"])
    assert code == 2
    err = capsys.readouterr().err
    assert "replays LoRA on mlx-lm's classes only" in err and len(err.strip().splitlines()) == 1


# The closed form's LoRA moments (introspect.refined.mlx), against the replay of real
# mlx-lm LoRA steps at a shape no count was derived at (those: d=128, 8 heads, f=216,
# B=3, T ∈ {44, 176}, r=6).
REPLAY_SHAPE = dict(d=96, layers=5, ffn=256, heads=4, kv=2, vocab=3000)


def replay_config(family: str) -> dict:
    from introspect.measure import mlx_replay as mr

    s = REPLAY_SHAPE
    cfg = mr.family_config(family, s["d"], s["layers"], s["ffn"], s["heads"], s["kv"], s["vocab"])
    cfg["tie_word_embeddings"] = True
    return cfg


@pytest.mark.parametrize("family,compiled", [("llama", False), ("qwen2", True)])
def test_lora_closed_form_within_5_percent_of_the_replay(family, compiled):
    """A real mlx-lm LoRA step, traced lazily (nothing evaluated) and replayed: the
    closed form, whose counts come from other shapes, lands within 5% of it."""
    import mlx.optimizers as optim
    from mlx_lm.tuner.utils import linear_to_lora_layers

    from introspect import refined
    from introspect.measure import mlx_replay as mr
    from introspect.refined import mlx

    cfg = replay_config(family)
    spec = spec_from_config(cfg, use_transformers=False)
    setup = lora_setup("mlx_compiled" if compiled else "mlx", seq_len=80, batch_size=2)
    assert mlx.applies(setup, spec)
    model = mr.mlx_lm_model(cfg, evaluate=False)
    model.freeze()
    linear_to_lora_layers(model, -1, {"rank": 4, "scale": 20.0, "dropout": 0.0})
    optimizer = optim.Adam(learning_rate=1e-4)
    optimizer.init(model.trainable_parameters())
    batch = mr.mlx_lm_batch(cfg["vocab_size"], 2, 80, evaluate=False)
    step = mr.make_step(model, optimizer, mr.mlx_lm_loss, compiled)
    replayed = mr.predict(model, optimizer, step, batch, compiled).peak_bytes
    assert refined.estimate(spec, setup).total == pytest.approx(replayed, rel=0.05)


def test_lora_state_is_the_frozen_base_and_fp32_adapters_with_their_adam_state():
    from introspect.refined import mlx

    spec = spec_from_config(replay_config("llama"), use_transformers=False)
    n, a = parameter_count(spec), adapter_parameters(spec, lora_setup())
    for precision, s in (("fp32", 4), ("bf16", 2)):
        setup = lora_setup(precision=precision)
        for _, terms in mlx.moments(spec, setup):
            assert terms["weights"] == n * s
            assert terms["weights/lora_adapters"] == terms["optimizer/adam_m"] == 4 * a
            assert terms["optimizer/adam_v"] == 4 * a


def test_lora_moments_apply_only_where_derived():
    """mlx-lm's default LoRA on a derived structure uses the derived counts (with a
    dropout too: introspect.refined.mlx_dora; checkpointed too, without a dropout:
    tests/test_mlx_lora_ckpt.py); named targets not derived, checkpointing with a dropout
    and our reference model — torch's moments before (issue 23) — and an underived
    structure (an untied Gemma 3's) get no figure at all: one line that the MLX dry run
    answers, from the estimate and from the fit's search (tests/test_mlx_lora_keys.py)."""
    from introspect import refined
    from introspect.commands.fit import _model_takes
    from introspect.refined import mlx
    from introspect.unmodelled import NotModelled

    spec = spec_from_config(replay_config("llama"), use_transformers=False)
    assert mlx.applies(lora_setup(), spec) and mlx.applies(lora_setup(lora_dropout=0.05), spec)
    for other in (
        lora_setup(lora_targets=("q_proj", "k_proj")),
        lora_setup(activation_checkpointing=True, lora_dropout=0.05),
        lora_setup(implementation="reference"),
    ):
        assert not mlx.applies(other) and not mlx.applies(other, spec)
        with pytest.raises(NotModelled, match="answered by the MLX dry run"):
            refined.execution_estimate(spec, other)
    other = spec_from_config(UNDERIVED, source="gemma3.json", use_transformers=False)
    # pick another underived structure here once an untied Gemma 3's LoRA counts are derived
    assert mlx.structure_of(other, lora_setup()) not in mlx.LORA_STRUCTURES
    assert mlx.applies(lora_setup()) and not mlx.applies(lora_setup(), other)
    line = (
        r"gemma3.json: LoRA counts not derived for mlx-lm's gemma3_text \(untied\): "
        "answered by the MLX dry run"
    )
    for setup in (lora_setup(), lora_setup(lora_dropout=0.05), lora_setup("mlx_compiled")):
        with pytest.raises(NotModelled, match=line):
            refined.estimate(other, setup)
    assert not _model_takes(other, lora_setup()) and _model_takes(spec, lora_setup())
    assert refined.estimate(other, lora_setup(finetune="full")).total > 0
    assert not mlx.lora_not_derived(other, lora_setup(framework="torch", implementation=None))


#: A structure without LoRA counts: mlx-lm's Gemma 3 untied (its class keeps ``lm_head``
#: when the checkpoint has one; the LoRA counts are the tied structure's).
UNDERIVED = dict(
    model_type="gemma3_text", hidden_size=64, num_hidden_layers=2, intermediate_size=128,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16,
    vocab_size=512, rms_norm_eps=1e-6, sliding_window=4096, sliding_window_pattern=2,
    tie_word_embeddings=False,
)  # fmt: skip


def test_lora_counts_are_whole_tensors_down_to_two_layers():
    """Every LoRA candidate has whole-number counts at the shared depths and at L = 2,
    and at L = 2 the closed form reads that count itself (no line extended from 4)."""
    from introspect.refined import mlx
    from introspect.refined.mlx_counts import all_counts

    derived = all_counts()
    keys = [k for k in derived if k.endswith("/lora")]
    assert {k.split("/")[0] for k in keys} == set(mlx.LORA_STRUCTURES)
    for k in keys:
        for c in derived[k]:
            assert set(c.at) == set(mlx.DEPTHS) and {2} <= set(c.shallow)
            for counts in (*c.at.values(), c.shallow[2]):
                assert all(isinstance(v, int) for v in counts.values())
            at_two = {kind: v for kind, v in mlx.counts_at(c, 2).items() if v}
            assert at_two == pytest.approx({kind: v for kind, v in c.shallow[2].items() if v})


def test_bf16_eager_lora_step_keeps_the_fp32_upcasts_the_trace_merges():
    """A measured BF16 eager LoRA step (mlx-lm's FP32 adapters over a BF16 base): the
    closed form, with one B·T·d FP32 input copy per layer for each adapter beyond the
    first on q/k/v's and gate/up's shared inputs, lands within 5% of the peak; the copies
    are absent from FP32 and compiled steps."""
    from introspect import refined
    from introspect.refined import mlx

    cfg, spec = QWEN2, SPEC
    setup = lora_setup(precision="bf16", seq_len=128, batch_size=2)
    upcasts = mlx.lora_upcast_bytes(spec, setup)
    assert upcasts == spec.num_hidden_layers * 3 * 2 * 128 * spec.hidden_size * 4
    assert mlx.lora_upcast_bytes(spec, setup.replace(framework="mlx_compiled")) == 0
    assert mlx.lora_upcast_bytes(spec, setup.replace(precision="fp32")) == 0
    m = mlx_lm_models.measure(cfg, "qwen2", spec, setup, compiled=False, repeats=2)
    estimate = refined.estimate(spec, setup)
    assert estimate.execution["activations/mlx/hidden/lora_upcasts"] == upcasts
    assert estimate.total == pytest.approx(m.peak_bytes, rel=0.05)


def test_mlx_lm_lora_on_moe_counts_the_router_adapter():
    """mlx-lm adapts every linear of a block, an MoE layer's router too, and each
    expert of a SwitchLinear: the count the estimate keeps state for is the step's."""
    cfg = dict(
        QWEN2, model_type="qwen3_moe", head_dim=16, num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=32, decoder_sparse_step=1, mlp_only_layers=[],
        tie_word_embeddings=False, norm_topk_prob=True, rope_theta=1e6,
        max_position_embeddings=4096,
    )  # fmt: skip
    spec = spec_from_config(cfg, source="qwen3_moe")
    setup = lora_setup()
    m = mlx_lm_models.measure(cfg, "qwen3_moe", spec, setup, compiled=False)
    assert m.trainable_params == adapter_parameters(spec, setup)


QWEN3 = dict(
    model_type="qwen3", hidden_size=96, num_hidden_layers=3, num_attention_heads=4,
    num_key_value_heads=2, head_dim=24, intermediate_size=256, vocab_size=3000,
    rms_norm_eps=1e-6, rope_theta=1e6, max_position_embeddings=4096, tie_word_embeddings=True,
)  # fmt: skip


@pytest.mark.parametrize("framework", ["mlx", "mlx_compiled"])
def test_qwen3_lora_step_beside_the_closed_form(framework):
    """A real mlx-lm LoRA step of a tiny Qwen3 (q/k norms frozen, every linear adapted),
    at a shape no count was read at: the closed form from Qwen3's own LoRA counts lands
    within 5% of its measured peak (torch's moments, what it was before: 0.89–1.38 of
    such steps, benchmarks/results/mlx-lora.md)."""
    from introspect import refined
    from introspect.refined import mlx

    spec = spec_from_config(QWEN3, source="qwen3", use_transformers=False)
    setup = lora_setup(framework, seq_len=96, batch_size=2)
    assert mlx.structure_of(spec, setup) == "qwen3" and mlx.applies(setup, spec)
    m = mlx_lm_models.measure(
        QWEN3, "qwen3", spec, setup, compiled=framework == "mlx_compiled", repeats=2
    )
    assert m.trainable_params == adapter_parameters(spec, setup)
    estimate = refined.estimate(spec, setup)
    assert "torch's moments" not in estimate.execution.label
    assert estimate.total == pytest.approx(m.peak_bytes, rel=0.05)


def test_an_underived_family_is_answered_by_the_mlx_dry_run(tmp_path, capsys):
    """``introspect profile`` on mlx-lm's LoRA of a structure with no LoRA counts (an
    untied Gemma 3): the not-derived line and the MLX dry run of its own class — within 5% of the
    real step's peak, as the replay is — and no estimate of another structure;
    ``introspect measure --device fake --impl mlx-lm`` runs the same dry run."""
    import json

    from introspect.cli import main
    from introspect.measure import mlx_lora_dry_run

    path = tmp_path / "config.json"
    path.write_text(json.dumps(UNDERIVED))
    flags = ["--framework", "mlx", "--finetune", "lora", "--lora-rank", "4"]
    flags += ["--seq", "96", "--batch", "2"]
    assert main(["profile", str(path), *flags, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["estimates"] is None and out["answer"] == "dry_run"
    assert out["unmodelled"][0].startswith(f"LoRA counts not derived for {WHICH}")
    answer = out["dry_run"]
    spec = spec_from_config(UNDERIVED, source="gemma3", use_transformers=False)
    setup = lora_setup(seq_len=96, batch_size=2)
    assert answer["trainable_params"] == adapter_parameters(spec, setup)
    m = mlx_lm_models.measure(UNDERIVED, "gemma3", spec, setup, compiled=False, repeats=2)
    assert answer["peak_bytes"] == pytest.approx(m.peak_bytes, rel=0.05)
    dry = mlx_lora_dry_run.dry_run(UNDERIVED, "gemma3", spec, setup)
    assert dry.peak_bytes == answer["peak_bytes"]
    assert main(["profile", str(path), *flags]) == 0
    text = capsys.readouterr().out
    assert f"LoRA counts not derived for {WHICH}: answered by the MLX dry run" in text
    assert "refined" not in text and f"({answer['peak_bytes']:,} bytes)" in text
    code = main(["measure", str(path), *flags, "--device", "fake", "--impl", "mlx-lm"])
    assert code == 0
    assert f"not derived for {WHICH}" in capsys.readouterr().out


WHICH = "mlx-lm's gemma3_text (untied)"
