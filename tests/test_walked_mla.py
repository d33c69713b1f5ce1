"""Multi-head latent attention read by the module walker (``adapters/module_roles.py``
``MLA_KEYS``, ``_read_mla``; ``adapters/module_walk.py`` ``mla_attention``): the types
whose class is DeepSeek-V3's MLA but that no hand-written reader covers (Sarvam-MLA
builds ``DeepseekV3ForCausalLM`` itself, GLM-4.7-Flash's ``Glm4MoeLiteAttention`` and
Youtu's ``YoutuAttention`` subclass ``DeepseekV3Attention`` unchanged). The spec's
attention is ``Attention(kind="mla")`` with the config's ranks and head widths, the same
the deepseek_v3 reader gives; its closed form is checked against the dry run of the real
class (FakeTensorMode). The MLA variants with parts the kind does not save (a DSA
indexer, a gate) stay not modelled, their NOT_MODELLED line first."""

from __future__ import annotations

import pytest
from introspect.adapters import module_roles as roles
from introspect.adapters.families import NOT_MODELLED
from introspect.adapters.hf_config import spec_from_config
from test_every_type_gpt import SETUPS, _ratio_to_dry_run  # the every-type step, T = 64

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.slow

#: A small DeepSeek-V3-style MLA stack: one dense layer, then routed + shared experts;
#: v_head_dim unlike qk_nope_head_dim so the walker must split kv_b's rows right.
_MLA = dict(
    hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=4, vocab_size=256, kv_lora_rank=32,
    qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=24, n_routed_experts=4,
    num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1, n_group=1,
    topk_group=1, max_position_embeddings=1024,
)  # fmt: skip
#: Sarvam-MLA: a plain q_proj (q_lora_rank null, its config's default).
SARVAM = dict(_MLA, model_type="sarvam_mla", q_lora_rank=None)
#: GLM-4.7-Flash: the query through its own latent (q_a_proj, q_a_layernorm, q_b_proj).
GLM_LITE = dict(_MLA, model_type="glm4_moe_lite", q_lora_rank=48)
_MLA_KEYS = ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")


def _built_count(raw: dict) -> int:
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**raw)
        )
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("raw", [SARVAM, GLM_LITE], ids=["sarvam_mla", "glm4_moe_lite"])
def test_a_walked_mla_has_the_configs_ranks_and_head_widths(raw: dict) -> None:
    spec = spec_from_config(raw)
    assert not spec.unmodelled
    assert spec.norms_per_layer == 2  # the latent norms are the attention's, not the block's
    for kind, _ in spec.kinds:
        att = kind.attention
        assert att.kind == "mla"
        assert att.q_lora_rank == raw["q_lora_rank"]
        assert {k: getattr(att, k) for k in _MLA_KEYS} == {k: raw[k] for k in _MLA_KEYS}
        assert att.num_attention_heads == att.num_key_value_heads == raw["num_attention_heads"]
    assert spec.n_params == _built_count(raw)


@pytest.mark.parametrize("raw", [SARVAM, GLM_LITE], ids=["sarvam_mla", "glm4_moe_lite"])
def test_the_walked_attention_is_the_deepseek_v3_readers(raw: dict) -> None:
    """The same config read as deepseek_v3 by the hand-written reader
    (``adapters/families/deepseek.py`` ``_mla``) gives the same attention, layer by layer."""
    walked = spec_from_config(raw)
    read = spec_from_config(dict(raw, model_type="deepseek_v3", num_nextn_predict_layers=0))
    assert [k.attention for k, _ in walked.kinds] == [k.attention for k, _ in read.kinds]


@pytest.mark.parametrize("setup_name", ["fp32 eager", "amp ckpt"])
@pytest.mark.parametrize("raw", [SARVAM, GLM_LITE], ids=["sarvam_mla", "glm4_moe_lite"])
def test_a_walked_mla_is_within_three_percent_of_the_dry_run(raw: dict, setup_name: str) -> None:
    assert setup_name in SETUPS
    ratio = _ratio_to_dry_run(raw, setup_name)
    assert abs(ratio - 1) < 0.03, ratio


