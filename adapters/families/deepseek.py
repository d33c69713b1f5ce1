"""DeepSeek-V3, DeepSeek-V2 and MiniCPM3 (multi-head latent attention) and Llama 4.

Sources: ``transformers/models/deepseek_v3/{configuration,modeling}_deepseek_v3.py``,
``deepseek_v2/``, ``minicpm3/`` and
``transformers/models/llama4/{configuration,modeling}_llama4.py`` (5.x); see
:mod:`introspect.adapters.families.moe` for the structures in words.
"""

from __future__ import annotations

from introspect.adapters.config_reader import Reader

from introspect.layers import Attention, FeedForward, LayerKind, runs_from_list

from ._common import LAYER_TYPES, attention, context, dense, rmsnorm_gated

#: DeepseekV3Config's MLA defaults (q_lora_rank, kv_lora_rank, qk_rope_head_dim,
#: qk_nope_head_dim, v_head_dim); DeepseekV2Config's are the same.
_DEEPSEEK_MLA = (1536, 512, 64, 128, 128)


def _mla(
    r: Reader,
    heads: int,
    cls: str,
    defaults: tuple = _DEEPSEEK_MLA,
    kv_heads_default: int | None = None,
) -> Attention:
    """Multi-head latent attention; ``q_lora_rank: null`` means a plain q_proj.
    ``defaults`` are the class's for the five MLA keys (a None v_head_dim: the class
    computes it, the caller passes the value); ``kv_heads_default`` is the config class's
    ``num_key_value_heads`` (None: ``num_attention_heads``)."""
    _check_mla_kv_heads(r, heads, cls, kv_heads_default)
    q_default, kv_default, rope_default, nope_default, v_default = defaults
    if "q_lora_rank" in r.config and r.config["q_lora_rank"] is None:
        q_rank = None
    else:
        q_rank = r.integer("q_lora_rank", default=q_default, why=f"{cls} default {q_default}")
    bias = r.flag("attention_bias", False)
    v_head = r.integer("v_head_dim", default=v_default, why=f"{cls} default {v_default}")
    return Attention(
        kind="mla",
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=v_head,
        qkv_bias=bias,
        o_bias=bias,
        q_lora_rank=q_rank,
        kv_lora_rank=r.integer("kv_lora_rank", default=kv_default, why=f"{cls} default"),
        qk_rope_head_dim=r.integer("qk_rope_head_dim", default=rope_default, why=f"{cls} default"),
        qk_nope_head_dim=r.integer("qk_nope_head_dim", default=nope_default, why=f"{cls} default"),
        v_head_dim=v_head,
    )


def _check_mla_kv_heads(r: Reader, heads: int, cls: str, default: int | None) -> None:
    """MLA's keys and values come out of ``kv_b_proj`` with ``num_attention_heads``
    heads, yet the attention interface ``repeat_kv``s them by ``num_key_value_groups =
    num_attention_heads // num_key_value_heads`` (``DeepseekV3Attention.__init__``,
    ``eager_attention_forward``; SDPA does the same unless ``use_gqa_in_sdpa`` holds,
    which needs no mask and ``qk_head_dim == v_head_dim``, never DeepSeek's 192 / 128).
    With the two counts unequal the real step fails on a shape mismatch, so such a
    config is not counted as if it ran: it goes to the build and the dry run, whose one
    line names the class's error. Source: ``transformers/models/deepseek_v3/
    modeling_deepseek_v3.py``, ``deepseek_v2/``, ``minicpm3/`` and
    ``integrations/sdpa_attention.py`` (5.x)."""
    from . import BuildInstead

    kv = r.config.get("num_key_value_heads", default)
    if kv is None:
        kv = heads
    if kv != heads:
        raise BuildInstead(
            f"{cls.removesuffix('Config')}Attention with num_key_value_heads {kv} beside "
            f"num_attention_heads {heads}: MLA's keys and values have {heads} heads, and "
            f"repeat_kv by {heads} // {kv} does not match the queries"
        )


