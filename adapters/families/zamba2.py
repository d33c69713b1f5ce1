"""Zamba2: a stack of Mamba-2 layers, some of which (``hybrid``) first run a transformer
block whose weights they share.

Source: ``transformers/models/zamba2/{configuration,modeling}_zamba2.py`` (5.x).
``Zamba2Config.__post_init__``: ``intermediate_size`` 4·d when absent, the shared
attention over ``attention_hidden_size`` = 2·d in heads of ``attention_head_dim`` =
2·d / heads, the mixer's head width ``mamba_expand``·d / ``n_mamba_heads``, and the
default ``layers_block_type`` (54 layers, 9 of them hybrid); legacy ``mamba`` names
read as ``linear_attention``. ``Zamba2Model.get_layers``: every layer is a
``Zamba2MambaDecoderLayer`` (one RMSNorm, the mixer, a residual add; no MLP); a hybrid
layer (``Zamba2HybridLayer``) adds a ``shared_transformer`` — one of ``num_mem_blocks``
``Zamba2AttentionDecoderLayer``, tied by hybrid-layer order (block ``j mod
num_mem_blocks`` for the j-th hybrid layer) — and its own ``linear`` d → d, whose output
joins the mixer layer's input before its norm. The shared block is
``RMSNorm(2·d)`` over ``cat(hidden, embeddings)``, attention (q/k/v 2·d → heads ×
head_dim, o_proj → d; rotary only with ``use_mem_rope``), ``RMSNorm(d)`` and
``Zamba2MLP`` (one ``gate_up_proj`` d → 2·f, ``hidden_act``, down; bias
``add_bias_linear``), with per-use adapters of ``adapter_rank`` on gate_up (always) and
on q, k and v (``use_shared_attention_adapter``). ``Zamba2MambaMixer`` is Granite
4.0-H's mixer line for line (the same ``mamba2_chunk_scan`` and gated norm; its conv
has a bias whatever ``use_conv_bias`` says: ``nn.Conv1d(..., bias=True)``), priced by
:mod:`introspect.refined.mamba2`."""

from __future__ import annotations

from introspect.adapters.config_reader import MISSING, Reader

from introspect.layers import Attention, FeedForward, LayerKind, SharedBlock, runs_from_list

CLS = "Zamba2Config"

#: ``Zamba2Config.__post_init__``'s default ``layers_block_type``.
DEFAULT_BLOCKS = (
    ["linear_attention"]
    + (["linear_attention"] * 5 + ["hybrid"]) * 7
    + ["linear_attention"] * 4
    + ["hybrid"]
    + ["linear_attention"] * 3
    + ["hybrid"]
    + ["linear_attention"] * 2
)
#: ``configuration_utils._LEGACY_LAYER_TYPE_REMAP`` as it applies here.
_LEGACY = {"mamba": "linear_attention"}


def _int(r: Reader, key: str, default: int) -> int:
    return r.integer(key, default=default, why=f"{CLS} default {default}")


def _blocks(r: Reader, L: int) -> list[str]:
    """The layers' types: ``layers_block_type`` (``num_hidden_layers`` long, as
    transformers' ``validate_layer_type`` requires), else the class's 54-layer default."""
    key, value = r.raw("layers_block_type")
    if value is MISSING:
        if L != len(DEFAULT_BLOCKS):
            raise r.fail(
                f"{key} is missing and num_hidden_layers is {L}: {CLS}'s default pattern "
                f"has {len(DEFAULT_BLOCKS)} layers; give the config's layers_block_type"
            )
        r.assumptions.append(f"{key} absent: {CLS}'s default 54-layer pattern (9 hybrid)")
        return list(DEFAULT_BLOCKS)
    types = r.items(key, str, length=L)
    types = [_LEGACY.get(t, t) for t in types]
    for t in types:
        if t not in ("linear_attention", "hybrid"):
            raise r.fail(f"{key}: {t!r} is not a zamba2 layer (mamba / linear_attention, hybrid)")
    return types


def _mixer(r: Reader, d: int) -> Attention:
    """``Zamba2MambaMixer``'s sizes: width expand·d in ``n_mamba_heads`` heads,
    ``mamba_ngroups`` groups of ``mamba_d_state``, a ``mamba_d_conv``-tap conv (always
    biased), ``chunk_size``; ``add_bias_linear`` on in_proj and out_proj."""
    heads = _int(r, "n_mamba_heads", 8)
    expand = _int(r, "mamba_expand", 2)  # an int in transformers 5's strict Zamba2Config
    inner = expand * d
    if inner % heads:
        raise r.fail(
            f"n_mamba_heads={heads} must divide the mixer's width mamba_expand·hidden_size "
            f"= {inner}"
        )
    groups = _int(r, "mamba_ngroups", 1)
    if heads % groups:
        raise r.fail(f"mamba_ngroups={groups} must divide n_mamba_heads={heads}")
    return Attention(
        kind="mamba2",
        num_attention_heads=1,
        num_key_value_heads=1,
        head_dim=1,
        mamba_num_heads=heads,
        mamba_head_dim=inner // heads,
        mamba_state_size=_int(r, "mamba_d_state", 64),
        mamba_n_groups=groups,
        mamba_conv_kernel=_int(r, "mamba_d_conv", 4),
        mamba_chunk_size=_int(r, "chunk_size", 256),
        mamba_conv_bias=True,  # nn.Conv1d(..., bias=True): use_conv_bias is not read
        mamba_proj_bias=r.flag("add_bias_linear", False, f"{CLS} default false"),
    )


