"""RecurrentGemma (Griffin): RG-LRU recurrent blocks and local multi-query attention.

Sources: ``transformers/models/recurrent_gemma/configuration_recurrent_gemma.py`` (5.24:
the defaults l. 59-80; ``__post_init__`` l. 82-91 sets ``lru_width`` to ``hidden_size``
when null, ``head_dim = hidden_size // num_attention_heads`` whatever the config says,
``num_key_value_heads`` to the head count when null, and the rotary fraction 0.5;
``layers_block_type`` l. 99-102 repeats ``block_types`` over the layers) and
``modeling_recurrent_gemma.py``: ``RecurrentGemmaDecoderLayer`` (l. 491-530:
``temporal_pre_norm``, the temporal block, ``channel_pre_norm``, ``mlp_block``),
``RecurrentGemmaRMSNorm`` (l. 45-61: ``x·rstd·(1 + weight)``, one weight per feature),
``RecurrentGemmaAttention`` (l. 200-262: q/k/v with ``attention_bias``, o_proj always
with a bias, ``sliding_window = attention_window_size``, rotary on
``partial_rotary_factor`` of each head), ``RecurrentGemmaRecurrentBlock`` (the layer kind
``rglru``, :mod:`introspect.refined.rglru`), ``RecurrentGemmaMlp`` (l. 475-489: gate and
up of ``intermediate_size // 2`` with biases, ``hidden_activation``), the model's
``normalizer`` (the embedding times sqrt(hidden_size), a buffer) and the causal LM's
``tanh(logits / cap) · cap`` with ``logits_soft_cap``; embeddings tied by default.
"""

from __future__ import annotations

from introspect.adapters.config_reader import MISSING, Reader

from introspect.layers import Attention, FeedForward, LayerKind, runs_from_list

CLS = "RecurrentGemmaConfig"
#: ``block_types`` → the layer kinds (``layers_block_type``).
BLOCKS = ("recurrent", "attention")


def _rotary_factor(r: Reader) -> float:
    """``partial_rotary_factor``: in ``rope_parameters`` (5.x), else top level, else the
    class's 0.5."""
    rope = r.config.get("rope_parameters")
    value = rope.get("partial_rotary_factor") if isinstance(rope, dict) else None
    if value is None:
        value = r.number("partial_rotary_factor", 0.5)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise r.fail(f"partial_rotary_factor must be between 0 and 1, got {value!r}")
    return float(value)


def _block_types(r: Reader, L: int) -> list[str]:
    key, value = r.raw("block_types")
    if value is MISSING:
        value = ["recurrent", "recurrent", "attention"]
        r.assumptions.append(f"{key} absent: {CLS} default recurrent, recurrent, attention")
    if not isinstance(value, list | tuple) or not value or any(v not in BLOCKS for v in value):
        raise r.fail(f"{key} must be a non-empty list of 'recurrent' / 'attention', got {value!r}")
    return [value[i % len(value)] for i in range(L)]


def recurrent_gemma(r: Reader) -> dict:
    """RecurrentGemmaConfig: ``block_types`` cycled over the layers; a recurrent layer's
    temporal block is the RG-LRU block (``lru_width`` channels in ``num_attention_heads``
    diagonal blocks, a causal conv of ``conv1d_width`` taps), an attention layer's a
    local multi-query attention over ``attention_window_size`` keys; every layer a gated
    MLP with biases of ``intermediate_size // 2``. ``lru_width`` not divisible by the
    head count, or a width that is not positive, is one line naming the key."""
    d = r.integer("hidden_size")  # a size: the config gives it
    L = r.integer("num_hidden_layers", default=26, why=f"{CLS} default 26")
    heads = r.integer("num_attention_heads", default=10, why=f"{CLS} default 10")
    kv = r.integer("num_key_value_heads", default=heads, why=f"{CLS} default: {heads} heads")
    if heads % kv:
        raise r.fail(f"num_key_value_heads={kv} must divide num_attention_heads={heads}")
    if d < heads:
        raise r.fail(f"hidden_size={d} leaves no head_dim for num_attention_heads={heads}")
    width = r.integer("lru_width", default=d, why=f"{CLS}: null means hidden_size = {d}")
    if width % heads:
        raise r.fail(
            f"lru_width={width} must be divisible by num_attention_heads={heads} "
            "(the RG-LRU's block-diagonal gates)"
        )
    conv = r.integer("conv1d_width", default=4, why=f"{CLS} default 4")
    window = r.integer("attention_window_size", default=2048, why=f"{CLS} default 2048")
    inter = r.integer("intermediate_size", default=3 * 2560, why=f"{CLS} default 7680")
    if inter < 2:
        raise r.fail(f"intermediate_size={inter} leaves the MLP (intermediate_size // 2) no width")
    act = r.text("hidden_activation", "hidden_act", default="gelu_pytorch_tanh")
    bias = r.flag("attention_bias", False, f"{CLS} default false")
    cap = r.number("logits_soft_cap", 30.0)
    head_dim = d // heads
    local = Attention(
        kind="sliding",
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=head_dim,
        qkv_bias=bias,
        o_bias=True,
        window=window,
    )
    recurrent = Attention(
        kind="rglru",
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=width // heads,
        lru_width=width,
        lru_conv_width=conv,
    )
    mlp = FeedForward(ffn="gated", intermediate_size=inter // 2, bias=True)
    kinds = [
        LayerKind(attention=recurrent if t == "recurrent" else local, feed_forward=mlp)
        for t in _block_types(r, L)
    ]
    return dict(
        hidden_size=d,
        num_hidden_layers=L,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=head_dim,
        vocab_size=r.integer("vocab_size", default=256000, why=f"{CLS} default 256000"),
        intermediate_size=inter // 2,
        norm="rmsnorm",
        norm_bias=False,
        ffn="gated",
        hidden_act=act,
        qkv_bias=bias,
        o_bias=True,
        mlp_bias=True,
        position_embedding="rope",
        sliding_window=window,
        partial_rotary_factor=_rotary_factor(r),
        final_logit_softcapping=cap if cap > 0 else None,
        tie_word_embeddings=r.tied(True, CLS),
        layers=runs_from_list(kinds),
    )
