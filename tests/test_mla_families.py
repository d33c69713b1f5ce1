"""The multi-head latent attention families beside DeepSeek-V3 — DeepSeek-V2 and
MiniCPM3 (``adapters/families/deepseek.py``) — in the closed form: their readers' layer
kinds, and the refined estimate against a dry run of transformers' own class
(FakeTensorMode, :func:`introspect.measure.hf_models.measure`) within ±3% for three
setups: FP32 eager; autocast with checkpointing; pure BF16 with SDPA. B = 2, T = 128,
the labels loop and Adam. (Their parameter counts are exact in
``tests/test_hf_config_transformers.py``, which counts :data:`small_configs.MLA`.)"""

from __future__ import annotations

import pytest
from introspect.adapters.hf_config import spec_from_config
from small_configs import FAMILIES, MLA

from introspect.setup import TrainingSetup

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.slow

SETUPS = {
    "eager FP32": dict(attention="eager", precision="fp32"),
    "amp ckpt": dict(precision="amp", activation_checkpointing=True),
    "BF16 SDPA": dict(attention="memory_efficient", precision="bf16"),
}


def test_deepseek_v2_dense_first_then_softmax_routed_and_shared_experts():
    spec = spec_from_config(MLA["deepseek_v2, q latent"])
    (dense, n_dense), (moe, n_moe) = spec.kinds
    assert (n_dense, n_moe) == (1, 2)
    assert dense.feed_forward.num_experts == 0 and dense.feed_forward.intermediate_size == 640
    ff = moe.feed_forward
    assert (ff.num_experts, ff.top_k, ff.router) == (8, 2, "softmax")
    assert ff.shared_intermediate_size == 2 * 64  # n_shared_experts: the class's default 2
    assert not ff.router_correction_bias  # V3's e_score_correction_bias: not in V2
    assert moe.attention.kind == "mla" and moe.attention.q_lora_rank == 96
    plain_q = spec_from_config(MLA["deepseek_v2, q_proj, group-limited"])
    assert plain_q.runs[0].kind.attention.q_lora_rank is None
    assert not spec.unmodelled and not spec.unbuilt  # no multi-token-prediction layers


def test_deepseek_v2_null_top_k_is_left_to_the_dry_run():
    """DeepseekV2Config's default ``num_experts_per_tok`` is None, which the router's
    ``topk`` cannot take: the spec comes from the build, and says why."""
    config = dict(MLA["deepseek_v2, q latent"], num_experts_per_tok=None)
    spec = spec_from_config(config)
    assert any("num_experts_per_tok null" in part for part in spec.unmodelled)


@pytest.mark.parametrize(
    "name, kv_heads",
    [("deepseek_v3, MLA", 4), ("deepseek_v3, MLA", None), ("minicpm3, multipliers", 4)],
)
def test_mla_with_fewer_kv_heads_than_heads_goes_to_the_dry_run(name, kv_heads):
    """MLA's K/V have every head, yet the class ``repeat_kv``s them by heads // kv heads:
    the step fails on a shape mismatch, so the reader does not count such a config as if
    it ran. A missing key is the config class's default (DeepseekV3Config's 128, not the
    8 heads). The parameter count, read from the build, is unchanged."""
    config = dict({**FAMILIES, **MLA}[name])
    if kv_heads is None:
        del config["num_key_value_heads"]
    else:
        config["num_key_value_heads"] = kv_heads
    spec = spec_from_config(config)
    expected = f"num_key_value_heads {kv_heads or 128} beside num_attention_heads 8"
    assert any(expected in part for part in spec.unmodelled), spec.unmodelled
    assert spec.n_params == spec_from_config({**FAMILIES, **MLA}[name]).n_params
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.for_model(**config), attn_implementation="eager"
    )
    ids = torch.zeros(1, 8, dtype=torch.long)
    with pytest.raises(RuntimeError, match="size of tensor"):
        model(ids, labels=ids)


def test_minicpm3_is_mla_with_a_dense_mlp_and_the_class_v_head_default():
    spec = spec_from_config(MLA["minicpm3, q_proj, bias, untied"])
    ((kind, n),) = spec.kinds
    assert n == 2 and kind.feed_forward.num_experts == 0 and kind.feed_forward.bias
    att = kind.attention
    assert att.kind == "mla" and att.q_lora_rank is None
    assert att.v_head_dim == 256 // 8  # MiniCPM3Config: hidden_size / num_attention_heads
    assert not spec.tie_word_embeddings


