"""Pieces every family reader shares: the Llama-style block, and per-layer kinds built
from the flat fields plus a family's ``layer_types``."""

from __future__ import annotations

from introspect.adapters.config_reader import Reader

from introspect.layers import Attention, FeedForward, LayerKind, LayerRun, runs_from_list

#: transformers' ``layer_types`` names (``configuration_utils.ALLOWED_LAYER_TYPES``) →
#: our attention kinds.
LAYER_TYPES = {
    "full_attention": "full",
    "sliding_attention": "sliding",
    "chunked_attention": "chunked",
    "linear_attention": "linear",
}


def rmsnorm_gated(r: Reader, *, kv: int | None, head_dim: int | None, cls: str) -> dict:
    """What Llama and its descendants share: RMSNorm pre-norm blocks (2 per layer), a
    gated feed-forward (gate, up, down) of ``intermediate_size``, rotary positions."""
    return dict(
        r.shape(),
        num_key_value_heads=r.kv_heads(kv, cls),
        head_dim=r.head_dim(head_dim, cls),
        intermediate_size=r.integer("intermediate_size"),
        norm="rmsnorm",
        norm_bias=False,
        ffn="gated",
        hidden_act=r.text("hidden_act", default="silu"),
        position_embedding="rope",
    )


def context(r: Reader, default: int | None) -> int | None:
    """``max_position_embeddings``: the context windows must fit in."""
    return r.integer("max_position_embeddings", default=default)


def attention(fields: dict, **changes) -> Attention:
    """The attention the flat fields describe, with ``changes``."""
    heads = fields["num_attention_heads"]
    base = dict(
        num_attention_heads=heads,
        num_key_value_heads=fields.get("num_key_value_heads") or heads,
        head_dim=fields.get("head_dim") or fields["hidden_size"] // heads,
        qkv_bias=fields.get("qkv_bias", False),
        o_bias=fields.get("o_bias", False),
        qk_norm=fields.get("qk_norm", "none"),
    )
    return Attention(**{**base, **changes})


def dense(fields: dict, **changes) -> FeedForward:
    """The dense feed-forward the flat fields describe, with ``changes``."""
    d = fields["hidden_size"]
    base = dict(
        ffn=fields.get("ffn", "gated"),
        intermediate_size=fields.get("intermediate_size") or 4 * d,
        bias=fields.get("mlp_bias", False),
    )
    return FeedForward(**{**base, **changes})


def window_kinds(
    r: Reader, fields: dict, *, window: int | None, norms: int = 2, ff: FeedForward | None = None
) -> tuple[LayerRun, ...] | None:
    """The runs a ``layer_types`` list gives (sliding layers with ``window``), or
    ``None`` when every layer is full attention (the homogeneous one-liner)."""
    L = fields["num_hidden_layers"]
    types = r.items("layer_types", str, length=L)
    if not types or not window or all(t == "full_attention" for t in types):
        return None
    ff = ff or dense(fields)
    kinds = []
    for t in types:
        kind = LAYER_TYPES.get(t)
        if kind not in ("full", "sliding"):
            raise r.fail(f"layer_types: {t!r} is not a layer type {r.model_type} has")
        att = attention(fields, kind=kind, window=window if kind == "sliding" else None)
        kinds.append(LayerKind(attention=att, feed_forward=ff, norms=norms))
    return runs_from_list(kinds)


def sliding_window(r: Reader, *, enabled: bool = True) -> int | None:
    """``sliding_window`` when the family applies it (``use_sliding_window`` where the
    class has that switch), else ``None``."""
    if not enabled:
        return None
    return r.integer("sliding_window", default=None)


def explicit_window(r: Reader, default: int | None, cls: str) -> int | None:
    """``sliding_window`` where null means no window (not "the default"): the config's
    value when it has the key, else the class default."""
    if "sliding_window" in r.config:
        return r.integer("sliding_window", default=None)
    if default is None:
        return r.integer("sliding_window", default=None)
    return r.integer("sliding_window", default=default, why=f"{cls} default {default}")
