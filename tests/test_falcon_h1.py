"""Falcon-H1 in closed form (issue 22, part 2): attention and a Mamba-2 mixer in parallel in
every block (``FalconH1DecoderLayer``), a layer kind with a ``mixer`` beside its attention.
The mixer's saved set with the muP multipliers (introspect/refined/falcon_h1.py) against a
census of transformers' ``FalconH1Mixer``; the exact count against the meta-device build
(the default config's 8,514,961,408 included); the closed form of the stack against the
dry run of the real class in FP32 eager, autocast with checkpointing and BF16 SDPA, within
±3%; bad sizes are one line naming the file and key."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from hf_steps import mixer_saved_bytes  # noqa: E402
from introspect.adapters.hf_config import spec_from_config  # noqa: E402
from mixer_stacks import SETUPS, count_is_the_meta_build, measured, one_line_error  # noqa: E402

from introspect.cli import main  # noqa: E402
from introspect.layers import Attention  # noqa: E402
from introspect.refined import falcon_h1  # noqa: E402
from introspect.setup import TrainingSetup  # noqa: E402

HIDDEN = 64

#: Falcon-H1 at a small shape: two hybrid layers, 4 heads (2 K/V), a 128-wide mixer of 8
#: heads of 16, one group of 8 states, chunks of 16.
FALCON_H1 = {
    "model_type": "falcon_h1",
    "hidden_size": HIDDEN,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "intermediate_size": 96,
    "mamba_d_ssm": 128,
    "mamba_n_heads": 8,
    "mamba_d_head": 16,
    "mamba_d_state": 8,
    "mamba_n_groups": 1,
    "mamba_chunk_size": 16,
    "pad_token_id": 0,
}
#: Non-default multipliers: they scale, and keep nothing more.
MULTIPLIERS = {
    "embedding_multiplier": 5.0,
    "lm_head_multiplier": 0.5,
    "mlp_multipliers": [0.7, 1.3],
    "key_multiplier": 0.9,
    "attention_in_multiplier": 1.1,
    "attention_out_multiplier": 0.8,
    "ssm_in_multiplier": 1.2,
    "ssm_out_multiplier": 0.6,
    "ssm_multipliers": [0.5, 1.5, 1.0, 2.0, 0.25],
}


def _mixer(heads: int, head_dim: int, groups: int, state: int, chunk: int, norm: bool):
    from transformers.models.falcon_h1.modeling_falcon_h1 import (
        FalconH1Mixer,
        compute_mup_vector,
    )

    cfg = transformers.FalconH1Config(
        hidden_size=HIDDEN,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        mamba_d_ssm=heads * head_dim,
        mamba_n_heads=heads,
        mamba_d_head=head_dim,
        mamba_d_state=state,
        mamba_n_groups=groups,
        mamba_chunk_size=chunk,
        mamba_rms_norm=norm,
        **{k: v for k, v in MULTIPLIERS.items() if k.startswith("ssm")},
    )
    torch.manual_seed(0)
    layer = FalconH1Mixer(cfg, 0)
    # FalconH1Model registers the muP vector on every mixer (a non-persistent buffer).
    layer.register_buffer("mup_vector", compute_mup_vector(cfg), persistent=False)
    att = Attention(
        kind="mamba2",
        num_attention_heads=1,
        num_key_value_heads=1,
        head_dim=1,
        mamba_num_heads=heads,
        mamba_head_dim=head_dim,
        mamba_state_size=state,
        mamba_n_groups=groups,
        mamba_conv_kernel=cfg.mamba_d_conv,
        mamba_chunk_size=chunk,
        mamba_gated_norm=norm,
        mamba_mup=True,
    )
    return layer, att


@pytest.mark.parametrize("precision", ["fp32", "bf16", "amp"])
@pytest.mark.parametrize(
    "B,T", [(3, 20), (1, 16), (1, 5), (2, 40)]
)  # padded, one chunk, one row and one chunk, several chunks
@pytest.mark.parametrize("shape", [(8, 16, 1, 8, 16), (4, 32, 2, 8, 16)])
@pytest.mark.parametrize("norm", [False, True], ids=["silu gate", "mamba_rms_norm"])
def test_falcon_h1_mixer_saved_set_equals_the_census(precision, B, T, shape, norm):
    """To the byte: in_proj's scaled input, the muP product (FP32 under autocast, which
    makes dt, x and the gate those of an FP32 stream), and with or without the gated
    RMSNorm."""
    layer, att = _mixer(*shape, norm)
    setup = TrainingSetup(batch_size=B, seq_len=T, precision=precision)
    closed = sum(falcon_h1.mixer_saved(att, setup, HIDDEN).values())
    assert closed == mixer_saved_bytes(layer, "mamba", precision, B, T, HIDDEN)


@pytest.mark.parametrize(
    "extra",
    [
        {},
        MULTIPLIERS,
        {"mamba_rms_norm": True, "projectors_bias": True, "mamba_proj_bias": True,
         "attention_bias": True, "mlp_bias": True, "tie_word_embeddings": True},
        {"mamba_d_ssm": None, "mamba_expand": 2, "mamba_d_head": None, "head_dim": 32,
         "mamba_n_groups": 2, "mamba_conv_bias": False},
    ],
    ids=["small", "multipliers", "biases and norm", "expand, head_dim"],
)  # fmt: skip
def test_falcon_h1_parametercount_is_the_meta_build(extra):
    config = {**FALCON_H1, **extra}
    if config.get("mamba_d_head") is None:
        config.pop("mamba_d_head")
    spec = count_is_the_meta_build(config)
    ((kind, count),) = spec.kinds
    assert count == 2 and kind.mixer is not None and kind.attention.kind == "full"


def test_falcon_h1_default_config_is_modelled_with_the_exact_count():
    config = transformers.AutoConfig.for_model("falcon_h1").to_dict()
    spec = spec_from_config(config)
    assert not spec.unmodelled
    assert spec.n_params == 8_514_961_408
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model("falcon_h1")
        )
    assert spec.n_params == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("setup", list(SETUPS))
@pytest.mark.parametrize("B,T", [(2, 64), (1, 100)])
@pytest.mark.parametrize("variant", ["default multipliers", "muP multipliers"])
def test_falcon_h1_closed_form_is_within_3_percent_of_the_dry_run(
    tmp_path, capsys, setup, B, T, variant
):
    config = FALCON_H1 if variant == "default multipliers" else {**FALCON_H1, **MULTIPLIERS}
    row = measured(tmp_path, capsys, config, SETUPS[setup], B, T)
    assert row["measured_over_refined"] == pytest.approx(1.0, abs=0.03)


def test_falcon_h1_profile_names_the_parallel_mixer_and_nothing_unmodelled(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(FALCON_H1))
    assert main(["profile", str(path), "--impl", "transformers"]) == 0
    out = capsys.readouterr().out
    assert "not modelled: FalconH1Mixer" not in out
    assert "parallel_mamba2" in out and "∥ Mamba-2 mixer (8 heads of 16" in out
    assert "in_proj's input (the norm output times ssm_in_multiplier)" in out


@pytest.mark.parametrize(
    "change,key",
    [
        ({"mamba_d_ssm": 100}, "mamba_d_ssm"),  # 100 over 8 heads
        ({"mamba_d_ssm": None, "mamba_expand": 3, "mamba_n_heads": 5}, "mamba_expand"),
        ({"mamba_d_head": 8}, "mamba_d_head"),  # 8 × 8 heads is not 128
        ({"mamba_d_conv": 0}, "mamba_d_conv"),
        ({"mamba_d_state": -1}, "mamba_d_state"),
        ({"mamba_n_groups": 3}, "mamba_n_groups"),
    ],
)
def test_inconsistent_falcon_h1_sizes_are_one_line_naming_file_and_key(
    tmp_path, capsys, change, key
):
    """``mamba_d_ssm: null`` is the width ``mamba_expand``·d (192 over 5 heads here)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**FALCON_H1, **change}))
    assert main(["profile", str(path)]) == 2
    line = one_line_error(capsys)
    assert str(path) in line and key in line