def test_the_roles_read_mla_widths_from_the_shapes() -> None:
    """Block 0 of a DeepSeek-V3 MLA block as (relative name, shape, owner class): the
    latent norms are attention parts, kv_b's and q_b's rows are read by the side that is
    not the rank."""
    d, r_q, r_kv, h, rope, nope, v = 64, 48, 32, 4, 16, 32, 24
    entries = [
        ("self_attn.q_a_proj.weight", (r_q, d), "Linear"),
        ("self_attn.q_a_layernorm.weight", (r_q,), "DeepseekV3RMSNorm"),
        ("self_attn.q_b_proj.weight", (h * (nope + rope), r_q), "Linear"),
        ("self_attn.kv_a_proj_with_mqa.weight", (r_kv + rope, d), "Linear"),
        ("self_attn.kv_a_layernorm.weight", (r_kv,), "DeepseekV3RMSNorm"),
        ("self_attn.kv_b_proj.weight", (h * (nope + v), r_kv), "Linear"),
        ("self_attn.o_proj.weight", (d, h * v), "Linear"),
        ("mlp.gate_proj.weight", (128, d), "Linear"),
        ("mlp.up_proj.weight", (128, d), "Linear"),
        ("mlp.down_proj.weight", (d, 128), "Linear"),
        ("input_layernorm.weight", (d,), "DeepseekV3RMSNorm"),
        ("post_attention_layernorm.weight", (d,), "DeepseekV3RMSNorm"),
    ]
    found = roles.classify_block(entries, d)
    assert found.mla == roles.MLAWidths(
        q_lora_rank=r_q,
        q_width=h * (nope + rope),
        kv_a_width=r_kv + rope,
        kv_lora_rank=r_kv,
        kv_b_width=h * (nope + v),
        o_width=h * v,
    )
    assert found.norms_per_layer == 2
    norm_role = found.roles["self_attn.kv_a_layernorm.weight"]
    assert norm_role == ("attention.mla.kv_a_norm", "attention")
    assert roles.unrecognised(entries) == []


#: DeepSeek-V3.2: DeepSeek-V3's MLA plus the DSA indexer (``indexer.wq_b`` …).
DEEPSEEK_V32 = dict(
    _MLA, model_type="deepseek_v32", q_lora_rank=48, index_n_heads=2, index_head_dim=32,
    index_topk=16,
)  # fmt: skip


def test_an_mla_with_an_indexer_stays_not_modelled() -> None:
    spec = spec_from_config(DEEPSEEK_V32)
    assert spec.unmodelled[0] == NOT_MODELLED["deepseek_v32"]
    assert any("indexer.wq_b" in part for part in spec.unmodelled[1:])
    assert spec.n_params == _built_count(DEEPSEEK_V32)


@pytest.mark.parametrize("setup_name", ["fp32 eager", "amp ckpt"])
def test_mla_at_t_256_where_the_probabilities_dominate(setup_name: str) -> None:
    """B = 2, T = 256: the T×T probabilities outweigh the weights. At the attention
    backward of a 16-bit eager step the probabilities' copy probs·V alone saved is freed
    (``implementations.TransformersAroundReference.at_attention_backward``; autocast with
    checkpointing was 1.101 with it counted)."""
    from introspect import refined
    from introspect.measure import hf_models
    from introspect.setup import TrainingSetup

    spec = spec_from_config(SARVAM)
    setup = TrainingSetup(
        batch_size=2, seq_len=256, implementation="transformers", loop="labels",
        device="cpu", optimizer="adamw", **SETUPS[setup_name],
    )  # fmt: skip
    measured, _ = hf_models.measure(SARVAM, "sarvam_mla", spec, setup, device="fake", census=False)
    ratio = refined.estimate(spec, setup).total / measured.peak_bytes
    assert abs(ratio - 1) < 0.03, ratio


