"""The execution layer's saved set for today's blocks, against what autograd really keeps
in transformers' own modules (small configs, CPU, FP32): a saved-tensor census
(:mod:`introspect.measure.census`) of one training forward pass, compared with
:func:`introspect.refined.saved.per_layer` for the same layer kind."""

from __future__ import annotations

import pytest
from introspect.adapters.hf_config import spec_from_config

from introspect.refined import architecture, saved
from introspect.setup import TrainingSetup

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.slow

B, T = 2, 64
BASE = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=128,
    intermediate_size=96,
)
CONFIGS = {
    "qwen3-moe": dict(
        model_type="qwen3_moe",
        **BASE,
        head_dim=16,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
    ),
    "qwen2-moe-shared-expert": dict(
        model_type="qwen2_moe",
        **BASE,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=48,
    ),
    "gpt-oss-sinks-window": dict(
        model_type="gpt_oss",
        **BASE,
        head_dim=16,
        num_local_experts=4,
        num_experts_per_tok=2,
        sliding_window=16,
    ),
    "deepseek-v3-mla": dict(
        model_type="deepseek_v3",
        **{**BASE, "num_key_value_heads": 4},
        n_routed_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        q_lora_rank=48,
        kv_lora_rank=32,
        qk_rope_head_dim=8,
        qk_nope_head_dim=16,
        v_head_dim=16,
        first_k_dense_replace=0,
        n_group=1,
        topk_group=1,
    ),
    "mistral-window": dict(model_type="mistral", **BASE, sliding_window=16),
}


def _census(name: str, attn: str):
    from introspect.measure.census import census

    config = CONFIGS[name]
    keys = {k: v for k, v in config.items() if k != "model_type"}
    cfg = transformers.AutoConfig.for_model(config["model_type"], **keys, attn_implementation=attn)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    x = torch.randint(0, BASE["vocab_size"], (B, T))
    return census(model, lambda: model(input_ids=x, labels=x).loss, tokens=B * T, seq_len=T)


def _layer0(cen, under: str, *, floats_only: bool = True) -> int:
    """Census bytes produced inside layer 0's ``under`` module (``mlp``, ``self_attn``)."""
    total = 0
    for path, _op, _shape, dtype, nbytes, _term in cen.rows:
        if f".layers.0.{under}" not in path + ".":
            continue
        if floats_only and not dtype.startswith("torch.float"):
            continue
        total += nbytes
    return total


def _ours(name: str, attn: str) -> dict[str, int]:
    spec = spec_from_config(CONFIGS[name])
    setup = TrainingSetup(batch_size=B, seq_len=T, attention=attn, device="cpu")
    return saved.per_layer(spec, setup, spec.runs[0].kind)


#: Float terms of the feed-forward a census sees inside ``mlp`` (``down`` is the layer's
#: output, made by the residual add outside it).
FF_FLOATS = (
    "gate",
    "up",
    "act",
    "product",
    "routed_input",
    "expert_down",
    "router",
    "routing",
    "shared",
    "glu",
)


@pytest.mark.parametrize("name", ["qwen3-moe", "qwen2-moe-shared-expert", "gpt-oss-sinks-window"])
def test_moe_feed_forward_keeps_what_autograd_keeps(name):
    cen = _census(name, "eager")
    ours = _ours(name, "eager")
    floats = sum(ours.get(f"feed_forward/{t}", 0) for t in FF_FLOATS)
    assert floats == _layer0(cen, "mlp")
    ints = _layer0(cen, "mlp", floats_only=False) - _layer0(cen, "mlp")
    if name.startswith("qwen"):
        assert ours["feed_forward/routing_index"] == ints


def test_deepseek_experts_and_shared_experts_and_mla_latents():
    cen = _census("deepseek-v3-mla", "eager")
    ours = _ours("deepseek-v3-mla", "eager")
    experts = sum(
        ours[f"feed_forward/{t}"]
        for t in ("gate", "up", "act", "product", "routed_input", "expert_down", "routing")
    )
    assert experts == _layer0(cen, "mlp.experts")
    assert ours["feed_forward/shared"] == _layer0(cen, "mlp.shared_experts")
    assert ours["feed_forward/router"] == 4 * B * T * 4  # the FP32 sigmoid over E
    # rope tables come from the model's rotary module; ``out`` is the residual x + attn
    outside = ("attention/rope", "attention/linear/out")
    attn = sum(v for k, v in ours.items() if k.startswith("attention/") and k not in outside)
    assert attn == _layer0(cen, "self_attn")


