"""Gemma 4's every-type rows (``gemma4_unified_text``): the real transformers class at a
small shape (the widths ``benchmarks/every_type.py`` shrinks to), the refined closed form
against its dry run (FakeTensorMode, :func:`introspect.measure.hf_models.measure`) within
±3% in the three every-type setups. What the class keeps beyond Llama's
(``models/gemma4_unified/modeling_gemma4_unified.py``): RMSNorm's FP32 ``x·rstd`` and
``torch.pow(mean_squared, -0.5)`` (two FP32 values a row), the weights' ``.float()``
copies under BF16, the weightless V norm, and one rotary table pair per layer type at its
own head_dim (:data:`introspect.refined.transformers_classes.CLASSES`)."""

from __future__ import annotations

import pytest
from introspect.adapters.hf_config import spec_from_config
from test_every_type_gpt import _ratio_to_dry_run

from introspect.refined import hf_saved

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

#: Five sliding layers at head_dim 16 and a full-attention layer at global_head_dim 32
#: (proportional RoPE), as the every-type row's shrunk config.
GEMMA4 = dict(
    model_type="gemma4_unified_text", vocab_size=512, hidden_size=64, intermediate_size=256,
    num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
    global_head_dim=32, sliding_window=1024, max_position_embeddings=4096,
    layer_types=["sliding_attention"] * 5 + ["full_attention"],
)  # fmt: skip


def test_the_rotary_tables_are_one_pair_per_layer_type():
    """``position_embeddings[layer_type]``: the sliding layers' head_dim-16 pair and the
    full layer's head_dim-32 pair, 2·T·(16 + 32) values."""
    spec = spec_from_config(dict(GEMMA4))
    assert sorted(spec.for_kind(k).head_size for k, _ in spec.kinds) == [16, 32]
    assert hf_saved._table_widths(spec) == 48


@pytest.mark.slow
@pytest.mark.parametrize("setup_name", ["fp32 eager", "amp ckpt", "bf16 sdpa"])
def test_gemma4_closed_form_within_three_percent_of_the_dry_run(setup_name):
    ratio = _ratio_to_dry_run(dict(GEMMA4), setup_name)
    assert 0.97 <= ratio <= 1.03, f"{setup_name}: {ratio:.4f}"
