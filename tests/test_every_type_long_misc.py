"""Every-type rows that missed at T = 512 (``benchmarks/results/every-type-long.md``), one
test per mechanism fixed: the real transformers class at a small shape (the widths
``benchmarks/every_type.py`` shrinks to), the refined closed form against its dry run
(FakeTensorMode, :func:`introspect.measure.hf_models.measure`), B = 1, the labels loop and
AdamW as ``benchmarks/every_type.py``, at a T long enough that the saved activations,
not the optimizer step, set the peak.

* OLMo's ``OlmoLayerNorm`` has no parameter (``models/olmo/modeling_olmo.py`` l. 49-60):
  the walker reads its kind off the module class (``module_walk.weightless_norm``) and
  the class's FP32 copy is ``ClassFacts.layernorm_fp32_input``;
* FlexOlmo's blocks are OLMo2's (post-norms, FP32 x·rstd·weight, FP32 rotary tables);
* HyperCLOVA X's sandwich norms are Llama's RMSNorm: x·rstd kept at the stream's dtype;
* GPT-NeoX's fused ``query_key_value`` is read as fused: V's view keeps the whole
  output beside the rotary's new Q and K (``hf_saved._fused_qkv_kept``), also on the
  T×T path at B = 1, where ``matmul``'s fold of V is a view;
* XGLM's ``torch.max`` clamp keeps the masked scores, and a plain feed-forward's
  activation output is freed before its activation's backward;
* Kolibri1's and HY-V3's routers score an FP32 copy of their input (Kolibri1's weight is
  not kept FP32, so its cast is a copy too);
* NanoChat's parameterless RMSNorms keep no x·rstd (``ModelSpec.norm_weight``), its q/k
  norms are Llama 4's weightless L2 norm's saved set, and its final norm runs once more
  before the layers (``ClassFacts.norm_before_layers``).
"""

from __future__ import annotations

import pytest
from introspect.adapters.hf_config import spec_from_config
from test_every_type_gpt import SETUPS

from introspect.setup import TrainingSetup

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.slow

T = 512


def _estimate_and_dry_run(raw: dict, setup_name: str, seq_len: int = T):
    """The refined estimate and the dry run of the real class, the every-type step."""
    from introspect import refined
    from introspect.measure import hf_models

    spec = spec_from_config(raw)
    assert not spec.unmodelled
    setup = TrainingSetup(
        batch_size=1, seq_len=seq_len, implementation="transformers", loop="labels",
        device="cpu", optimizer="adamw", **SETUPS[setup_name],
    )  # fmt: skip
    measured, _ = hf_models.measure(
        raw, raw["model_type"], spec, setup, device="fake", census=False
    )
    return refined.estimate(spec, setup), measured


def _ratio(raw: dict, setup_name: str, seq_len: int = T) -> float:
    estimate, measured = _estimate_and_dry_run(raw, setup_name, seq_len)
    return estimate.total / measured.peak_bytes


_SMALL = dict(
    hidden_size=64, intermediate_size=168, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=4, vocab_size=512, max_position_embeddings=4096,
    pad_token_id=0, bos_token_id=1, eos_token_id=2,
)  # fmt: skip
OLMO = dict(_SMALL, model_type="olmo")
FLEX_OLMO = dict(_SMALL, model_type="flex_olmo", num_experts=4, num_experts_per_tok=2)
HYPERCLOVAX = dict(_SMALL, model_type="hyperclovax")
GPT_NEOX = dict(
    model_type="gpt_neox", hidden_size=64, intermediate_size=256, num_hidden_layers=4,
    num_attention_heads=4, vocab_size=512, max_position_embeddings=4096,
)  # fmt: skip


