"""The architecture layer: equal to the seed for its standard transformer, each refinement
checked against the tensors a real module produces, and each feature moving only its own
terms."""

from __future__ import annotations

import pytest
from specs import QWEN25_05B, SEED_7B

from introspect import refined, simplified
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

SMALL = ModelSpec(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=320)


@pytest.mark.parametrize(
    "spec, setup",
    [
        (SEED_7B, TrainingSetup(activation_dtype="bf16")),
        (SEED_7B, TrainingSetup(batch_size=8, activation_dtype="bf16")),
        (SEED_7B, TrainingSetup(activation_dtype="bf16", weights_dtype="bf16")),
        (SMALL, TrainingSetup(seq_len=100)),
    ],
    ids=["seed-7b", "seed-7b-B8", "seed-7b-bf16-weights", "small-fp32"],
)
def test_standard_transformer_equals_the_seed_term_by_term(spec, setup):
    seed = simplified.estimate(spec, setup)
    arch = refined.estimate(spec, setup).architecture
    for term, value in seed.items():
        assert arch.sum(term) == value, term
    assert arch.total == seed.total
    # Nothing in the architecture layer lies outside the seed's terms.
    assert all(any(n == t or n.startswith(t + "/") for t in seed) for n in arch)


def test_qwen25_05b_terms_by_hand():
    """The refined widths for Qwen2.5-0.5B, from its published config."""
    setup = TrainingSetup(activation_dtype="bf16")
    arch = refined.estimate(QWEN25_05B, setup).architecture
    L, BT, s = 24, 2048, 2
    assert arch["activations/layer/attention/linear/k"] == s * L * BT * 2 * 64
    assert arch["activations/layer/attention/linear/q"] == s * L * BT * 896
    assert arch["activations/layer/feed_forward/gate"] == s * L * BT * 4864
    assert arch["activations/layer/feed_forward/product"] == s * L * BT * 4864
    assert arch["activations/layer/attention/quadratic/scores"] == s * L * 14 * 2048**2
    assert arch["weights"] == 4 * QWEN25_05B.n_params
    assert QWEN25_05B.n_params == 494_032_768


def _module_outputs(spec: ModelSpec, T: int) -> dict[str, int]:
    """Elements every named module of the torch reference model outputs in one forward
    pass (forward hooks): the independent count of the tensors the architecture makes."""
    torch = pytest.importorskip("torch")
    from introspect.measure.torch_model import build

    model = build(spec)
    counts: dict[str, int] = {}

    def hook(name):
        role = name.split(".")[-1]

        def record(module, inputs, output):
            counts[role] = counts.get(role, 0) + output.numel()
            if role in ("down_proj", "o_proj"):
                key = role + ".input"
                counts[key] = counts.get(key, 0) + inputs[0].numel()

        return record

    for name, module in model.named_modules():
        if name:
            module.register_forward_hook(hook(name))
    with torch.no_grad():
        model(torch.randint(0, spec.vocab_size, (1, T)))
    return counts


GQA_GATED = SMALL.replace(
    num_key_value_heads=2,
    norm="rmsnorm",
    norm_bias=False,
    ffn="gated",
    hidden_act="silu",
    intermediate_size=176,
    qkv_bias=True,
)
HEAD_DIM = SMALL.replace(head_dim=24, num_key_value_heads=1, tie_word_embeddings=True)


@pytest.mark.parametrize(
    "spec", [SMALL, GQA_GATED, HEAD_DIM], ids=["standard", "gqa-gated", "head-dim-mqa-tied"]
)
def test_terms_equal_the_tensors_the_modules_make(spec):
    T = 48
    out = _module_outputs(spec, T)
    arch = refined.estimate(spec, TrainingSetup(seq_len=T)).architecture
    s = 4

    def term(name):
        return arch[name] // s

    assert term("activations/embedding") == out["embed_tokens"]
    assert term("activations/layer/attention/linear/q") == out["q_proj"]
    assert term("activations/layer/attention/linear/k") == out["k_proj"]
    assert term("activations/layer/attention/linear/v") == out["v_proj"]
    assert term("activations/layer/attention/linear/context") == out["o_proj.input"]
    assert term("activations/layer/attention/linear/out") == out["o_proj"]
    assert term("activations/layer/feed_forward/up") == out["up_proj"]
    assert term("activations/layer/feed_forward/down") == out["down_proj"]
    act = out["down_proj.input"] if spec.ffn == "plain" else out["gate_proj"]
    assert term("activations/layer/feed_forward/act") == act
    if spec.ffn == "gated":
        assert term("activations/layer/feed_forward/gate") == out["gate_proj"]
        assert term("activations/layer/feed_forward/product") == out["down_proj.input"]
    norms = out["input_layernorm"] + out["post_attention_layernorm"]
    assert term("activations/layer/layernorm") == norms
    logits = out.get("lm_head") or spec.vocab_size * T
    assert term("activations/logits") == logits


def _changed(a, b) -> set[str]:
    names = set(a.terms) | set(b.terms)
    return {n for n in names if a.get(n) != b.get(n)}


STATE = {"weights", "grads", "optimizer/adam_m", "optimizer/adam_v"}


@pytest.mark.parametrize(
    "change, moved",
    [
        (
            dict(num_key_value_heads=2),
            {"activations/layer/attention/linear/k", "activations/layer/attention/linear/v"},
        ),
        (
            dict(ffn="gated", intermediate_size=256, hidden_act="silu"),
            {
                "activations/layer/feed_forward/gate",
                "activations/layer/feed_forward/product",
            },
        ),
        (
            dict(intermediate_size=300),
            {"activations/layer/feed_forward/up", "activations/layer/feed_forward/act"},
        ),
        (dict(norm="rmsnorm", norm_bias=False), set()),
        (dict(tie_word_embeddings=True), set()),
        (dict(qk_norm="head"), {"activations/layer/layernorm/qk_norm"}),
        (
            dict(num_local_experts=4, num_experts_per_tok=2),
            {
                "activations/layer/feed_forward/up",
                "activations/layer/feed_forward/act",
                "activations/layer/feed_forward/down",
                "activations/layer/feed_forward/router",
            },
        ),
    ],
    ids=["gqa", "gated", "ffn-width", "rmsnorm", "tied", "qk-norm", "moe"],
)
def test_one_feature_moves_only_its_own_terms(change, moved):
    setup = TrainingSetup(seq_len=64)
    base = refined.estimate(SMALL, setup).architecture
    spec = SMALL.replace(**change)
    arch = refined.estimate(spec, setup).architecture
    changed = _changed(base, arch) - STATE
    assert changed == moved
    # The state terms move only with the exact parameter count.
    if spec.n_params == SMALL.n_params:
        assert not (_changed(base, arch) & STATE)


def test_moe_counts_every_expert_in_the_state_and_active_experts_in_activations():
    spec = SMALL.replace(num_local_experts=8, num_experts_per_tok=2)
    setup = TrainingSetup(seq_len=32)
    arch = refined.estimate(spec, setup).architecture
    dense = refined.estimate(SMALL, setup).architecture
    assert arch["weights"] == 4 * spec.n_params > dense["weights"]
    up = "activations/layer/feed_forward/up"
    assert arch[up] == 2 * dense[up]
    assert arch["activations/layer/feed_forward/router"] == 4 * 2 * 2 * 32 * 8