#: The every-type row's shrunk config (``benchmarks/every_type.py``): 128 mixer heads of
#: 8, state 256, chunk 256 — the scan's c×c tensors dominate.
WIDE_SCAN = {
    "model_type": "falcon_h1", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 224,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1,
    "mamba_d_ssm": 1024, "mamba_n_heads": 128, "mamba_d_head": 8, "mamba_n_groups": 1,
    "mamba_d_state": 256, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_chunk_size": 256,
    "mamba_conv_bias": True, "mamba_proj_bias": False, "mamba_rms_norm": False,
}  # fmt: skip


#: A state wide beside the head (n = 128 over p = 4) in several chunks: under autocast the
#: ``C_times_states`` einsum's FP32 copy of C, alive through its ``bmm``, outweighs the
#: three B·T_p·I rows the scan's last line makes (0.912 and 0.913 before that moment).
WIDE_STATE = {
    "mamba_d_ssm": 128, "mamba_n_heads": 32, "mamba_d_head": 4, "mamba_d_state": 128,
}  # fmt: skip


#: A chunk long beside the state (c = 128 over n = 8): the scan's backward peaks inside
#: ``M = G * L``'s backward, M's gradient beside both products (0.943 checkpointed, 0.920
#: not, before that moment).
LONG_CHUNK = {
    "mamba_d_ssm": 128, "mamba_n_heads": 16, "mamba_d_head": 8, "mamba_d_state": 8,
    "mamba_chunk_size": 128,
}  # fmt: skip


