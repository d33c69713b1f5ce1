"""Falcon-H1: every block runs attention and a Mamba-2 mixer in parallel on one normed
input, then a SwiGLU MLP, with muP multipliers along the way.

Source: ``transformers/models/falcon_h1/{configuration,modeling}_falcon_h1.py`` (5.x):
``FalconH1DecoderLayer.forward`` (``input_layernorm``; ``self.mamba`` and
``self.self_attn`` both read its output, their outputs scaled by ``ssm_out_multiplier``
and ``attention_out_multiplier`` and summed into the residual; ``pre_ff_layernorm``, then
``FalconH1MLP``: gate/up/down of ``intermediate_size``, ``mlp_multipliers`` on gate and
down); ``FalconH1Attention`` (q/k/v/o of ``head_dim`` — the config's, else
d / heads — with ``attention_bias``, rotary, K times ``key_multiplier``);
``FalconH1Mixer`` (``GraniteMoeHybridMambaLayer``'s conv and chunked scan line for line;
its width ``mamba_d_ssm``, or ``mamba_expand``·d when that key is null; in_proj with
``mamba_proj_bias``, out_proj with ``projectors_bias``; the gated RMSNorm only with
``mamba_rms_norm``, else the scan output times SiLU(gate)); ``FalconH1Model`` (the
``mup_vector`` is a non-persistent buffer: no parameters). What the multipliers keep:
:mod:`introspect.refined.falcon_h1`."""

from __future__ import annotations

from introspect.adapters.config_reader import MISSING, Reader

from introspect.layers import Attention, LayerKind, runs_from_list

from ._common import attention, context, dense, rmsnorm_gated

CLS = "FalconH1Config"


def _width(r: Reader, d: int) -> tuple[int, str]:
    """The mixer's width and where it came from: ``mamba_d_ssm``; null means
    ``int(mamba_expand · d)`` (``FalconH1Mixer.__init__``); absent, the class's 1024."""
    if "mamba_d_ssm" in r.config and r.config["mamba_d_ssm"] is None:
        expand = r.number("mamba_expand", 2)
        return int(expand * d), f"mamba_expand·hidden_size = {expand}·{d}"
    if "mamba_d_ssm" not in r.config:
        width = r.integer("mamba_d_ssm", default=1024, why=f"{CLS} default 1024")
        return width, (
            f"mamba_d_ssm = {width} ({CLS}'s default when the key is absent; "
            "mamba_expand·hidden_size applies only with mamba_d_ssm null)"
        )
    width = r.integer("mamba_d_ssm")
    return width, f"mamba_d_ssm = {width}"


def mixer(r: Reader, d: int) -> Attention:
    """The ``FalconH1Mixer`` a config describes: ``mamba_n_heads`` heads of
    ``mamba_d_head`` (``"auto"``: width / heads), ``mamba_n_groups`` groups of
    ``mamba_d_state`` states, a ``mamba_d_conv``-tap conv, chunks of
    ``mamba_chunk_size``. The heads must split the width and the groups the heads: one
    line naming the file and the key otherwise."""

    def read(key: str, default: int) -> int:
        value = r.integer(key, default=default, why=f"{CLS} default {default}")
        if value is None or value <= 0:
            raise r.fail(f"{key} must be a positive integer, got {value!r}")
        return value

    width, origin = _width(r, d)
    heads = read("mamba_n_heads", 128)
    if width <= 0 or width % heads:
        raise r.fail(
            f"mamba_n_heads = {heads} does not split the mixer's width {origin}; the mixer "
            "splits its width into equal heads"
        )
    key, head = r.raw("mamba_d_head")
    if head is MISSING or head == "auto":
        head = width // heads
    else:
        head = r.integer("mamba_d_head")
        if head * heads != width:
            raise r.fail(f"{key} = {head} × mamba_n_heads = {heads} is not the width {origin}")
    groups = read("mamba_n_groups", 1)
    if heads % groups:
        raise r.fail(f"mamba_n_groups = {groups} does not divide mamba_n_heads = {heads}")
    return Attention(
        kind="mamba2",
        num_attention_heads=1,
        num_key_value_heads=1,
        head_dim=1,
        mamba_num_heads=heads,
        mamba_head_dim=head,
        mamba_state_size=read("mamba_d_state", 256),
        mamba_n_groups=groups,
        mamba_conv_kernel=read("mamba_d_conv", 4),
        mamba_chunk_size=read("mamba_chunk_size", 256),
        mamba_conv_bias=r.flag("mamba_conv_bias", True, f"{CLS} default true"),
        mamba_proj_bias=r.flag("mamba_proj_bias", False, f"{CLS} default false"),
        mamba_out_bias=r.flag("projectors_bias", False, f"{CLS} default false"),
        mamba_gated_norm=r.flag("mamba_rms_norm", False, f"{CLS} default false"),
        mamba_mup=True,
    )


def falcon_h1(r: Reader) -> dict:
    """FalconH1Config: 32 hybrid layers of d 4096, 32 heads (8 K/V), a 1024-wide Mamba-2
    mixer of 128 heads and 256 states, a SwiGLU MLP of 14336, vocabulary 128000."""
    fields = rmsnorm_gated(r, kv=8, head_dim=None, cls=CLS)
    bias = r.flag("attention_bias", False, f"{CLS} default false")
    fields.update(
        qkv_bias=bias, o_bias=bias, mlp_bias=r.flag("mlp_bias", False, f"{CLS} default false")
    )
    kind = LayerKind(
        attention=attention(fields),
        feed_forward=dense(fields),
        mixer=mixer(r, fields["hidden_size"]),
    )
    fields.update(
        max_position_embeddings=context(r, 8192),
        tie_word_embeddings=r.tied(False, CLS),
        layers=runs_from_list([kind] * fields["num_hidden_layers"]),
    )
    return fields