#: XGLM at the widths benchmarks/every_type.py shrinks to (f = 64·d: its feed-forward
#: backward sets the FP32 eager peak); dropout off, so the rows test the two mechanisms.
XGLM = dict(
    model_type="xglm", d_model=64, ffn_dim=4096, num_layers=4, attention_heads=4,
    vocab_size=512, max_position_embeddings=4096, dropout=0.0, attention_dropout=0.0,
    activation_dropout=0.0, pad_token_id=1, bos_token_id=0, eos_token_id=2,
)  # fmt: skip


def test_olmo_weightless_layernorm_is_read_as_a_layernorm() -> None:
    spec = spec_from_config(OLMO)
    assert spec.norm == "layernorm"
    assert not any("assumed RMSNorm" in a for a in spec.assumptions)


@pytest.mark.parametrize("setup_name", ["bf16 sdpa", "fp32 eager"])
def test_olmo_fp32_layernorm_copy_matches_the_dry_run(setup_name: str) -> None:
    ratio = _ratio(OLMO, setup_name)
    assert abs(ratio - 1) < 0.01, ratio


def test_flex_olmo_runs_olmo2_blocks() -> None:
    ratio = _ratio(FLEX_OLMO, "bf16 sdpa")
    assert abs(ratio - 1) < 0.01, ratio


def test_hyperclovax_sandwich_norms_keep_x_rstd_at_the_stream_dtype() -> None:
    ratio = _ratio(HYPERCLOVAX, "bf16 sdpa")
    assert abs(ratio - 1) < 0.01, ratio


def test_gpt_neox_query_key_value_is_read_as_fused() -> None:
    assert spec_from_config(GPT_NEOX).fused_linears == ("qkv",)


@pytest.mark.parametrize("setup_name", ["bf16 sdpa", "fp32 eager"])
def test_gpt_neox_fused_qkv_storage_kept_by_v(setup_name: str) -> None:
    ratio = _ratio(GPT_NEOX, setup_name)
    assert abs(ratio - 1) < 0.02, ratio


@pytest.mark.parametrize("setup_name", ["fp32 eager", "amp ckpt"])
def test_xglm_clamped_scores_and_plain_ffn_backward(setup_name: str) -> None:
    """XGLM's ``torch.max`` keeps the masked scores (``ClassFacts.scores_clamped``), and
    inside a plain feed-forward's activation backward the activation's output is freed
    (``execution._after_down_projection``)."""
    from introspect import refined
    from introspect.measure import hf_models

    spec = spec_from_config(XGLM)
    setup = TrainingSetup(
        batch_size=1, seq_len=T, implementation="transformers", loop="labels",
        device="cpu", optimizer="adamw", **SETUPS[setup_name],
    )  # fmt: skip
    measured, _ = hf_models.measure(XGLM, "xglm", spec, setup, device="fake", census=False)
    ratio = refined.estimate(spec, setup).total / measured.peak_bytes
    assert abs(ratio - 1) < 0.015, ratio


FALCON = dict(
    model_type="falcon", hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
    vocab_size=512, max_position_embeddings=4096,
)  # fmt: skip


def test_falcon_math_kernel_keeps_its_fp32_copies_not_the_fused_views() -> None:
    """Falcon's one K/V head sends BF16 SDPA to the math kernel, which upcasts Q, K and V:
    the fused query_key_value output is not held by V's view."""
    ratio = _ratio(FALCON, "bf16 sdpa")
    assert abs(ratio - 1) < 0.01, ratio


KOLIBRI1 = dict(
    model_type="kolibri1", vocab_size=512, hidden_size=64, num_hidden_layers=5,
    num_attention_heads=4, num_key_value_heads=1, head_dim=16, hidden_act="silu",
    max_position_embeddings=4096, sliding_window=513, moe_intermediate_size=8,
    num_experts_per_tok=2, num_local_experts=4, shared_expert_intermediate_size=8,
    layer_types=["sliding_attention"] * 4 + ["full_attention"],
)  # fmt: skip
HY_V3 = dict(
    model_type="hy_v3", vocab_size=512, hidden_size=64, intermediate_size=208,
    num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=1, head_dim=16,
    max_position_embeddings=4096, num_experts=4, num_experts_per_tok=2,
    num_shared_experts=1, moe_intermediate_size=24,
    mlp_layer_types=["dense", "sparse", "sparse", "sparse"],
)  # fmt: skip
NANOCHAT = dict(
    model_type="nanochat", vocab_size=512, hidden_size=64, intermediate_size=680,
    num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4,
    max_position_embeddings=2048, hidden_act="relu2", final_logit_softcapping=15.0,
)  # fmt: skip


