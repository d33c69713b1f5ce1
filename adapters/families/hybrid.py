"""Hybrid stacks: Qwen3-Next (Gated DeltaNet linear-attention layers between gated full
attention layers, every feed-forward a mixture of experts with a gated shared expert) and
Qwen3.5's language models (the same layers, the DeltaNet behind four projections, a dense
MLP or Qwen3-Next's experts), OLMo-Hybrid, and the Mamba-2 hybrids.

Source: ``transformers/models/qwen3_next/{configuration,modeling}_qwen3_next.py`` (5.x):
``layer_types`` (by default three linear layers, then a full one:
``full_attention_interval`` 4); ``Qwen3NextAttention`` (q_proj 2·h·head_dim for the
output gate, per-head q/k RMSNorms); ``Qwen3NextGatedDeltaNet`` (in_proj_qkvz, in_proj_ba,
a depthwise conv, dt_bias, A_log, a gated RMSNorm, out_proj); ``Qwen3NextSparseMoeBlock``
(experts, router, shared expert and its sigmoid gate), sparse by Qwen-MoE's rule.
"""

from __future__ import annotations

from introspect.adapters.config_reader import MISSING, Reader

from introspect.layers import Attention, FeedForward, LayerKind, runs_from_list

from ._common import LAYER_TYPES, attention, context, dense, rmsnorm_gated
from .moe import _sparse_layers


def qwen3_next(r: Reader) -> dict:
    """Qwen3NextConfig: 16 heads of 256 (2 K/V), 16/32 linear key/value heads of 128,
    512 experts of 512, 10 active, a shared expert of 512."""
    cls = "Qwen3NextConfig"
    fields = rmsnorm_gated(r, kv=2, head_dim=256, cls=cls)
    bias = r.flag("attention_bias", False)
    fields.update(qkv_bias=bias, o_bias=bias, qk_norm="head")
    L = fields["num_hidden_layers"]
    interval = r.integer("full_attention_interval", default=4, why=f"{cls} default 4")
    types = r.items("layer_types", str, length=L) or [
        "linear_attention" if (i + 1) % interval else "full_attention" for i in range(L)
    ]
    linear = Attention(
        kind="linear",
        num_attention_heads=fields["num_attention_heads"],
        num_key_value_heads=fields["num_key_value_heads"] or fields["num_attention_heads"],
        head_dim=fields["head_dim"] or fields["hidden_size"] // fields["num_attention_heads"],
        linear_num_key_heads=r.integer("linear_num_key_heads", default=16, why=f"{cls} default"),
        linear_num_value_heads=r.integer(
            "linear_num_value_heads", default=32, why=f"{cls} default"
        ),
        linear_key_head_dim=r.integer("linear_key_head_dim", default=128, why=f"{cls} default"),
        linear_value_head_dim=r.integer("linear_value_head_dim", default=128, why=f"{cls} default"),
        linear_conv_kernel_dim=r.integer(
            "linear_conv_kernel_dim", default=4, why=f"{cls} default 4"
        ),
    )
    full = attention(fields, output_gate=True)
    width = r.integer("moe_intermediate_size", default=512, why=f"{cls} default 512")
    moe = dense(
        fields,
        intermediate_size=width,
        num_experts=r.integer("num_experts", default=512, why=f"{cls} default 512"),
        top_k=r.integer("num_experts_per_tok", default=10, why=f"{cls} default 10"),
        shared_intermediate_size=r.integer(
            "shared_expert_intermediate_size", default=512, why=f"{cls} default 512"
        ),
        shared_expert_gate=True,
    )
    kinds = []
    for t, sparse in zip(types, _sparse_layers(r, L, "Qwen3NextConfig"), strict=True):
        kind = LAYER_TYPES.get(t)
        if kind not in ("linear", "full"):
            raise r.fail(f"layer_types: {t!r} is not a layer type qwen3_next has")
        att = linear if kind == "linear" else full
        kinds.append(LayerKind(attention=att, feed_forward=moe if sparse else dense(fields)))
    fields.update(
        num_local_experts=moe.num_experts,
        num_experts_per_tok=moe.top_k,
        intermediate_size=width,
        max_position_embeddings=context(r, 32768),
        tie_word_embeddings=r.tied(False, cls),
        layers=runs_from_list(kinds),
    )
    return fields


