"""Mamba stacks: pure Mamba and Falcon-Mamba (no attention: embedding, L blocks of one
RMSNorm and one mixer, a final norm, the head), Jamba (Mamba-1 mixers with attention
every ``attn_layer_period`` layers and routed experts every ``expert_layer_period``) and
the pure Mamba-2 stack (``Mamba2ForCausalLM``: Mamba's stack around a Mamba-2 mixer).
The Mamba-1 mixer is :mod:`introspect.refined.mamba1`'s layer kind ``mamba1``, the
Mamba-2 one :mod:`introspect.refined.mamba2`'s ``mamba2``; the specs hold no attention
head anywhere but Jamba's attention layers (the flat head fields of the pure stacks are
placeholders no estimator reads, as for Nemotron-H's blocks).

Sources: ``transformers/models/{mamba,falcon_mamba,jamba,mamba2}/{configuration,modeling}_*.py``
(5.x): ``MambaConfig.__post_init__`` (``intermediate_size = int(expand·hidden_size)``,
``time_step_rank`` "auto" = ⌈d/16⌉), ``MambaBlock`` (norm, mixer, residual add),
``MambaModel`` (``embeddings``, ``layers``, ``norm_f``); ``JambaConfig.layers_block_type``
(attention where ``i % attn_layer_period == attn_layer_offset``) and
``layers_num_experts`` (experts where ``i % expert_layer_period ==
expert_layer_offset``), ``JambaAttentionDecoderLayer`` / ``JambaMambaDecoderLayer``
(input_layernorm, mixer, pre_ff_layernorm, feed_forward), ``JambaTopKRouter`` (a softmax
over the E logits, the top-k weights left unnormalised), ``JambaAttention`` (no rotary
positions).
"""

from __future__ import annotations

import math

from introspect.adapters.config_reader import MISSING, Reader

from introspect.layers import Attention, FeedForward, LayerKind, runs_from_list

from ._common import attention, context, dense
from .hybrid import mamba2_mixer


def mamba1_mixer(
    r: Reader, d: int, *, keys: dict[str, tuple[str, ...]], defaults: dict, cls: str, norm: str
) -> Attention:
    """The Mamba-1 mixer a config describes: I = ``expand``·d channels of n states, a
    w-tap depthwise conv, a dt projection of rank R (``"auto"``: ⌈d/16⌉). A size that is
    not positive is one line naming the file and the key."""

    def read(field: str) -> int:
        default = defaults[field]
        return r.integer(*keys[field], default=default, why=f"{cls} default {default}")

    expand_key, expand = r.raw(*keys["expand"])
    if expand is MISSING:
        expand = defaults["expand"]
    if isinstance(expand, bool) or not isinstance(expand, int | float) or expand <= 0:
        raise r.fail(f"{expand_key} must be a positive number, got {expand!r}")
    inner = int(expand * d)
    if inner <= 0:
        raise r.fail(f"{expand_key}={expand} × hidden_size={d} leaves the mixer no channels")
    rank_key, rank = r.raw(*keys["dt_rank"])
    if rank is MISSING or rank == "auto":
        rank = math.ceil(d / 16)
        r.assumptions.append(f"{rank_key} absent or auto: ⌈{d} / 16⌉ = {rank}")
    else:
        rank = r.integer(*keys["dt_rank"])
    return Attention(
        kind="mamba1",
        num_attention_heads=1,
        num_key_value_heads=1,
        head_dim=1,
        mamba_inner_size=inner,
        mamba_state_size=read("state"),
        mamba_conv_kernel=read("conv"),
        mamba_dt_rank=rank,
        mamba_conv_bias=r.flag(keys["conv_bias"][0], defaults["conv_bias"], f"{cls} default"),
        mamba_proj_bias=r.flag(keys["proj_bias"][0], defaults["proj_bias"], f"{cls} default"),
        mamba_bcdt_norm=norm,
    )


#: MambaConfig's (and FalconMambaConfig's) mixer keys and defaults.
_MAMBA_KEYS = dict(
    keys={
        "expand": ("expand",),
        "state": ("state_size",),
        "conv": ("conv_kernel",),
        "dt_rank": ("time_step_rank",),
        "conv_bias": ("use_conv_bias",),
        "proj_bias": ("use_bias",),
    },
    defaults=dict(expand=2, state=16, conv=4, conv_bias=True, proj_bias=False),
)


