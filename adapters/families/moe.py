"""Mixtures of experts: Mixtral, Qwen2-MoE, Qwen3-MoE, gpt-oss, DeepSeek-V3, Llama 4.

Sources: ``transformers/models/<family>/configuration_*.py`` and ``modeling_*.py`` (5.x):

* Qwen2-MoE / Qwen3-MoE (``*DecoderLayer``): layer i is sparse when it is not in
  ``mlp_only_layers`` and ``(i + 1) % decoder_sparse_step == 0``, else a dense MLP of
  ``intermediate_size``; experts are ``moe_intermediate_size`` wide; Qwen2-MoE adds a
  shared expert (``shared_expert_intermediate_size``) with a sigmoid gate (d → 1) and
  reads ``qkv_bias``; Qwen3-MoE has per-head q/k norms.
* gpt-oss: every projection biased (``attention_bias``), one sink logit per head,
  experts with biases, a router with a bias; ``layer_types`` alternate sliding (W = 128)
  and full attention.
* DeepSeek-V3: MLA in every layer; the first ``first_k_dense_replace`` layers dense
  (``intermediate_size``), the rest ``n_routed_experts`` routed experts plus
  ``n_shared_experts`` shared ones of ``moe_intermediate_size``; the router's
  ``e_score_correction_bias`` is a buffer; ``num_nextn_predict_layers`` multi-token
  prediction layers are in the published checkpoint but not built.
* Llama 4 text: layers in ``moe_layers`` (every ``interleave_moe_layer_step``-th) have
  16 routed experts of ``intermediate_size`` and a shared expert of the same width, the
  others a dense MLP of ``intermediate_size_mlp``; ``no_rope_layers`` (0 = NoPE) and, on
  rotary layers, chunked attention (``attention_chunk_size``) and a weightless L2 q/k
  norm (``use_qk_norm``).
"""

from __future__ import annotations

from introspect.adapters.config_reader import Reader

from introspect.layers import LayerKind, runs_from_list

from ._common import (
    LAYER_TYPES,
    attention,
    context,
    dense,
    explicit_window,
    rmsnorm_gated,
)


def mixtral(r: Reader) -> dict:
    """Mixtral: Mistral's attention with a sparse feed-forward: ``num_local_experts``
    gated experts per layer, a bias-free router (d × E), ``num_experts_per_tok`` active."""
    cls = "MixtralConfig"
    window = explicit_window(r, None, cls)
    return dict(
        rmsnorm_gated(r, kv=8, head_dim=None, cls=cls),
        num_local_experts=r.integer(
            "num_local_experts", "num_experts", default=8, why=f"{cls} default 8"
        ),
        num_experts_per_tok=r.integer("num_experts_per_tok", default=2, why=f"{cls} default 2"),
        sliding_window=window,
        max_position_embeddings=context(r, 131072) if window else None,
        tie_word_embeddings=r.tied(False, cls),
    )


def _sparse_layers(r: Reader, L: int, cls: str) -> list[bool]:
    """Qwen-MoE's rule for which layers are sparse."""
    step = r.integer("decoder_sparse_step", default=1, why=f"{cls} default 1")
    only_mlp = set(r.items("mlp_only_layers", int) or [])
    default = {"Qwen2MoeConfig": 60, "Qwen3NextConfig": 512}.get(cls, 128)
    experts = r.count("num_experts", default)
    return [experts > 0 and i not in only_mlp and (i + 1) % step == 0 for i in range(L)]