def _qwen3_5_stack(r: Reader, cls: str, fields: dict, ff_of: list[FeedForward]) -> dict:
    """What Qwen3.5's two text configs share (``Qwen3_5TextConfig``,
    ``Qwen3_5MoeTextConfig``): Qwen3-Next's gated attention (q_proj 2·h·head_dim, per-head
    q/k RMSNorms, the (1 + w) RMSNorm, ``Qwen3_5Attention`` is ``Qwen3NextAttention``
    line for line) and its Gated DeltaNet behind four linears (``in_proj_qkv``,
    ``in_proj_z``, ``in_proj_b``, ``in_proj_a``: ``linear_projections="qkv_z_b_a"``,
    priced in :mod:`introspect.refined.deltanet`), laid out by ``layer_types`` (by
    default three linear layers, then a full one: ``full_attention_interval`` 4, as
    ``__post_init__`` derives it); ``ff_of`` is each layer's feed-forward."""
    bias = r.flag("attention_bias", False, f"{cls} default false")
    fields.update(qkv_bias=bias, o_bias=bias, qk_norm="head")
    L = fields["num_hidden_layers"]
    types = r.items("layer_types", str, length=L)
    if types is None:
        interval = r.integer("full_attention_interval", default=4, why=f"{cls} default 4")
        types = ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(L)]
    nk = r.integer("linear_num_key_heads", default=16, why=f"{cls} default 16")
    nv = r.integer("linear_num_value_heads", default=32, why=f"{cls} default 32")
    if nv % nk:  # torch_chunk_gated_delta_rule repeats each key head nv / nk times
        raise r.fail(f"linear_num_value_heads: {nv} is not a multiple of linear_num_key_heads {nk}")
    linear = attention(
        fields, kind="linear", qk_norm="none", qkv_bias=False, o_bias=False,
        linear_num_key_heads=nk, linear_num_value_heads=nv,
        linear_key_head_dim=r.integer("linear_key_head_dim", default=128, why=f"{cls} default"),
        linear_value_head_dim=r.integer(
            "linear_value_head_dim", default=128, why=f"{cls} default"
        ),
        linear_conv_kernel_dim=r.integer(
            "linear_conv_kernel_dim", default=4, why=f"{cls} default 4"
        ),
        linear_projections="qkv_z_b_a",
    )  # fmt: skip
    full = attention(fields, output_gate=True)
    kinds = []
    for t, ff in zip(types, ff_of, strict=True):
        kind = LAYER_TYPES.get(t)
        if kind not in ("linear", "full"):
            raise r.fail(f"layer_types: {t!r} is not a layer type {r.model_type} has")
        kinds.append(LayerKind(attention=linear if kind == "linear" else full, feed_forward=ff))
    fields.update(
        max_position_embeddings=context(r, 32768),
        tie_word_embeddings=r.tied(False, cls),
        layers=runs_from_list(kinds),
    )
    return fields


def qwen3_5_text(r: Reader) -> dict:
    """Qwen3_5TextConfig (Qwen3.5's language model, ``Qwen3_5ForCausalLM``): 16 heads of
    256 (4 K/V), 16/32 linear key/value heads of 128, every layer a SwiGLU MLP of
    ``intermediate_size`` (``Qwen3_5DecoderLayer``).

    Source: ``transformers/models/qwen3_5/{configuration,modeling}_qwen3_5.py``
    (``Qwen3_5GatedDeltaNet`` l. 500, ``Qwen3_5Attention`` l. 742, ``Qwen3_5MLP`` l. 818,
    ``Qwen3_5DecoderLayer`` l. 855)."""
    cls = "Qwen3_5TextConfig"
    fields = rmsnorm_gated(r, kv=4, head_dim=256, cls=cls)
    ff = dense(fields)
    return _qwen3_5_stack(r, cls, fields, [ff] * fields["num_hidden_layers"])


