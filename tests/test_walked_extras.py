"""Parts the module walker reads off a built class beyond its blocks' parameters
(issue 22, the types nobody hand-modelled): the config's sliding layers
(``adapters/hf_transformers.py`` ``sliding_windows``), a fused gate-and-up projection
twice as wide as down's input (``adapters/module_roles.py`` ``_read_ffn``), a norm on the
embedding output and a head transform before the output projection
(``adapters/module_walk.py`` ``outside_norm``, ``sibling``), and SDPA's explicit mask at
T equal to the window (``introspect/refined/hf_saved.py`` ``short_window``). Each checked
against the dry run of the real transformers class (FakeTensorMode) at a small shape."""

from __future__ import annotations

import pytest
from introspect.adapters.hf_config import spec_from_config
from test_every_type_gpt import SETUPS, _ratio_to_dry_run  # the every-type step, T = 64

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.slow

#: ModernBERT-decoder at the widths benchmarks/every_type.py shrinks to: its default
#: sliding_window (64, half of local_attention) equals T, so SDPA gets an explicit mask in
#: the two sliding layers though it hides no key.
MODERNBERT = dict(
    model_type="modernbert-decoder", hidden_size=64, intermediate_size=96,
    num_hidden_layers=4, num_attention_heads=4, vocab_size=512,
    layer_types=["full_attention", "sliding_attention", "sliding_attention", "full_attention"],
    sliding_window=64, max_position_embeddings=4096,
    pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2,
)  # fmt: skip


def test_modernbert_decoder_reads_its_windows_glu_and_outside_norms() -> None:
    spec = spec_from_config(MODERNBERT)
    kinds = [(k.attention.kind, k.attention.window, n) for k, n in spec.kinds]
    assert kinds == [("full", None, 1), ("sliding", 64, 2), ("full", None, 1)]
    ff = spec.kinds[0][0].feed_forward
    assert (ff.ffn, ff.intermediate_size) == ("gated", 96)  # Wi: 64 → 192 = 2·96
    assert spec.embedding_norm and spec.head_transform
    with torch.device("meta"):
        built = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**MODERNBERT)
        )
    assert spec.n_params == sum(p.numel() for p in built.parameters())


@pytest.mark.parametrize("setup_name", list(SETUPS))
def test_modernbert_decoder_within_one_percent_of_the_dry_run(setup_name: str) -> None:
    ratio = _ratio_to_dry_run(MODERNBERT, setup_name)
    assert abs(ratio - 1) < 0.01, ratio


def test_an_lfm2_norm_named_for_the_embedding_is_its_final_norm() -> None:
    """LFM2's only norm outside the blocks is called ``embedding_norm`` but runs after them
    (``models/lfm2/modeling_lfm2.py`` l. 463, 523): not an embedding norm."""
    raw = dict(
        model_type="lfm2", hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, vocab_size=512,
        layer_types=["conv", "full_attention", "conv", "full_attention"],
    )  # fmt: skip
    spec = spec_from_config(raw)
    assert not spec.embedding_norm and not spec.head_transform


@pytest.mark.parametrize("window", [63, 64, 65])
def test_sdpa_gets_the_window_as_a_mask_from_t_equal_to_the_window(window: int) -> None:
    """transformers skips the sliding mask only while ``kv_length < sliding_window``
    (``masking_utils.py`` ``_ignore_causal_mask_sdpa``): at T = 64 the windows 63 and 64
    both give SDPA an explicit mask (kept per layer), 65 none — and with one K/V head the
    fused kernel keeps K and V at their own width."""
    raw = dict(
        model_type="mistral", hidden_size=64, intermediate_size=224, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=1, vocab_size=512, sliding_window=window,
        max_position_embeddings=4096,
    )  # fmt: skip
    ratio = _ratio_to_dry_run(raw, "bf16 sdpa")
    assert abs(ratio - 1) < 0.005, ratio


def test_a_walked_config_with_sliding_layers_gets_their_mask() -> None:
    """Cohere 2 (read by the module walker) with its window below T: the three sliding
    layers' SDPA masks are counted (they were missed while the walked layers read as full
    attention: 0.990 of the dry run)."""
    raw = dict(
        model_type="cohere2", hidden_size=64, intermediate_size=176, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=1, vocab_size=512, sliding_window=32,
        layer_types=["sliding_attention"] * 3 + ["full_attention"],
        max_position_embeddings=4096,
    )  # fmt: skip
    spec = spec_from_config(raw)
    assert [k.attention.kind for k, _ in spec.kinds] == ["sliding", "full"]
    ratio = _ratio_to_dry_run(raw, "bf16 sdpa")
    assert abs(ratio - 1) < 0.005, ratio