def _pure(r: Reader, cls: str, norm: str) -> dict:
    """A pure Mamba-1 stack: L single-branch blocks (one RMSNorm, one mixer, a residual
    add), no attention and no feed-forward."""
    d = r.integer("hidden_size")
    L = r.integer("num_hidden_layers", default=32, why=f"{cls} default 32")
    mixer = mamba1_mixer(r, d, cls=cls, norm=norm, **_MAMBA_KEYS)
    key, given = r.raw("intermediate_size")
    if given is not MISSING and given != mixer.mamba_inner_size:
        r.assumptions.append(
            f"{key}={given} ignored: {cls} sets it to expand·hidden_size = {mixer.mamba_inner_size}"
        )
    return _stack(r, cls, d, L, mixer, vocab=50280, tied=True)


def _stack(r: Reader, cls: str, d: int, L: int, mixer: Attention, *, vocab: int, tied: bool):
    """The fields of L blocks of one RMSNorm and ``mixer`` (no feed-forward), between the
    embedding and the final norm and head (``MambaModel`` / ``Mamba2Model``)."""
    block = LayerKind(
        attention=mixer, feed_forward=FeedForward(ffn="none", intermediate_size=1), norms=1
    )
    return dict(
        hidden_size=d,
        num_hidden_layers=L,
        num_attention_heads=1,
        num_key_value_heads=1,
        head_dim=1,
        vocab_size=r.integer("vocab_size", default=vocab, why=f"{cls} default {vocab}"),
        intermediate_size=1,
        norm="rmsnorm",
        norm_bias=False,
        ffn="plain",
        position_embedding="none",
        norms_per_layer=1,
        tie_word_embeddings=r.tied(tied, cls),
        residual_in_fp32=r.flag("residual_in_fp32", True, f"{cls} default true"),
        layers=runs_from_list([block] * L),
    )


def mamba(r: Reader) -> dict:
    """MambaConfig: pure Mamba (``MambaMixer``)."""
    return _pure(r, "MambaConfig", "none")


def falcon_mamba(r: Reader) -> dict:
    """FalconMambaConfig: Mamba's stack whose mixer normalises dt, B and C with weightless
    RMSNorms (``FalconMambaWeightlessRMSNorm``: buffers, no parameters)."""
    return _pure(r, "FalconMambaConfig", "weightless")


#: Mamba2Config's mixer keys and defaults (``models/mamba2/configuration_mamba2.py``
#: l. 63–89): the width is num_heads × head_dim, which ``validate_architecture`` (l. 96)
#: requires to be expand·hidden_size.
_MAMBA2_KEYS = dict(
    keys={
        "heads": ("num_heads",),
        "head_dim": ("head_dim",),
        "state": ("state_size",),
        "groups": ("n_groups",),
        "conv": ("conv_kernel",),
        "chunk": ("chunk_size",),
        "conv_bias": ("use_conv_bias",),
        "proj_bias": ("use_bias",),
    },
    defaults=dict(
        heads=128, head_dim=64, state=128, groups=8, conv=4, chunk=256, conv_bias=True,
        proj_bias=False,
    ),
)  # fmt: skip

#: Keys of the original ``mamba_ssm`` configs that Mamba2Config carries but
#: transformers' classes never read: the value the class behaves as, and what it does
#: (``models/mamba2/modeling_mamba2.py``); another value is noted as ignored.
_MAMBA2_IGNORED = {
    "norm_before_gate": (
        False,
        "Mamba2Mixer gates before its norm (MambaRMSNormGated: y·silu(z), then the "
        "grouped RMSNorm, l. 106-124; the fused call passes norm_before_gate=False, l. 499)",
    ),
    "rms_norm": (True, "Mamba2Block always norms with Mamba2RMSNorm (l. 609-632)"),
}


def mamba2(r: Reader) -> dict:
    """Mamba2Config: pure Mamba-2 (``Mamba2ForCausalLM``): embedding, L ``Mamba2Block``s
    (``Mamba2RMSNorm``, ``Mamba2Mixer``, a residual add), ``norm_f``, an untied head by
    default. The mixer is Nemotron-H's (``Mamba2Mixer.forward`` is
    ``NemotronHMamba2Mixer.forward`` line for line, the chunked scan, the conv and the
    grouped gated norm too) with ``time_step_limit`` (0, ∞) in place of
    (``time_step_min``, ∞): one clamp either way. ``Mamba2Mixer.__init__`` sets
    ``intermediate_size = int(expand·hidden_size)`` and the norm's group
    ``intermediate_size // n_groups``; ``Mamba2Config.validate_architecture`` refuses
    expand·hidden_size ≠ num_heads·head_dim, and ``repeat_interleave(num_heads //
    n_groups)`` in ``mamba2_chunk_scan`` needs n_groups to divide num_heads: each is one
    line naming the key here. ``time_step_rank`` sizes nothing (no dt projection in a
    Mamba-2 mixer). ``residual_in_fp32`` (default true) casts the residual to FP32
    before the add (``Mamba2Block.forward``, l. 641-650): a no-op when the stream is
    FP32 already (FP32 and autocast steps), an FP32 stream in a 16-bit one
    (:attr:`~introspect.spec.ModelSpec.residual_in_fp32`, read for Mamba-1 too:
    ``MambaBlock`` does the same).

    Source: ``transformers/models/mamba2/{configuration,modeling}_mamba2.py`` (5.x)."""
    cls = "Mamba2Config"
    d = r.integer("hidden_size", default=4096, why=f"{cls} default 4096")
    L = r.integer("num_hidden_layers", default=64, why=f"{cls} default 64")
    expand = r.integer("expand", default=2, why=f"{cls} default 2")
    mixer = mamba2_mixer(r, d, cls=cls, **_MAMBA2_KEYS)
    inner = mixer.mamba_num_heads * mixer.mamba_head_dim
    if inner != expand * d:
        raise r.fail(
            f"expand={expand} × hidden_size={d} = {expand * d} must equal num_heads="
            f"{mixer.mamba_num_heads} × head_dim={mixer.mamba_head_dim} = {inner}"
        )
    for key, (default, why) in _MAMBA2_IGNORED.items():
        value = r.flag(key, default)
        if value != default:
            r.assumptions.append(f"{key}={str(value).lower()} ignored: {why}")
    return _stack(r, cls, d, L, mixer, vocab=32768, tied=False)