def qwen3_5_moe_text(r: Reader) -> dict:
    """Qwen3_5MoeTextConfig (Qwen3.5-MoE's language model): 16 heads of 256 (2 K/V), the
    linear layers as :func:`qwen3_5_text`'s, every layer a mixture of experts
    (``Qwen3_5MoeSparseMoeBlock``: 256 experts of 512, 8 active, the top-k renormalised,
    a shared expert of 512 behind its sigmoid gate); the class has no dense MLP, so no
    ``intermediate_size``.

    Source: ``transformers/models/qwen3_5_moe/{configuration,modeling}_qwen3_5_moe.py``
    (``Qwen3_5MoeGatedDeltaNet`` l. 517, ``Qwen3_5MoeSparseMoeBlock`` l. 913,
    ``Qwen3_5MoeDecoderLayer`` l. 956)."""
    cls = "Qwen3_5MoeTextConfig"
    width = r.integer("moe_intermediate_size", default=512, why=f"{cls} default 512")
    fields = dict(
        r.shape(),
        num_key_value_heads=r.kv_heads(2, cls),
        head_dim=r.head_dim(256, cls),
        intermediate_size=width,
        norm="rmsnorm",
        norm_bias=False,
        ffn="gated",
        hidden_act=r.text("hidden_act", default="silu"),
        position_embedding="rope",
    )
    moe = dense(
        fields,
        num_experts=r.integer("num_experts", default=256, why=f"{cls} default 256"),
        top_k=r.integer("num_experts_per_tok", default=8, why=f"{cls} default 8"),
        shared_intermediate_size=r.integer(
            "shared_expert_intermediate_size", default=512, why=f"{cls} default 512"
        ),
        shared_expert_gate=True,
    )
    fields.update(num_local_experts=moe.num_experts, num_experts_per_tok=moe.top_k)
    return _qwen3_5_stack(r, cls, fields, [moe] * fields["num_hidden_layers"])


def olmo_hybrid(r: Reader) -> dict:
    """OlmoHybridConfig (OLMo-Hybrid): Gated DeltaNet layers (``linear_attention``,
    ``OlmoHybridLinearAttentionDecoderLayer``: pre-norm, ``OlmoHybridGatedDeltaNet``) and
    OLMo-3 attention layers (``full_attention``, ``OlmoHybridAttentionDecoderLayer``: the
    norms on the branch outputs, RMSNorm on q and k over their full widths, rotary), every
    one with a SwiGLU MLP. The mixer runs Qwen3-Next's torch kernel
    (``torch_chunk_gated_delta_rule``, ``l2norm``, the gated RMSNorm are the same code)
    behind six separate projections (``linear_projections="separate"``, priced in
    :mod:`introspect.refined.deltanet`); ``linear_allow_neg_eigval``'s ``beta * 2.0``
    keeps nothing more (a multiply by a number saves nothing). Defaults as
    ``OlmoHybridConfig.__post_init__``: linear heads = attention heads, key width
    ⌊0.75·d / heads⌋, value width twice that, every 4th layer attention.

    Source: ``transformers/models/olmo_hybrid/{configuration,modeling}_olmo_hybrid.py``."""
    cls = "OlmoHybridConfig"
    fields = rmsnorm_gated(r, kv=None, head_dim=None, cls=cls)
    bias = r.flag("attention_bias", False, f"{cls} default false")
    fields.update(qkv_bias=bias, o_bias=bias, qk_norm="full", head_dim=None)
    L, heads, d = fields["num_hidden_layers"], fields["num_attention_heads"], fields["hidden_size"]
    types = r.items("layer_types", str, length=L)
    if types is None:
        types = ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(L)]
        if "full_attention" not in types:
            types[-1] = "full_attention"
    nk = r.integer("linear_num_key_heads", default=heads, why=f"{cls}: num_attention_heads")
    nv = r.integer("linear_num_value_heads", default=heads, why=f"{cls}: num_attention_heads")
    dk = r.integer("linear_key_head_dim", default=int(0.75 * d / nk), why=f"{cls}: 0.75·d/heads")
    dv = r.integer("linear_value_head_dim", default=2 * dk, why=f"{cls}: twice the key width")
    w = r.integer("linear_conv_kernel_dim", default=4, why=f"{cls} default 4")
    if nv % nk:
        raise r.fail(f"linear_num_value_heads: {nv} is not a multiple of linear_num_key_heads {nk}")
    linear = attention(
        fields, kind="linear", qk_norm="none", linear_num_key_heads=nk,
        linear_num_value_heads=nv, linear_key_head_dim=dk, linear_value_head_dim=dv,
        linear_conv_kernel_dim=w, linear_projections="separate",
    )  # fmt: skip
    full = attention(fields)
    ff = dense(fields)
    kinds = []
    for t in types:
        if t not in ("linear_attention", "full_attention"):
            raise r.fail(f"layer_types: {t!r} is not a layer type olmo_hybrid has")
        att = linear if t == "linear_attention" else full
        kinds.append(LayerKind(attention=att, feed_forward=ff))
    fields.update(
        max_position_embeddings=context(r, 65536),
        tie_word_embeddings=r.tied(False, cls),
        layers=runs_from_list(kinds),
    )
    return fields