def _qwen_moe(r: Reader, cls: str, *, shared: bool) -> dict:
    defaults = (
        dict(kv=16, experts=60, top_k=4, expert=1408)
        if shared
        else dict(kv=4, experts=128, top_k=8, expert=768)
    )
    fields = rmsnorm_gated(r, kv=defaults["kv"], head_dim=None, cls=cls)
    if shared:
        bias = r.flag("qkv_bias", True, f"{cls} default true")
        fields.update(qkv_bias=bias)
    else:
        bias = r.flag("attention_bias", False)
        fields.update(qkv_bias=bias, o_bias=bias, qk_norm="head")
    L = fields["num_hidden_layers"]
    experts = r.integer("num_experts", default=defaults["experts"], why=f"{cls} default")
    top_k = r.integer("num_experts_per_tok", default=defaults["top_k"], why=f"{cls} default")
    width = r.integer("moe_intermediate_size", default=defaults["expert"], why=f"{cls} default")
    moe = dense(
        fields,
        intermediate_size=width,
        num_experts=experts,
        top_k=top_k,
        shared_intermediate_size=(
            r.integer("shared_expert_intermediate_size", default=5632, why=f"{cls} default")
            if shared
            else 0
        ),
        shared_expert_gate=shared,
    )
    window = None
    if r.flag("use_sliding_window", False):
        window = r.integer("sliding_window", default=4096, why=f"{cls} default 4096")
        fields["max_position_embeddings"] = context(r, 32768)
    types = r.items("layer_types", str, length=L) if window and shared else None
    kinds = []
    for i, sparse in enumerate(_sparse_layers(r, L, cls)):
        # Qwen3-MoE slides every layer when enabled; Qwen2-MoE those layer_types names.
        slides = window is not None and (types is None or types[i] == "sliding_attention")
        kind = "sliding" if slides else "full"
        att = attention(fields, kind=kind, window=window if slides else None)
        kinds.append(LayerKind(attention=att, feed_forward=moe if sparse else dense(fields)))
    fields.update(
        num_local_experts=experts,
        num_experts_per_tok=top_k,
        tie_word_embeddings=r.tied(False, cls),
        layers=runs_from_list(kinds),
        # The flat fields describe the main (routed) kind: an expert's width.
        intermediate_size=width if any(_sparse_layers(r, L, cls)) else fields["intermediate_size"],
    )
    return fields


def qwen2_moe(r: Reader) -> dict:
    return _qwen_moe(r, "Qwen2MoeConfig", shared=True)


def qwen3_moe(r: Reader) -> dict:
    return _qwen_moe(r, "Qwen3MoeConfig", shared=False)


def gpt_oss(r: Reader) -> dict:
    """GptOssConfig: 64 heads of 64, 8 K/V heads, 128 experts of 2880 with biases, 4
    active, a biased router, sinks; sliding (128) and full layers alternating."""
    cls = "GptOssConfig"
    shape = {
        "hidden_size": r.integer("hidden_size"),
        "num_hidden_layers": r.integer("num_hidden_layers"),
        "num_attention_heads": r.integer("num_attention_heads"),
        "vocab_size": r.integer("vocab_size"),
    }
    fields = dict(
        shape,
        num_key_value_heads=r.kv_heads(8, cls),
        head_dim=r.head_dim(64, cls),
        intermediate_size=r.integer("intermediate_size"),
        norm="rmsnorm",
        norm_bias=False,
        ffn="gated",
        hidden_act="swiglu (clamped)",
        qkv_bias=r.flag("attention_bias", True, f"{cls} default true"),
        position_embedding="rope",
        tie_word_embeddings=r.tied(False, cls),
    )
    fields["o_bias"] = fields["qkv_bias"]
    L = fields["num_hidden_layers"]
    experts = r.integer("num_local_experts", "num_experts", default=128, why=f"{cls} default")
    top_k = r.integer("num_experts_per_tok", default=4, why=f"{cls} default 4")
    window = explicit_window(r, 128, cls)
    types = r.items("layer_types", str, length=L) or [
        "sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(L)
    ]
    moe = dense(
        fields,
        bias=True,
        num_experts=experts,
        top_k=top_k,
        router_bias=True,
        router="topk_softmax",
        clamped_glu=True,
    )
    kinds = []
    for t in types:
        slides = LAYER_TYPES.get(t) == "sliding" and window is not None
        if LAYER_TYPES.get(t) not in ("sliding", "full"):
            raise r.fail(f"layer_types: {t!r} is not a layer type gpt_oss has")
        att = attention(
            fields,
            kind="sliding" if slides else "full",
            sinks=True,
            window=window if slides else None,
        )
        kinds.append(LayerKind(attention=att, feed_forward=moe))
    fields.update(
        num_local_experts=experts,
        num_experts_per_tok=top_k,
        mlp_bias=True,
        max_position_embeddings=context(r, 131072),
        layers=runs_from_list(kinds),
    )
    return fields