@pytest.mark.parametrize("name", ["gpt-oss-sinks-window", "mistral-window"])
def test_eager_sliding_window_still_keeps_the_full_t_by_t_probabilities(name):
    """transformers' eager path builds QKᵀ over all T keys and adds the window mask:
    a window of 16 at T = 64 keeps B·h·T·T (plus the sink column), not B·h·T·16."""
    cen = _census(name, "eager")
    ours = _ours(name, "eager")
    softmax = sum(r[4] for r in cen.rows if ".layers.0.self_attn" in r[0] and r[1] == "_softmax")
    assert ours["attention/quadratic/probs"] == softmax
    spec = spec_from_config(CONFIGS[name])
    kind = spec.runs[0].kind
    assert kind.attention.kind == "sliding"
    band = architecture.attention_quadratic_values(spec, B, T, kind)["probs"]
    assert band < softmax // 4  # the architecture layer's band: what a windowed kernel needs


def test_sdpa_sliding_window_keeps_its_mask_per_layer():
    cen = _census("mistral-window", "sdpa")
    ours = _ours("mistral-window", "memory_efficient")
    masks = [r for r in cen.rows if r[1] == "where" and ".self_attn" in r[0]]
    assert len(masks) == BASE["num_hidden_layers"]
    assert ours["attention/mask"] == masks[0][4]


NEXT = dict(
    model_type="qwen3_next",
    hidden_size=64,
    num_hidden_layers=4,
    num_attention_heads=4,
    vocab_size=128,
    intermediate_size=96,
    num_key_value_heads=2,
    head_dim=16,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=16,
    linear_value_head_dim=16,
    num_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    shared_expert_intermediate_size=48,
)


def test_qwen3_next_gated_attention_and_the_linear_layers():
    from introspect.measure.census import census

    keys = {k: v for k, v in NEXT.items() if k != "model_type"}
    cfg = transformers.AutoConfig.for_model("qwen3_next", **keys, attn_implementation="eager")
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    x = torch.randint(0, 128, (B, 2 * T))
    cen = census(model, lambda: model(input_ids=x, labels=x).loss, tokens=2 * B * T, seq_len=2 * T)
    spec = spec_from_config(NEXT)
    setup = TrainingSetup(batch_size=B, seq_len=2 * T, attention="eager", device="cpu")
    (linear, _), (full, _) = spec.kinds
    assert (linear.attention.kind, full.attention.kind) == ("linear", "full")

    def attention_bytes(kind):
        terms = saved.per_layer(spec, setup, kind)
        outside = ("attention/rope", "attention/linear/out")
        return sum(
            v
            for k, v in terms.items()
            if (k.startswith("attention/") and k not in outside)
            or k.startswith("layernorm/qk_norm")
        )

    def census_bytes(layer, module):
        return sum(r[4] for r in cen.rows if f".layers.{layer}.{module}" in r[0] + ".")

    # Full attention (layer 3): exact but for Qwen3NextRMSNorm's (1 + weight), computed
    # and kept once per q/k norm (head_dim FP32 values each).
    assert census_bytes(3, "self_attn") - attention_bytes(full) == 2 * 16 * 4
    # Linear attention (layers 0-2, Gated DeltaNet's torch fallbacks): exact.
    for layer in (0, 1, 2):
        assert attention_bytes(linear) == census_bytes(layer, "linear_attn") > 0


def test_mla_on_cpu_sdpa_runs_the_math_path_and_keeps_t_by_t():
    """Q/K heads of nope + rope but V heads of v_head_dim: torch's CPU SDPA has no fused
    kernel for that and keeps the softmax like eager attention."""
    cen = _census("deepseek-v3-mla", "sdpa")
    ours = _ours("deepseek-v3-mla", "memory_efficient")
    softmax = sum(r[4] for r in cen.rows if ".layers.0.self_attn" in r[0] and "softmax" in r[1])
    assert ours["attention/quadratic/probs"] == softmax > 0
    assert "attention/logsumexp" not in ours