def mamba2_mixer(
    r: Reader, d: int, *, keys: dict[str, tuple[str, ...]], defaults: dict, cls: str
) -> Attention:
    """The Mamba-2 mixer a config describes (``GraniteMoeHybridMambaLayer``,
    ``NemotronHMamba2Mixer``): h heads of p, g groups of n states, a w-tap conv, the
    scan's chunk. ``keys`` names each field's config keys (the families spell them
    differently), ``defaults`` the class defaults. The width h·p must be the mixer's
    ``expand``·d where the family derives it so (``mamba_d_head: "auto"``), and
    g must divide h: one line naming the file and the key otherwise."""

    def read(field: str) -> int:
        default = defaults[field]
        return r.integer(*keys[field], default=default, why=f"{cls} default {default}")

    heads, groups = read("heads"), read("groups")
    head_key, head = r.raw(*keys["head_dim"])
    expand_keys = keys.get("expand")
    if expand_keys:
        expand = read("expand")
        inner = expand * d
        if inner % heads:
            raise r.fail(
                f"{keys['heads'][0]}={heads} must divide the mixer's width "
                f"{expand_keys[0]}·hidden_size = {inner}"
            )
    if head is MISSING and not expand_keys:
        head = read("head_dim")
    elif head is MISSING or head == "auto":
        if not expand_keys:
            raise r.fail(f"{head_key}: {head!r} is not a head width")
        head = inner // heads
        r.assumptions.append(f"{head_key} absent or auto: {inner} / {heads} = {head}")
    else:
        head = r.integer(*keys["head_dim"])
        if expand_keys and head * heads != inner:
            raise r.fail(
                f"{head_key}={head} × {keys['heads'][0]}={heads} is not the mixer's width "
                f"{expand_keys[0]}·hidden_size = {inner}"
            )
    if heads % groups:
        raise r.fail(f"{keys['groups'][0]}={groups} must divide {keys['heads'][0]}={heads}")
    return Attention(
        kind="mamba2",
        num_attention_heads=1,
        num_key_value_heads=1,
        head_dim=1,
        mamba_num_heads=heads,
        mamba_head_dim=head,
        mamba_state_size=read("state"),
        mamba_n_groups=groups,
        mamba_conv_kernel=read("conv"),
        mamba_chunk_size=read("chunk"),
        mamba_conv_bias=r.flag(keys["conv_bias"][0], defaults["conv_bias"], f"{cls} default"),
        mamba_proj_bias=r.flag(keys["proj_bias"][0], defaults["proj_bias"], f"{cls} default"),
    )


#: GraniteMoeHybridConfig's mixer keys and defaults (configuration_granitemoehybrid.py).
_GRANITE_MAMBA = dict(
    keys={
        "heads": ("mamba_n_heads",),
        "head_dim": ("mamba_d_head",),
        "state": ("mamba_d_state",),
        "groups": ("mamba_n_groups",),
        "conv": ("mamba_d_conv",),
        "chunk": ("mamba_chunk_size",),
        "expand": ("mamba_expand",),
        "conv_bias": ("mamba_conv_bias",),
        "proj_bias": ("mamba_proj_bias",),
    },
    defaults=dict(
        heads=128, state=256, groups=1, conv=4, chunk=256, expand=2, conv_bias=True,
        proj_bias=False,
    ),
)  # fmt: skip