RECOMPUTE = "activations/layer/attention/recompute"
SCAN_FORWARD = "activations/layer/attention/mamba/forward"
SCAN_BACKWARD = "activations/layer/attention/grad"


@pytest.mark.parametrize(
    "change,B,T,checkpointing,moment",
    [
        ({}, 1, 64, True, RECOMPUTE),
        ({**WIDE_STATE, "mamba_chunk_size": 32}, 1, 96, True, RECOMPUTE),
        ({**WIDE_STATE, "mamba_chunk_size": 64}, 2, 64, True, RECOMPUTE),
        ({**WIDE_STATE, "mamba_chunk_size": 32}, 1, 96, False, SCAN_FORWARD),
        (LONG_CHUNK, 1, 256, True, SCAN_BACKWARD),
        (LONG_CHUNK, 1, 256, False, SCAN_BACKWARD),
    ],
    ids=[
        "wide scan, one chunk",
        "wide state, 3 chunks",
        "wide state, 2 rows",
        "wide state, forward",
        "long chunk",
        "long chunk, no checkpointing",
    ],
)
def test_falcon_h1_mixer_scan_moments_against_the_dry_run(change, B, T, checkpointing, moment):
    """Autocast. Checkpointed, the layer's recomputation runs the Mamba-2 mixer before the
    attention (``FalconH1DecoderLayer.forward``): its scan's forward peak, beside the
    mixer's saved set and the stream's gradient, is the step's peak (0.974 without the
    moment at the wide scan's one chunk); not checkpointed, the top layer's scan in the
    forward (0.899 without it, the wide state). The long chunk's peak is the scan's
    backward (introspect/refined/falcon_h1.py: backward_transient), after the
    attention's backward freed its own saved set."""
    from introspect import refined
    from introspect.measure import hf_models

    config = {**WIDE_SCAN, **change}
    spec = spec_from_config(config)
    setup = TrainingSetup(
        batch_size=B, seq_len=T, implementation="transformers", loop="labels", device="cpu",
        optimizer="adamw", precision="amp", attention="eager",
        activation_checkpointing=checkpointing,
    )  # fmt: skip
    measured, _ = hf_models.measure(config, "falcon_h1", spec, setup, device="fake", census=False)
    est = refined.estimate(spec, setup)
    assert moment in est.execution.to_json()["terms"]  # the moment the peak is
    assert est.total / measured.peak_bytes == pytest.approx(1, abs=0.03)
