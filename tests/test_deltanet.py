"""The Gated DeltaNet closed form (:mod:`introspect.refined.deltanet`) against a census of
transformers' real ``Qwen3NextGatedDeltaNet`` (its torch fallbacks: no ``fla``, no
``causal_conv1d``): the distinct storages autograd saves during one forward, parameters
and the module's input left out, must equal the closed form to the byte — in FP32, BF16
and under autocast, with T padded to the chunk (5, 100, 130), a multiple of it (64, 128)
and one to three chunks; and Qwen3.5's ``Qwen3_5GatedDeltaNet`` /
``Qwen3_5MoeGatedDeltaNet`` (four projections, ``linear_projections="qkv_z_b_a"``) the
same way."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from hf_steps import mixer_saved_bytes  # noqa: E402

from introspect._record import replace  # noqa: E402
from introspect.layers import Attention  # noqa: E402
from introspect.refined import deltanet  # noqa: E402
from introspect.setup import TrainingSetup  # noqa: E402

HIDDEN = 64


def _layer(nk: int, nv: int, dk: int, dv: int):
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet

    cfg = transformers.Qwen3NextConfig(
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        linear_num_key_heads=nk,
        linear_num_value_heads=nv,
        linear_key_head_dim=dk,
        linear_value_head_dim=dv,
    )
    torch.manual_seed(0)
    return cfg, Qwen3NextGatedDeltaNet(cfg, layer_idx=0)


def _census_bytes(precision: str, B: int, T: int, heads=(2, 4), widths=(16, 16)) -> int:
    """Bytes the real layer saves (:func:`hf_steps.mixer_saved_bytes`)."""
    _, layer = _layer(*heads, *widths)
    return mixer_saved_bytes(layer, "linear_attn", precision, B, T, HIDDEN)


def _closed_form(precision: str, B: int, T: int, heads=(2, 4), widths=(16, 16)) -> dict:
    cfg, _ = _layer(*heads, *widths)
    att = Attention(
        kind="linear",
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        linear_num_key_heads=heads[0],
        linear_num_value_heads=heads[1],
        linear_key_head_dim=widths[0],
        linear_value_head_dim=widths[1],
        linear_conv_kernel_dim=cfg.linear_conv_kernel_dim,
    )
    setup = TrainingSetup(batch_size=B, seq_len=T, precision=precision)
    return deltanet.saved(att, setup, HIDDEN)


@pytest.mark.parametrize("precision", ["fp32", "bf16", "amp"])
@pytest.mark.parametrize("T", [5, 64, 100, 130])
@pytest.mark.parametrize("B", [1, 2])
def test_gated_deltanet_saved_set_equals_the_census(precision, T, B):
    ours = _closed_form(precision, B, T)
    assert all(k.startswith(("attention/linear/", "attention/deltanet/")) for k in ours)
    assert sum(ours.values()) == _census_bytes(precision, B, T)


@pytest.mark.parametrize("T", [64, 128, 100])
@pytest.mark.parametrize("heads,widths", [((2, 4), (16, 16)), ((2, 2), (16, 8))])
def test_fp32_layouts_unpadded_and_with_equal_heads(T, heads, widths):
    """FP32 without autocast: ``.to(torch.float32)`` copies nothing, so an unpadded T
    (64, 128) leaves q and k in their strided layout and the chunk products copy them;
    with as many key heads as value heads q, k and z are views of the projections."""
    ours = _closed_form("fp32", 2, T, heads, widths)
    assert sum(ours.values()) == _census_bytes("fp32", 2, T, heads, widths)
    # Copies where (B, n_v, N) cannot fold: unpadded, and with n_k = n_v several chunks.
    copies = T == 128 or (T == 64 and heads[0] != heads[1])
    assert (ours.get("attention/deltanet/matmul_copies", 0) > 0) == copies


def test_chunks_and_padding_grow_the_kernel_terms():
    """One more token past a chunk boundary adds a whole chunk of c×c matrices."""
    at, past = _closed_form("fp32", 1, 64), _closed_form("fp32", 1, 65)
    per_chunk = 4 * 4 * 64 * 64 * 5  # n_v heads, c², five FP32 chunk matrices
    assert past["attention/deltanet/chunk_matrices"] - at["attention/deltanet/chunk_matrices"] == (
        per_chunk
    )


def _qwen3_5(nk: int, nv: int, dk: int, dv: int, moe: bool = False):
    """Qwen3.5's mixer (``Qwen3_5GatedDeltaNet``, or the MoE model's
    ``Qwen3_5MoeGatedDeltaNet``, the same code) and its attention as the reader gives it:
    in_proj_qkv, in_proj_z, in_proj_b, in_proj_a (``linear_projections="qkv_z_b_a"``)."""
    if moe:
        from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import (
            Qwen3_5MoeGatedDeltaNet as Mixer,
        )

        make = transformers.Qwen3_5MoeTextConfig
    else:
        from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5GatedDeltaNet as Mixer

        make = transformers.Qwen3_5TextConfig
    cfg = make(
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        linear_num_key_heads=nk,
        linear_num_value_heads=nv,
        linear_key_head_dim=dk,
        linear_value_head_dim=dv,
    )
    torch.manual_seed(0)
    att = Attention(
        kind="linear",
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        linear_num_key_heads=nk,
        linear_num_value_heads=nv,
        linear_key_head_dim=dk,
        linear_value_head_dim=dv,
        linear_conv_kernel_dim=cfg.linear_conv_kernel_dim,
        linear_projections="qkv_z_b_a",
    )
    return Mixer(cfg, layer_idx=0), att


@pytest.mark.parametrize("precision", ["fp32", "bf16", "amp"])
@pytest.mark.parametrize("T", [5, 64, 100, 130])
@pytest.mark.parametrize("B", [1, 2])
@pytest.mark.parametrize("heads", [(2, 4, 16, 16), (2, 2, 16, 8)])
def test_qwen3_5_deltanet_saved_set_equals_the_census(precision, T, B, heads):
    """Qwen3.5's four projections: conv1d keeps in_proj_qkv's own output (no torch.cat),
    the gate is in_proj_z's own output (so with n_k = n_v in FP32 its SiLU keeps B·T·V,
    not a fused B·T·2(K+V) storage), and under autocast four casts of the input."""
    layer, att = _qwen3_5(*heads)
    setup = TrainingSetup(batch_size=B, seq_len=T, precision=precision)
    closed = deltanet.saved(att, setup, HIDDEN)
    assert sum(closed.values()) == mixer_saved_bytes(layer, "linear_attn", precision, B, T, HIDDEN)
    fused = deltanet.saved(replace(att, linear_projections="qkvz"), setup, HIDDEN)
    casts = closed.get("attention/linear/input_casts", 0)
    assert casts == (2 * fused["attention/linear/input_casts"] if precision == "amp" else 0)
    if precision == "fp32" and heads[0] == heads[1]:  # the fused layout's z is a view
        assert closed["attention/deltanet/gated_norm"] < fused["attention/deltanet/gated_norm"]


@pytest.mark.parametrize("precision", ["fp32", "bf16", "amp"])
@pytest.mark.parametrize("T", [64, 100])
def test_qwen3_5_moe_deltanet_is_the_same_saved_set(precision, T):
    layer, att = _qwen3_5(2, 4, 16, 16, moe=True)
    setup = TrainingSetup(batch_size=2, seq_len=T, precision=precision)
    closed = sum(deltanet.saved(att, setup, HIDDEN).values())
    assert closed == mixer_saved_bytes(layer, "linear_attn", precision, 2, T, HIDDEN)