def deepseek_v3(r: Reader) -> dict:
    """DeepseekV3Config: MLA everywhere; dense first layers, then routed + shared experts;
    multi-token-prediction layers counted apart (not built by transformers)."""
    cls = "DeepseekV3Config"
    fields = rmsnorm_gated(r, kv=None, head_dim=None, cls=cls)
    L, h = fields["num_hidden_layers"], fields["num_attention_heads"]
    att = _mla(r, h, cls, kv_heads_default=128)
    experts = r.integer("n_routed_experts", "num_local_experts", default=256, why=f"{cls} default")
    top_k = r.integer("num_experts_per_tok", default=8, why=f"{cls} default 8")
    width = r.integer("moe_intermediate_size", default=2048, why=f"{cls} default 2048")
    shared = r.count("n_shared_experts", 1, f"{cls} default 1")
    first_dense = min(r.count("first_k_dense_replace", 3, f"{cls} default 3"), L)
    moe = FeedForward(
        intermediate_size=width,
        num_experts=experts,
        top_k=top_k,
        shared_intermediate_size=shared * width,
        router_correction_bias=True,
        router="sigmoid",
        router_fp32_input=True,
    )
    kinds = [
        LayerKind(attention=att, feed_forward=dense(fields) if i < first_dense else moe)
        for i in range(L)
    ]
    fields.update(
        num_key_value_heads=None,
        head_dim=att.qk_head_dim,
        intermediate_size=width if first_dense < L else fields["intermediate_size"],
        num_local_experts=experts if first_dense < L else 0,
        num_experts_per_tok=top_k if first_dense < L else 0,
        tie_word_embeddings=r.tied(False, cls),
        max_position_embeddings=context(r, 4096),
        layers=runs_from_list(kinds),
    )
    mtp = r.count("num_nextn_predict_layers", 1, f"{cls} default 1")
    if mtp:
        fields["unbuilt"] = f"{mtp} multi-token-prediction layer(s)"
        fields["_mtp"] = (mtp, kinds[-1])
    return fields


def deepseek_v2(r: Reader) -> dict:
    """DeepseekV2Config: DeepSeek-V3's MLA (``DeepseekV2Attention`` holds the same
    projections and norms; ``q_lora_rank: null`` gives a plain q_proj), dense first
    ``first_k_dense_replace`` layers, then routed + shared experts behind a softmax
    router over E (``DeepseekV2TopkRouter``: ``F.linear`` on the FP32 hidden state,
    ``softmax(dtype=torch.float32)``, ``topk``; ``group_limited_greedy`` masks the
    groups it drops with ``masked_fill`` before the same ``topk``), no correction bias
    and no multi-token-prediction layers. The rotary is complex (``apply_rotary_emb``:
    ``view_as_complex`` of the FP32 rotary slice times ``freqs_cis``, cast back with
    ``type_as``), which keeps no per-layer tensor the real-valued rotary does not.

    The class's default ``num_experts_per_tok`` is None, which its router's ``topk``
    cannot take: such a config is read from the build and answered by the dry run, whose
    one line names the class's error. Source: ``transformers/models/deepseek_v2/
    {configuration,modeling}_deepseek_v2.py`` (5.x)."""
    from . import BuildInstead

    cls = "DeepseekV2Config"
    fields = rmsnorm_gated(r, kv=None, head_dim=None, cls=cls)
    L, h = fields["num_hidden_layers"], fields["num_attention_heads"]
    att = _mla(r, h, cls)
    first_dense = min(r.count("first_k_dense_replace", 0, f"{cls} default 0"), L)
    fields["mlp_bias"] = r.flag("mlp_bias", False, f"{cls} default false")
    moe = None
    if first_dense < L:
        if r.config.get("num_experts_per_tok") is None:
            raise BuildInstead(
                "DeepseekV2TopkRouter with num_experts_per_tok null (DeepseekV2Config's "
                "default): its topk needs an integer k"
            )
        if fields["mlp_bias"]:
            raise BuildInstead(
                "DeepseekV2Moe with mlp_bias: biased shared experts beside unbiased routed experts"
            )
        experts = r.integer("n_routed_experts", default=64, why=f"{cls} default 64")
        width = r.integer("moe_intermediate_size", default=1407, why=f"{cls} default 1407")
        shared = r.count("n_shared_experts", 2, f"{cls} default 2")
        moe = FeedForward(
            intermediate_size=width,
            num_experts=experts,
            top_k=r.integer("num_experts_per_tok"),
            shared_intermediate_size=shared * width,
            router_fp32_input=True,
        )
    kinds = [
        LayerKind(attention=att, feed_forward=dense(fields) if i < first_dense else moe)
        for i in range(L)
    ]
    fields.update(
        num_key_value_heads=None,
        head_dim=att.qk_head_dim,
        tie_word_embeddings=r.tied(False, cls),
        max_position_embeddings=context(r, 2048),
        layers=runs_from_list(kinds),
    )
    if moe is not None:
        fields.update(
            intermediate_size=moe.intermediate_size,
            num_local_experts=moe.num_experts,
            num_experts_per_tok=moe.top_k,
        )
    return fields