@pytest.mark.parametrize("name", ["deepseek_v2, q latent", "deepseek_v3, MLA"])
def test_deepseek_router_keeps_an_fp32_copy_of_its_bf16_input(name):
    """``F.linear(hidden_states.type(torch.float32), ...)`` in a BF16 build: a census of
    the real CPU step finds the B·T·d FP32 copy under each MoE layer's ``mlp.gate`` —
    the closed form's ``router_copies`` — and no copy of the weight, which
    ``_keep_in_fp32_modules_strict`` keeps FP32."""
    from small_configs import FAMILIES

    from introspect.measure.census import census
    from introspect.refined.saved_feed_forward import router_copies

    raw = {**MLA, **FAMILIES}[name]
    keys = {k: v for k, v in raw.items() if k != "model_type"}
    cfg = transformers.AutoConfig.for_model(raw["model_type"], **keys, attn_implementation="sdpa")
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    x = torch.randint(0, raw["vocab_size"], (2, 64))
    cen = census(model, lambda: model(input_ids=x, labels=x).loss, tokens=128, seq_len=64)
    copies = [r for r in cen.rows if ".mlp.gate" in r[0] and r[1] == "_to_copy"]
    spec = spec_from_config(raw)
    setup = TrainingSetup(batch_size=2, seq_len=64, precision="bf16", device="cpu")
    moe = [k.feed_forward for k, n in spec.kinds for _ in range(n) if k.feed_forward.num_experts]
    assert [r[4] for r in copies] == [router_copies(spec, setup, ff) for ff in moe]
    assert all(r[3] == "torch.float32" and r[2] == (128, 256) for r in copies)
    fp32 = setup.replace(precision="fp32", activation_dtype="fp32")
    for other in (setup.replace(precision="amp"), fp32):
        assert router_copies(spec, other, moe[0]) == 0


@pytest.mark.parametrize("setup_name", list(SETUPS))
@pytest.mark.parametrize("name", list(MLA))
def test_refined_within_three_percent_of_the_dry_run(name, setup_name):
    from introspect import refined
    from introspect.measure import hf_models

    raw = MLA[name]
    spec = spec_from_config(raw)
    assert not spec.unmodelled
    setup = TrainingSetup(
        batch_size=2, seq_len=128, implementation="transformers", loop="labels",
        device="cpu", **SETUPS[setup_name],
    )  # fmt: skip
    measured, _ = hf_models.measure(raw, name, spec, setup, device="fake", census=False)
    estimate = refined.execution_estimate(spec, setup)
    assert estimate.total == pytest.approx(measured.peak_bytes, rel=0.03)


#: The two MLA-bearing types left to the dry run, at small shapes (transformers builds
#: them on meta; ``head_dim`` is LongCat's rotary width, ``pad_token_id`` Kimi's must fit V).
LEFT_TO_THE_DRY_RUN = {
    "longcat_flash": dict(
        model_type="longcat_flash", hidden_size=256, num_layers=2, num_attention_heads=8,
        vocab_size=1000, ffn_hidden_size=640, q_lora_rank=96, kv_lora_rank=64,
        qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32, head_dim=16, moe_topk=2,
        n_routed_experts=8, zero_expert_num=4, expert_ffn_hidden_size=64,
    ),
    "kimi_linear": dict(
        model_type="kimi_linear", hidden_size=256, num_hidden_layers=4,
        num_attention_heads=8, vocab_size=1000, intermediate_size=640, q_lora_rank=None,
        kv_lora_rank=64, qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32,
        num_experts=8, num_experts_per_tok=2, moe_intermediate_size=64, pad_token_id=0,
        linear_attn_config=dict(
            full_attn_layers=[4], kda_layers=[1, 2, 3], num_heads=8, head_dim=32,
            short_conv_kernel_size=4,
        ),
    ),
}  # fmt: skip


@pytest.mark.parametrize(
    ("model_type", "why"),
    [
        ("longcat_flash", "zero_expert_num identity experts"),
        ("kimi_linear", "per-channel decay"),
    ],
)
def test_the_types_left_to_the_dry_run_say_why_first(model_type, why):
    """LongCat-Flash (two MLA sub-blocks and a zero-expert shortcut MoE per layer) and
    Kimi Linear (Kimi Delta Attention beside MLA): the spec's first unmodelled part is
    the reason (``adapters/families/__init__.py`` NOT_MODELLED), the walker's follow."""
    from introspect import unmodelled

    spec = spec_from_config(LEFT_TO_THE_DRY_RUN[model_type])
    assert why in spec.unmodelled[0] and len(spec.unmodelled) >= 2
    assert why in unmodelled.refusal(spec)