def granitemoehybrid(r: Reader) -> dict:
    """GraniteMoeHybridConfig (Granite 4.0-H): ``layer_types`` of Mamba-2 mixers
    ("mamba", read as transformers' "linear_attention") and attention layers, every layer
    followed by the shared SwiGLU MLP (``shared_mlp``: one ``input_linear`` d → 2·f_s,
    ``output_linear``) and, with ``num_local_experts`` > 0, a top-k mixture of experts
    (``GraniteMoeHybridMoE``: a bias-free router, softmax over the top-k logits, experts
    of ``intermediate_size``) beside it. RMSNorm pre-norm blocks; rotary positions only
    with ``position_embedding_type: "rope"``; the multipliers (embedding, residual,
    attention, logits) scale and keep nothing.

    Source: ``transformers/models/granitemoehybrid/{configuration,modeling}_
    granitemoehybrid.py`` (``GraniteMoeHybridDecoderLayer`` l. 943, the mixer l. 505)."""
    cls = "GraniteMoeHybridConfig"
    fields = rmsnorm_gated(r, kv=None, head_dim=None, cls=cls)
    fields["head_dim"] = None  # the attention reads hidden_size // heads (no head_dim key)
    bias = r.flag("attention_bias", False, f"{cls} default false")
    rope = r.text("position_embedding_type", default="none") == "rope"
    fields.update(
        qkv_bias=bias,
        o_bias=bias,
        position_embedding="rope" if rope else "none",
        fused_linears=("gate_up",),
    )
    L = fields["num_hidden_layers"]
    types = r.items("layer_types", str, length=L) or ["mamba"] * L
    mixer = mamba2_mixer(r, fields["hidden_size"], cls=cls, **_GRANITE_MAMBA)
    full = attention(fields, rope=rope)
    shared = r.integer("shared_intermediate_size", default=1024, why=f"{cls} default 1024")
    experts = r.count("num_local_experts", 8, f"{cls} default 8")
    if experts:
        ff = dense(
            fields,
            intermediate_size=fields["intermediate_size"],
            num_experts=experts,
            top_k=r.integer("num_experts_per_tok", default=2, why=f"{cls} default 2"),
            shared_intermediate_size=shared,
            router="topk_softmax",
        )
    else:
        ff = dense(fields, intermediate_size=shared)
    kinds = []
    for t in types:
        kind = {"mamba": "mamba2", "linear_attention": "mamba2"}.get(t, LAYER_TYPES.get(t))
        if t == "attention":
            kind = "full"
        if kind not in ("mamba2", "full"):
            raise r.fail(f"layer_types: {t!r} is not a layer type granitemoehybrid has")
        kinds.append(LayerKind(attention=mixer if kind == "mamba2" else full, feed_forward=ff))
    fields.update(
        intermediate_size=ff.intermediate_size,
        num_local_experts=ff.num_experts,
        num_experts_per_tok=ff.top_k,
        max_position_embeddings=context(r, 2048),
        tie_word_embeddings=r.tied(False, cls),
        layers=runs_from_list(kinds),
    )
    return fields