def minicpm3(r: Reader) -> dict:
    """MiniCPM3Config: ``MiniCPM3Attention`` is DeepseekV2Attention's MLA with the
    real-valued rotary (``apply_rotary_pos_emb``), on every layer, before Llama's dense
    gated MLP (``mlp_bias`` on its projections). Its multipliers save nothing a Llama
    block does not: ``embed_tokens`` times the ``scale_emb`` buffer (a 0-dim tensor
    with no grad: the multiply keeps only it), each branch times ``scale_depth /
    sqrt(L)`` before the residual add (a Python float: nothing kept) and the final
    norm's output divided by ``hidden_size / dim_model_base`` before the head (the
    quotient replaces the norm output as the head's saved input). ``v_head_dim`` null
    is ``hidden_size / num_attention_heads`` (``MiniCPM3Config.__post_init__``).
    Source: ``transformers/models/minicpm3/{configuration,modeling}_minicpm3.py``."""
    cls = "MiniCPM3Config"
    fields = rmsnorm_gated(r, kv=None, head_dim=None, cls=cls)
    h = fields["num_attention_heads"]
    att = _mla(r, h, cls, (768, 256, 32, 64, fields["hidden_size"] // h), kv_heads_default=40)
    fields["mlp_bias"] = r.flag("mlp_bias", False, f"{cls} default false")
    kind = LayerKind(attention=att, feed_forward=dense(fields))
    fields.update(
        num_key_value_heads=None,
        head_dim=att.qk_head_dim,
        tie_word_embeddings=r.tied(True, cls),
        max_position_embeddings=context(r, 32768),
        layers=runs_from_list([kind] * fields["num_hidden_layers"]),
    )
    return fields


def mtp_parameters(spec, mtp: int, kind: LayerKind) -> int:
    """One DeepSeek-V3 MTP module as the checkpoint stores it (``model.layers.61``): a
    decoder layer, ``enorm`` and ``hnorm`` (d each), ``eh_proj`` (2d → d), its own
    ``embed_tokens`` (V·d) and ``shared_head`` (norm d, head V·d)."""
    from introspect.params import layer_parameters

    d, V = spec.hidden_size, spec.vocab_size
    return mtp * (layer_parameters(spec, kind) + 3 * d + 2 * d * d + 2 * V * d)


def llama4_text(r: Reader) -> dict:
    """Llama4TextConfig: MoE layers (routed + one shared expert), dense layers of
    ``intermediate_size_mlp``, NoPE layers every ``no_rope_layer_interval``-th, chunked
    attention and L2 q/k norms on the rotary layers."""
    cls = "Llama4TextConfig"
    fields = rmsnorm_gated(r, kv=8, head_dim=128, cls=cls)
    attention_bias = r.flag("attention_bias", False)
    fields.update(qkv_bias=attention_bias, o_bias=attention_bias)
    L = fields["num_hidden_layers"]
    experts = r.integer("num_local_experts", default=16, why=f"{cls} default 16")
    top_k = r.integer("num_experts_per_tok", default=1, why=f"{cls} default 1")
    step = r.integer("interleave_moe_layer_step", default=1, why=f"{cls} default 1")
    moe_layers = r.items("moe_layers", int) or list(range(step - 1, L, step))
    interval = r.integer("no_rope_layer_interval", default=4, why=f"{cls} default 4")
    rope = r.items("no_rope_layers", int, length=L) or [
        int((i + 1) % interval != 0) for i in range(L)
    ]
    chunk = r.integer("attention_chunk_size", default=8192, why=f"{cls} default 8192")
    types = r.items("layer_types", str, length=L) or [
        "chunked_attention" if on and chunk else "full_attention" for on in rope
    ]
    qk_norm = r.flag("use_qk_norm", True, f"{cls} default true")
    width = fields["intermediate_size"]
    moe = dense(
        fields,
        num_experts=experts,
        top_k=top_k,
        shared_intermediate_size=width,
        router="sigmoid",
        all_experts=True,
    )
    mlp = dense(
        fields,
        intermediate_size=r.integer("intermediate_size_mlp", default=16384, why=f"{cls} default"),
    )
    kinds = []
    for i in range(L):
        kind = LAYER_TYPES.get(types[i])
        if kind not in ("full", "chunked"):
            raise r.fail(f"layer_types: {types[i]!r} is not a layer type llama4 has")
        att = attention(
            fields,
            kind=kind,
            window=chunk if kind == "chunked" else None,
            rope=bool(rope[i]),
            qk_norm="l2" if qk_norm and rope[i] else "none",
        )
        kinds.append(LayerKind(attention=att, feed_forward=moe if i in moe_layers else mlp))
    fields.update(
        num_local_experts=experts if moe_layers else 0,
        num_experts_per_tok=top_k if moe_layers else 0,
        max_position_embeddings=context(r, 131072),
        tie_word_embeddings=r.tied(False, cls),
        layers=runs_from_list(kinds),
    )
    return fields


def llama4_vision_parameters(v: Reader, text_hidden: int) -> int:
    """Llama4VisionModel and Llama4MultiModalProjector (``modeling_llama4.py``): the
    unfold patch embedding (C·p² → d, no bias), a class embedding, one learned position
    per patch plus the class token, LayerNorms before and after (weight and bias), per
    layer q, k, v, o (d×d with bias), fc1/fc2 (with bias) and two LayerNorms, the pixel-
    shuffle adapter (fc1 intermediate → projector_input_dim, fc2 projector_output_dim²,
    no biases) and the projector (vision_output_dim → the text width, no bias)."""
    cls = "Llama4VisionConfig"
    d = v.integer("hidden_size", default=768, why=f"{cls} default 768")
    f = v.integer("intermediate_size", default=5632, why=f"{cls} default 5632")
    layers = v.integer("num_hidden_layers", default=34, why=f"{cls} default 34")
    channels = v.integer("num_channels", default=3)
    image = v.integer("image_size", default=448, why=f"{cls} default 448")
    patch = v.integer("patch_size", default=14, why=f"{cls} default 14")
    p_in = v.integer("projector_input_dim", default=4096, why=f"{cls} default 4096")
    p_out = v.integer("projector_output_dim", default=4096, why=f"{cls} default 4096")
    out_dim = v.integer("vision_output_dim", default=7680, why=f"{cls} default 7680")
    embeddings = channels * patch * patch * d + d + ((image // patch) ** 2 + 1) * d + 4 * d
    layer = 4 * (d * d + d) + (d * f + f) + (f * d + d) + 4 * d
    adapter = f * p_in + p_out * p_out
    return embeddings + layers * layer + adapter + out_dim * text_hidden


def llama4(r: Reader) -> dict:
    """Llama4Config (the multimodal wrapper): its ``text_config`` is the language model,
    its ``vision_config`` the tower (:func:`llama4_vision_parameters`), reported apart."""
    fields = llama4_text(r.sub("text_config"))
    tower = llama4_vision_parameters(r.sub("vision_config"), fields["hidden_size"])
    fields["tower_parameters"] = tower
    fields["tower"] = "Llama 4 vision tower, pixel-shuffle adapter and projector"
    return fields