#: JambaConfig's mixer keys and defaults (configuration_jamba.py).
_JAMBA_KEYS = dict(
    keys={
        "expand": ("mamba_expand",),
        "state": ("mamba_d_state",),
        "conv": ("mamba_d_conv",),
        "dt_rank": ("mamba_dt_rank",),
        "conv_bias": ("mamba_conv_bias",),
        "proj_bias": ("mamba_proj_bias",),
    },
    defaults=dict(expand=2, state=16, conv=4, conv_bias=True, proj_bias=False),
)


def jamba(r: Reader) -> dict:
    """JambaConfig: Mamba-1 mixers (with RMSNorms on dt, B and C) and, where
    ``i % attn_layer_period == attn_layer_offset``, attention without positions; each
    followed by a gated MLP of ``intermediate_size`` or, where ``i % expert_layer_period
    == expert_layer_offset``, ``num_experts`` routed gated experts of that width
    (softmax router, top ``num_experts_per_tok``)."""
    cls = "JambaConfig"
    d = r.integer("hidden_size")
    L = r.integer("num_hidden_layers", default=32, why=f"{cls} default 32")
    heads = r.integer("num_attention_heads", default=32, why=f"{cls} default 32")
    periods = {}
    for what, period, offset in (("attn", 8, 4), ("expert", 2, 1)):
        p = r.integer(f"{what}_layer_period", default=period, why=f"{cls} default {period}")
        o = r.count(f"{what}_layer_offset", offset, f"{cls} default {offset}")
        if o >= p:
            raise r.fail(f"{what}_layer_offset={o} must be below {what}_layer_period={p}")
        periods[what] = (p, o)
    fields = dict(
        hidden_size=d,
        num_hidden_layers=L,
        num_attention_heads=heads,
        num_key_value_heads=r.kv_heads(8, cls),
        head_dim=None,
        vocab_size=r.integer("vocab_size", default=65536, why=f"{cls} default 65536"),
        intermediate_size=r.integer("intermediate_size", default=14336, why=f"{cls} default"),
        norm="rmsnorm",
        norm_bias=False,
        ffn="gated",
        hidden_act=r.text("hidden_act", default="silu"),
        position_embedding="none",
    )
    mixer = mamba1_mixer(r, d, cls=cls, norm="weighted", **_JAMBA_KEYS)
    full = attention(fields, rope=False)
    experts = r.integer("num_experts", "num_local_experts", default=16, why=f"{cls} default 16")
    top_k = r.integer("num_experts_per_tok", default=2, why=f"{cls} default 2")
    if experts > 1 and top_k > experts:
        raise r.fail(f"num_experts_per_tok={top_k} exceeds num_experts={experts}")
    sparse = experts > 1  # JambaConfig.layers_num_experts: 1 expert is a plain MLP
    moe = dense(fields, num_experts=experts, top_k=top_k, router="softmax") if sparse else None
    (ap, ao), (ep, eo) = periods["attn"], periods["expert"]
    kinds = [
        LayerKind(
            attention=full if i % ap == ao else mixer,
            feed_forward=moe if sparse and i % ep == eo else dense(fields),
        )
        for i in range(L)
    ]
    fields.update(
        num_local_experts=experts if sparse else 0,
        num_experts_per_tok=top_k if sparse else 0,
        max_position_embeddings=context(r, 262144),
        tie_word_embeddings=r.tied(False, cls),
        layers=runs_from_list(kinds),
    )
    return fields
