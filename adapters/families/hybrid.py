"""Hybrid stacks: Qwen3-Next (Gated DeltaNet linear-attention layers between gated full
attention layers, every feed-forward a mixture of experts with a gated shared expert).

Source: ``transformers/models/qwen3_next/{configuration,modeling}_qwen3_next.py`` (5.x):
``layer_types`` (by default three linear layers, then a full one:
``full_attention_interval`` 4); ``Qwen3NextAttention`` (q_proj 2·h·head_dim for the
output gate, per-head q/k RMSNorms); ``Qwen3NextGatedDeltaNet`` (in_proj_qkvz, in_proj_ba,
a depthwise conv, dt_bias, A_log, a gated RMSNorm, out_proj); ``Qwen3NextSparseMoeBlock``
(experts, router, shared expert and its sigmoid gate), sparse by Qwen-MoE's rule.
"""

from __future__ import annotations

from introspect.adapters.config_reader import Reader

from introspect.layers import Attention, LayerKind, runs_from_list

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