def bamba(r: Reader) -> dict:
    """BambaConfig: Mamba-2 mixers (the mixer and its keys are Granite 4.0-H's:
    ``BambaMixer`` is ``GraniteMoeHybridMambaLayer`` line for line) with attention on
    ``attn_layer_indices`` (``layers_block_type``), each followed by a gated MLP
    (gate/up/down of ``intermediate_size``); RMSNorm pre-norm blocks; rotary positions on
    half of each head (``partial_rotary_factor`` hard-coded 0.5 in ``__post_init__``).

    Source: ``transformers/models/bamba/{configuration,modeling}_bamba.py``
    (``BambaDecoderLayer`` l. 842, ``BambaMixer`` l. 584)."""
    cls = "BambaConfig"
    fields = rmsnorm_gated(r, kv=8, head_dim=None, cls=cls)
    fields["head_dim"] = None  # the attention reads hidden_size // heads (no head_dim key)
    bias = r.flag("attention_bias", False, f"{cls} default false")
    fields.update(
        qkv_bias=bias,
        o_bias=bias,
        mlp_bias=r.flag("mlp_bias", False, f"{cls} default false"),
        partial_rotary_factor=0.5,
    )
    L = fields["num_hidden_layers"]
    indices = r.items("attn_layer_indices", int) or []
    if any(not 0 <= i < L for i in indices):
        raise r.fail(f"attn_layer_indices: {indices} names a layer outside 0..{L - 1}")
    defaults = dict(_GRANITE_MAMBA["defaults"], heads=128, state=256, chunk=256)
    mixer = mamba2_mixer(r, fields["hidden_size"], cls=cls, keys=_GRANITE_MAMBA["keys"],
                         defaults=defaults)  # fmt: skip
    ff = dense(fields)
    full = attention(fields)
    kinds = [
        LayerKind(attention=full if i in indices else mixer, feed_forward=ff) for i in range(L)
    ]
    fields.update(
        max_position_embeddings=context(r, 262144),
        tie_word_embeddings=r.tied(False, cls),
        layers=runs_from_list(kinds),
    )
    return fields


#: NemotronHConfig's mixer keys (and their legacy names, which ``__post_init__`` maps) and
#: defaults (configuration_nemotron_h.py): the width is heads × head_dim (no expand).
_NEMOTRON_MAMBA = dict(
    keys={
        "heads": ("mamba_num_heads",),
        "head_dim": ("mamba_head_dim",),
        "state": ("ssm_state_size",),
        "groups": ("n_groups", "mamba_n_groups"),
        "conv": ("conv_kernel", "mamba_d_conv"),
        "chunk": ("chunk_size", "mamba_chunk_size"),
        "conv_bias": ("use_conv_bias",),
        "proj_bias": ("use_bias",),
    },
    defaults=dict(
        heads=128, head_dim=64, state=128, groups=8, conv=4, chunk=128, conv_bias=True,
        proj_bias=False,
    ),
)  # fmt: skip

#: ``hybrid_override_pattern``'s characters (NemotronHConfig._pattern_to_list).
_NEMOTRON_BLOCKS = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}


