"""GPT-2, Phi (1, 1.5, 2), Phi-3 and Qwen (remote code): the families with their own
key names or fused projections.

Sources: ``transformers/models/{gpt2,phi,phi3}/configuration_*.py`` and ``modeling_*.py``
(5.x); for ``qwen`` (Qwen-7B, remote code) the repository's own ``configuration_qwen.py``
/ ``modeling_qwen.py``.
"""

from __future__ import annotations

from introspect.adapters.config_reader import Reader

from ._common import context, explicit_window, rmsnorm_gated


def phi(r: Reader) -> dict:
    """Phi (1, 1.5, 2): a parallel block with one LayerNorm (with bias) per layer; biases
    on q, k, v, the output ``dense``, ``fc1``/``fc2`` and the lm_head; a plain
    feed-forward; rotary on ``partial_rotary_factor`` of each head (no parameters);
    optional per-head LayerNorms on q and k (``qk_layernorm``)."""
    cls = "PhiConfig"
    factor = r.number("partial_rotary_factor", 0.5)
    if not 0.0 <= factor <= 1.0:
        raise r.fail(f"partial_rotary_factor must be between 0 and 1, got {factor}")
    return dict(
        r.shape(),
        num_key_value_heads=r.kv_heads(None, cls),
        head_dim=r.head_dim(None, cls),
        intermediate_size=r.integer("intermediate_size"),
        norm="layernorm",
        norm_bias=True,
        norms_per_layer=1,
        ffn="plain",
        hidden_act=r.text("hidden_act", default="gelu_new"),
        qkv_bias=True,
        o_bias=True,
        mlp_bias=True,
        lm_head_bias=True,
        qk_norm="head" if r.flag("qk_layernorm", False) else "none",
        position_embedding="rope",
        tie_word_embeddings=r.tied(False, cls),
    )


def gpt2(r: Reader) -> dict:
    """GPT-2: learned positions (``n_positions`` rows), LayerNorm with bias, fused
    ``c_attn`` (d → 3d) and ``c_proj`` with biases, a plain d → ``n_inner`` → d
    feed-forward (4d when ``n_inner`` is null), the lm_head tied to ``wte``."""
    cls = "GPT2Config"
    if r.flag("add_cross_attention", False):
        raise r.fail("add_cross_attention=true (an encoder-decoder GPT-2) is not supported")
    d = r.integer("n_embd", "hidden_size")
    return dict(
        hidden_size=d,
        num_hidden_layers=r.integer("n_layer", "num_hidden_layers"),
        num_attention_heads=r.integer("n_head", "num_attention_heads"),
        vocab_size=r.integer("vocab_size", default=50257, why=f"{cls} default 50257"),
        intermediate_size=r.integer("n_inner", default=4 * d),
        norm="layernorm",
        norm_bias=True,
        ffn="plain",
        hidden_act=r.text("activation_function", default="gelu_new"),
        qkv_bias=True,
        o_bias=True,
        mlp_bias=True,
        fused_linears=("qkv",),
        position_embedding="learned",
        max_position_embeddings=r.integer(
            "n_positions", "max_position_embeddings", default=1024, why=f"{cls} default 1024"
        ),
        tie_word_embeddings=r.tied(True, cls),
    )


def qwen(r: Reader) -> dict:
    """Qwen (Qwen-7B/14B/72B, remote code): a fused ``c_attn`` (d → 3·kv_channels·h) with
    bias, ``c_proj`` and the feed-forward's ``w1``/``w2``/``c_proj`` biased only without
    ``no_bias``. ``intermediate_size`` counts both up-side projections: ``w1`` and ``w2``
    are each ``intermediate_size / 2`` wide (a SwiGLU). ``seq_length`` is the training
    context and adds no parameters (rotary positions)."""
    cls = "QWenConfig"
    no_bias = r.flag("no_bias", True, f"{cls} default true")
    ff = r.integer("intermediate_size")
    if ff % 2:
        raise r.fail(f"intermediate_size must be even (w1 and w2 each take half of it), got {ff}")
    r.integer("seq_length", default=None)  # type check only
    return dict(
        r.shape(),
        head_dim=r.integer("kv_channels", default=128, why=f"{cls} default 128"),
        intermediate_size=ff // 2,
        norm="rmsnorm",
        norm_bias=False,
        ffn="gated",
        hidden_act="silu",
        qkv_bias=True,
        o_bias=not no_bias,
        mlp_bias=not no_bias,
        fused_linears=("qkv",),
        position_embedding="rope",
        tie_word_embeddings=r.tied(False, cls),
    )


def phi3(r: Reader) -> dict:
    """Phi-3: Llama's block with Q, K, V fused into one ``qkv_proj`` (d → q + 2·kv) and
    gate and up into one ``gate_up_proj`` (d → 2f) — the same parameters as separate
    projections; no biases; ``sliding_window`` on every layer when set (the mask
    function switches on it; null by default)."""
    cls = "Phi3Config"
    fields = rmsnorm_gated(r, kv=None, head_dim=None, cls=cls)
    window = explicit_window(r, None, cls)
    return dict(
        fields,
        fused_linears=("qkv", "gate_up"),
        sliding_window=window,
        max_position_embeddings=context(r, 4096) if window else None,
        tie_word_embeddings=r.tied(False, cls),
    )
