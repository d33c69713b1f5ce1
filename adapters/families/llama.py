"""Llama and the families that share its block: Mistral, Qwen2, Qwen3, OLMo 2.

Sources: ``transformers/models/{llama,mistral,qwen2,qwen3,olmo2}/configuration_*.py`` and
``modeling_*.py`` (5.x). Mistral applies ``sliding_window`` to every layer (the mask
function switches on it); Qwen2/Qwen3 only with ``use_sliding_window``, to the layers
``layer_types`` names (by default those from ``max_window_layers`` on).
"""

from __future__ import annotations

from introspect.adapters.config_reader import Reader

from ._common import context, explicit_window, rmsnorm_gated, sliding_window, window_kinds


def llama(r: Reader) -> dict:
    """LlamaConfig: ``attention_bias`` on q, k, v and o; ``mlp_bias`` on all three
    feed-forward projections."""
    cls = "LlamaConfig"
    attention_bias = r.flag("attention_bias", False)
    return dict(
        rmsnorm_gated(r, kv=None, head_dim=None, cls=cls),
        qkv_bias=attention_bias,
        o_bias=attention_bias,
        mlp_bias=r.flag("mlp_bias", False),
        tie_word_embeddings=r.tied(False, cls),
    )


def mistral(r: Reader) -> dict:
    """MistralConfig: Llama without biases; 8 K/V heads unless the config says otherwise;
    every layer attends within ``sliding_window`` (4096 by default; null = full)."""
    cls = "MistralConfig"
    fields = rmsnorm_gated(r, kv=8, head_dim=None, cls=cls)
    window = explicit_window(r, 4096, cls)
    return dict(
        fields,
        sliding_window=window,
        max_position_embeddings=context(r, 131072) if window else None,
        tie_word_embeddings=r.tied(False, cls),
    )


def _qwen_windows(r: Reader, fields: dict, cls: str) -> dict:
    """Qwen2/Qwen3: sliding layers only with ``use_sliding_window``; ``layer_types``
    (or, absent, the layers from ``max_window_layers`` on) say which."""
    window = sliding_window(r, enabled=r.flag("use_sliding_window", False))
    if not window:
        return {}
    L = fields["num_hidden_layers"]
    if r.items("layer_types", str, length=L) is None:
        first = r.integer("max_window_layers", default=28, why=f"{cls} default 28")
        r.config = {
            **r.config,
            "layer_types": [
                "sliding_attention" if i >= first else "full_attention" for i in range(L)
            ],
        }
    runs = window_kinds(r, fields, window=window)
    extra = {"max_position_embeddings": context(r, 32768)}
    return {**extra, "layers": runs} if runs else {}


def qwen2(r: Reader) -> dict:
    """Qwen2: biases on q, k and v (always), none on o or the feed-forward."""
    cls = "Qwen2Config"
    fields = dict(
        rmsnorm_gated(r, kv=32, head_dim=None, cls=cls),
        qkv_bias=True,
        tie_word_embeddings=r.tied(False, cls),
    )
    return {**fields, **_qwen_windows(r, fields, cls)}


def qwen3(r: Reader) -> dict:
    """Qwen3: RMSNorm on queries and keys per head (``head_dim`` weights each, shared by
    the heads); ``head_dim`` is explicit (128 by default) and need not be d/h."""
    cls = "Qwen3Config"
    attention_bias = r.flag("attention_bias", False)
    fields = dict(
        rmsnorm_gated(r, kv=32, head_dim=128, cls=cls),
        qkv_bias=attention_bias,
        o_bias=attention_bias,
        qk_norm="head",
        tie_word_embeddings=r.tied(False, cls),
    )
    return {**fields, **_qwen_windows(r, fields, cls)}


def olmo2(r: Reader) -> dict:
    """OLMo 2: RMSNorm on queries and keys over the full projection widths (q_dim and
    kv_dim weights); its two block norms sit after attention and after the feed-forward
    (still 2 per layer)."""
    cls = "Olmo2Config"
    attention_bias = r.flag("attention_bias", False)
    return dict(
        rmsnorm_gated(r, kv=None, head_dim=None, cls=cls),
        qkv_bias=attention_bias,
        o_bias=attention_bias,
        qk_norm="full",
        tie_word_embeddings=r.tied(False, cls),
    )