def nemotron_h(r: Reader) -> dict:
    """NemotronHConfig (Nemotron-H): a stack of single-branch blocks, each one RMSNorm, one
    mixer and a residual add (``NemotronHBlock``, l. 934) — a Mamba-2 mixer (``M``), an
    attention without positions (``*``: ``NemotronHAttention`` has no rotary), or a plain
    MLP (``-``: up, ReLU², down of ``intermediate_size``) — read from ``layers_block_type``
    / ``hybrid_override_pattern``. A block is a layer kind with one norm whose other branch
    is ``none``. Routed-expert blocks (``E``, ``NemotronHMoE``) are the MoE feed-forward
    kind: non-gated ReLU² experts of ``moe_intermediate_size`` (``NemotronHExperts``,
    up and down only), a plain shared expert, and ``NemotronHTopkRouter`` — sigmoid scores
    in FP32, a correction-bias buffer, the top-k within ``topk_group`` of ``n_group``
    groups (``FeedForward.router_groups``). With ``moe_latent_size`` (the
    fc1/fc2_latent_proj around the experts), ``mlp_bias`` (a bias on the shared expert
    the routed ones lack) or unnormalised top-k weights the block is no kind's: such a
    config is read from transformers' build and answered by the dry run
    (:class:`~introspect.adapters.families.BuildInstead`).

    Source: ``transformers/models/nemotron_h/{configuration,modeling}_nemotron_h.py``."""
    from . import BuildInstead

    cls = "NemotronHConfig"
    shape = {
        "hidden_size": r.integer("hidden_size"),
        "num_attention_heads": r.integer("num_attention_heads"),
        "vocab_size": r.integer("vocab_size"),
    }
    types = r.items("layers_block_type", str)
    if types is None:
        key, pattern = r.raw("hybrid_override_pattern")
        if pattern is MISSING or not isinstance(pattern, str) or not pattern:
            raise r.fail(f"{key} is missing; a nemotron_h config.json must give its blocks")
        unknown = sorted(set(pattern) - set(_NEMOTRON_BLOCKS))
        if unknown:
            raise r.fail(f"{key}: {''.join(unknown)!r} is not a block (M, *, - or E)")
        types = [_NEMOTRON_BLOCKS[c] for c in pattern]
    latent = r.raw("moe_latent_size")[1]
    odd = {
        "a latent projection": latent not in (MISSING, None),
        "mlp_bias": r.flag("mlp_bias", False),
        "norm_topk_prob false": not r.flag("norm_topk_prob", True),
    }
    if "moe" in types and any(odd.values()):
        # The latent projections (fc1/fc2_latent_proj), a bias on the shared expert that
        # the routed ones lack, or unnormalised weights are no feed-forward kind's.
        n = types.count("moe")
        why = next(w for w, yes in odd.items() if yes)
        raise BuildInstead(
            f"NemotronHMoE (routed-expert blocks, E, with {why}) in {n} of {len(types)} layers",
            modelled=("NemotronHMamba2Mixer",),
        )
    L = len(types)
    given = r.integer("num_hidden_layers", default=L)
    if given != L:
        r.assumptions.append(f"num_hidden_layers={given} ignored: the pattern has {L} blocks")
    d = shape["hidden_size"]
    fields = dict(
        shape,
        num_hidden_layers=L,
        num_key_value_heads=r.kv_heads(8, cls),
        head_dim=r.integer("head_dim", default=128, why=f"{cls} default 128"),
        intermediate_size=r.integer("intermediate_size"),
        norm="rmsnorm",
        norm_bias=False,
        ffn="plain",
        hidden_act=r.text("mlp_hidden_act", default="relu2"),
        position_embedding="none",
        norms_per_layer=1,
        mlp_bias=r.flag("mlp_bias", False, f"{cls} default false"),
    )
    mixer = mamba2_mixer(r, d, cls=cls, **_NEMOTRON_MAMBA)
    bias = r.flag("attention_bias", False, f"{cls} default false")
    full = attention(fields, rope=False, qkv_bias=bias, o_bias=bias)
    none_ff = FeedForward(ffn="none", intermediate_size=1)
    mlp = dense(fields, ffn="plain")
    no_mixer = Attention(kind="none", num_attention_heads=1, num_key_value_heads=1, head_dim=1)
    experts = FeedForward(
        ffn="plain",
        intermediate_size=r.integer("moe_intermediate_size", default=7688, why=f"{cls} default"),
        num_experts=r.integer("n_routed_experts", default=8, why=f"{cls} default 8"),
        top_k=r.integer("num_experts_per_tok", default=2, why=f"{cls} default 2"),
        shared_intermediate_size=r.integer(
            "moe_shared_expert_intermediate_size", default=7688, why=f"{cls} default"
        ),
        router="sigmoid",
        router_correction_bias=True,
        router_groups=r.integer("n_group", default=1, why=f"{cls} default 1"),
        router_topk_groups=r.integer("topk_group", default=1, why=f"{cls} default 1"),
    )
    if "moe" in types:
        E, groups, chosen = experts.num_experts, experts.router_groups, experts.router_topk_groups
        if E % groups:
            raise r.fail(f"n_group: {groups} groups cannot split n_routed_experts={E}")
        if chosen > groups or experts.top_k > chosen * (E // groups):
            raise r.fail(
                f"topk_group: {chosen} of {groups} groups hold fewer than "
                f"num_experts_per_tok={experts.top_k} experts"
            )
    blocks = {
        "moe": LayerKind(attention=no_mixer, feed_forward=experts, norms=1),
        "linear_attention": LayerKind(attention=mixer, feed_forward=none_ff, norms=1),
        "full_attention": LayerKind(attention=full, feed_forward=none_ff, norms=1),
        "mlp": LayerKind(attention=no_mixer, feed_forward=mlp, norms=1),
    }
    kinds = []
    for t in types:
        if t not in blocks:
            raise r.fail(f"layers_block_type: {t!r} is not a nemotron_h block")
        kinds.append(blocks[t])
    fields.update(
        max_position_embeddings=context(r, 4096),
        tie_word_embeddings=r.tied(False, cls),
        layers=runs_from_list(kinds),
    )
    return fields