@pytest.mark.parametrize("raw", [KOLIBRI1, HY_V3], ids=["kolibri1", "hy_v3"])
def test_router_fp32_input_copy(raw: dict) -> None:
    ratio = _ratio(raw, "bf16 sdpa")
    assert abs(ratio - 1) < 0.01, ratio


def test_nanochat_weightless_norms_are_read_off_the_module_tree() -> None:
    spec = spec_from_config(NANOCHAT)
    assert spec.norm == "rmsnorm" and not spec.norm_weight
    assert spec.qk_norm == "l2"


@pytest.mark.parametrize("setup_name", ["bf16 sdpa", "fp32 eager", "amp ckpt"])
def test_nanochat_weightless_norms_match_the_dry_run(setup_name: str) -> None:
    ratio = _ratio(NANOCHAT, setup_name)
    assert abs(ratio - 1) < 0.01, ratio


#: GLM-4.7-Flash's MLA with V as wide as Q/K (nope 32 + rope 16 = v 48): the CPU's fused
#: SDPA kernel runs (no math composition), keeping V's view of kv_b's whole output and
#: the head-major context twice.
GLM_LITE_WIDE_V = dict(
    model_type="glm4_moe_lite", hidden_size=64, intermediate_size=128,
    moe_intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=4, vocab_size=256, q_lora_rank=48, kv_lora_rank=32,
    qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=48, n_routed_experts=4,
    num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1, n_group=1,
    topk_group=1, max_position_embeddings=1024,
)  # fmt: skip


def test_mla_fused_sdpa_keeps_kv_b_output_and_the_context_twice() -> None:
    ratio = _ratio(GLM_LITE_WIDE_V, "bf16 sdpa")
    assert abs(ratio - 1) < 0.01, ratio


GPT_NEOX_JAPANESE = dict(
    model_type="gpt_neox_japanese", vocab_size=512, hidden_size=64, num_hidden_layers=4,
    num_attention_heads=4, intermediate_multiple_size=4, hidden_act="gelu",
    max_position_embeddings=2048, attention_dropout=0.1, hidden_dropout=0.0,
    bos_token_id=511, eos_token_id=511,
)  # fmt: skip
FLINT = dict(
    model_type="flint", vocab_size=512, hidden_size=64, intermediate_size=192,
    num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=1, head_dim=16,
    hidden_act="silu", max_position_embeddings=4096, sliding_window=513,
    moe_intermediate_size=16, shared_expert_intermediate_size=32, num_experts_per_tok=2,
    num_experts=4, mlp_only_layers=[0, 1],
    layer_types=["full_attention"] * 2 + ["sliding_attention"] * 2,
)  # fmt: skip


@pytest.mark.parametrize("raw", [GPT_NEOX_JAPANESE, FLINT], ids=["gpt_neox_japanese", "flint"])
def test_top_layer_attention_forward_moment(raw: dict) -> None:
    """The step's peak is the top layer's forward inside its eager attention, where the
    class holds two more T×T tensors than Llama's (``ClassFacts.
    attention_forward_inflight``): the closed form counts that moment
    (``execution.attention_forward``)."""
    estimate, measured = _estimate_and_dry_run(raw, "fp32 eager")
    assert estimate.execution.meta["peak_phase"] == "forward"
    assert measured.peak_phase == "forward"
    ratio = estimate.total / measured.peak_bytes
    assert abs(ratio - 1) < 0.01, ratio
