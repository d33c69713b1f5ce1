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
  activation output is freed before its activation's backward.
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


def _ratio(raw: dict, setup_name: str, seq_len: int = T) -> float:
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
    return refined.estimate(spec, setup).total / measured.peak_bytes


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