#: DeepSeek-V3's own reader on the small MLA stack, q through its latent.
DEEPSEEK_V3 = dict(
    _MLA, model_type="deepseek_v3", q_lora_rank=48, num_nextn_predict_layers=0,
    max_position_embeddings=4096,
)  # fmt: skip


def _measured_ratio(raw: dict, setup_name: str, seq_len: int) -> float:
    from introspect import refined
    from introspect.measure import hf_models
    from introspect.setup import TrainingSetup

    spec = spec_from_config(raw)
    setup = TrainingSetup(
        batch_size=2, seq_len=seq_len, implementation="transformers", loop="labels",
        device="cpu", optimizer="adamw", **SETUPS[setup_name],
    )  # fmt: skip
    where = raw["model_type"]
    measured, _ = hf_models.measure(raw, where, spec, setup, device="fake", census=False)
    return refined.estimate(spec, setup).total / measured.peak_bytes


@pytest.mark.parametrize(
    ("setup_name", "seq_len"),
    [("fp32 eager", 256), ("bf16 sdpa", 512), ("amp ckpt", 512)],
)
def test_deepseek_v3_mla_at_longer_t_within_one_percent(setup_name: str, seq_len: int) -> None:
    """B = 2 and T = 256 or 512, where the T×T terms and the attention backward's peak
    dominate (the peak is the last layer's softmax backward): V freed by probs·V's
    backward, V's gradient at ``h·v_head_dim``, the rotary tables once at
    ``qk_rope_head_dim``, the latent norms' FP32 input copies in a 16-bit step, and CPU
    SDPA's math composition keeping FP32 Q·√s, Kᵀ·√s, V and probabilities with no 16-bit
    copy (``reference.math_sdpa_bytes``). Before: FP32 eager T=256 1.022, bf16 SDPA
    T=512 1.054, autocast with checkpointing T=512 0.991."""
    ratio = _measured_ratio(DEEPSEEK_V3, setup_name, seq_len)
    assert abs(ratio - 1) < 0.01, ratio


def test_math_sdpa_keeps_fp32_q_k_v_and_no_16_bit_probabilities() -> None:
    """bf16 SDPA on CPU with MLA's unequal head widths runs the math composition: its
    saved Q, K, V are FP32 at their widths, and there is no ``probs_cast`` term."""
    from introspect.refined import reference
    from introspect.setup import TrainingSetup

    spec = spec_from_config(DEEPSEEK_V3)
    setup = TrainingSetup(
        batch_size=2, seq_len=128, implementation="transformers", device="cpu",
        **SETUPS["bf16 sdpa"],
    )  # fmt: skip
    kind = spec.kinds[0][0]
    att = kind.attention
    assert reference.math_sdpa(setup, kind)
    terms = reference.per_layer(spec, setup, kind)
    BT = 2 * 128
    assert terms["attention/linear/q"] == BT * att.q_dim * 4
    assert terms["attention/linear/k"] == BT * att.k_dim * 4
    assert terms["attention/linear/v"] == BT * att.v_dim * 4
    assert "attention/quadratic/probs_cast" not in terms


@pytest.mark.parametrize("name", ["deepseek_v2, q latent", "minicpm3, multipliers"])
def test_the_other_mla_classes_at_t_256_in_bf16_sdpa(name: str) -> None:
    """DeepSeek-V2's and MiniCPM3's MLA (``tests/small_configs.py`` ``MLA``) under bf16
    SDPA at B = 2, T = 256: the same math-SDPA saved set and V's gradient width (before:
    1.048 and 1.050, the 16-bit probabilities and BF16 Q/K/V counted)."""
    from small_configs import MLA

    raw = dict(MLA[name], max_position_embeddings=4096)
    ratio = _measured_ratio(raw, "bf16 sdpa", 256)
    assert abs(ratio - 1) < 0.01, ratio