def _adapter_slots(r: Reader, types: list[str], blocks: int) -> int:
    """How many adapter slots each shared block's lists have (``len(hybrid_layer_ids)``:
    a saved config's list overrides the one ``__post_init__`` derives, and every slot
    ``i`` with ``i mod num_mem_blocks`` = the block's id holds a real adapter). The j-th
    hybrid layer runs slot ``hybrid_layer_ids.index(layer)``, which must be one of its
    block's (else the class runs an ``nn.Identity`` or fails)."""
    hybrid = [i for i, t in enumerate(types) if t == "hybrid"]
    ids = r.items("hybrid_layer_ids", int)
    if ids is None:
        return len(hybrid)
    for j, layer in enumerate(hybrid):
        if layer not in ids or ids.index(layer) % blocks != j % blocks:
            raise r.fail(
                f"hybrid_layer_ids={ids} does not list hybrid layer {layer} at a slot of its "
                f"shared block ({j % blocks} of num_mem_blocks={blocks}); the layers are "
                f"{hybrid}"
            )
    return len(ids)


def zamba2(r: Reader) -> dict:
    """Zamba2Config → the spec's fields: one layer kind for the Mamba-2 layers (one
    norm, the mixer, no feed-forward) and one per shared block for the hybrid layers
    (the same plus :class:`~introspect.layers.SharedBlock`)."""
    d = r.integer("hidden_size")
    heads = r.integer("num_attention_heads")
    vocab = r.integer("vocab_size")
    W = 2 * d  # attention_hidden_size
    if W % heads:
        raise r.fail(
            f"num_attention_heads={heads} must divide the shared attention's width "
            f"2·hidden_size = {W}"
        )
    kv = r.kv_heads(None, CLS) or heads
    if heads % kv:
        raise r.fail(f"num_key_value_heads={kv} must divide num_attention_heads={heads}")
    _, width = r.raw("attention_hidden_size")
    if width is not MISSING and width != W:
        raise r.fail(
            f"attention_hidden_size={width!r} is not 2·hidden_size = {W}: the shared block "
            "reads the layer input concatenated with the embeddings (transformers' class "
            "fails its forward otherwise)"
        )
    # A saved config's attention_head_dim (head_dim) overrides __post_init__'s 2·d/heads:
    # PreTrainedConfig sets the extra keys after it.
    head = r.integer("attention_head_dim", default=W // heads)
    mixer = _mixer(r, d)  # its sizes first: the line names a size key before the layout
    L = _int(r, "num_hidden_layers", 54)
    types = _blocks(r, L)
    f = r.integer("intermediate_size", default=4 * d, why=f"{CLS}: 4·hidden_size")
    bias = r.flag("add_bias_linear", False, f"{CLS} default false")
    act = r.text("hidden_act", default="gelu")
    rope = r.flag("use_mem_rope", False, f"{CLS} default false")
    blocks = _int(r, "num_mem_blocks", 1)
    rank = _int(r, "adapter_rank", 128)
    att_adapters = r.flag("use_shared_attention_adapter", False, f"{CLS} default false")
    if att_adapters and kv != heads:
        # Zamba2Attention adds linear_k/v_adapter_list's 2·d-wide outputs to k_proj and
        # v_proj's kv·head_dim ones: the class builds but its forward fails.
        raise r.fail(
            f"use_shared_attention_adapter with num_key_value_heads={kv} < "
            f"num_attention_heads={heads}: Zamba2Attention's k/v adapters are 2·hidden_size "
            "wide and cannot be added to the narrower k/v projections (transformers' class "
            "fails its forward); use num_key_value_heads = num_attention_heads"
        )
    none = FeedForward(ffn="none", intermediate_size=1)
    mamba = LayerKind(attention=mixer, feed_forward=none, norms=1)
    shared_attention = Attention(
        kind="full", num_attention_heads=heads, num_key_value_heads=kv, head_dim=head, rope=rope
    )
    mlp = FeedForward(ffn="gated", intermediate_size=f, bias=bias)
    tied = r.tied(True, CLS)
    uses = types.count("hybrid")
    if not tied and uses:
        # PreTrainedModel.get_expanded_tied_weights_keys returns {} without
        # tie_word_embeddings, so the shared_transformer ties are dropped too: each
        # hybrid layer holds its own copy, with the adapters of every use of its block.
        r.assumptions.append(
            "tie_word_embeddings false: transformers ties no shared block either, so each "
            "hybrid layer holds its own copy and every use's adapters of it"
        )
    slots = _adapter_slots(r, types, blocks)
    kinds, hybrid = [], 0
    for t in types:
        if t != "hybrid":
            kinds.append(mamba)
            continue
        block_id = hybrid % blocks
        held = len(range(block_id, slots, blocks))  # the adapter sets the block holds
        run = len(range(block_id, uses, blocks)) if tied else 1  # and its uses run
        shared = SharedBlock(
            block_id=block_id if tied else hybrid,
            attention=shared_attention,
            feed_forward=mlp,
            input_width=W,
            attention_adapter_rank=rank if att_adapters else 0,
            ffn_adapter_rank=rank,
            idle_adapters=held - run,
        )
        hybrid += 1
        kinds.append(LayerKind(attention=mixer, feed_forward=none, norms=1, shared=shared))
    return dict(
        hidden_size=d,
        num_hidden_layers=L,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=head,
        vocab_size=vocab,
        intermediate_size=f,
        norm="rmsnorm",
        norm_bias=False,
        ffn="gated",
        hidden_act=act,
        mlp_bias=bias,
        position_embedding="rope" if rope else "none",
        norms_per_layer=1,
        fused_linears=("gate_up",),
        max_position_embeddings=r.integer(
            "max_position_embeddings", default=4096, why=f"{CLS} default 4096"
        ),
        tie_word_embeddings=tied,
        layers=runs_from_list(kinds),
    )
