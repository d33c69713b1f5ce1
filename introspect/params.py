"""Exact parameter counts from a ModelSpec's structure, by component and by layer kind.

Unlike the seed's ``2Vd + 12Ld²``, this counts every tensor a real checkpoint holds:
GQA's narrower K/V projections, gated feed-forwards' third matrix, biases, norm weights
(and LayerNorm biases), q/k norms, learned positions, MLA's latent projections and norms,
Gated DeltaNet's projections, convolution and decay, attention sinks, routed experts
(with their biases) and their router, shared experts and their gate, a multimodal
wrapper's tower, and a tied output embedding once. Each distinct layer kind is counted
once and multiplied by how many layers have it; a block whose weights several layers
share (Zamba2's ``shared_transformer``) once, whatever the number of layers using it. The
components always sum exactly to the total.

Sources: ``transformers/models/<family>/modeling_<family>.py`` — ``deepseek_v3``
(``DeepseekV3Attention``: q_a/q_b, kv_a_proj_with_mqa, kv_b, their RMSNorms;
``DeepseekV3TopkRouter``: the correction bias is an ``nn.Buffer``), ``gpt_oss``
(``GptOssExperts`` biases, ``GptOssTopKRouter`` bias, ``sinks``), ``qwen2_moe``
(``shared_expert_gate``), ``qwen3_next`` (``Qwen3NextGatedDeltaNet``).
"""

from __future__ import annotations

from introspect.layers import Attention, FeedForward, LayerKind, SharedBlock

TYPE_CHECKING = False  # typing's flag without importing typing (see introspect._record)
if TYPE_CHECKING:
    # The spec asks this module for its N (ModelSpec.n_params): the type only, so that
    # the spec can import the count without a cycle.
    from introspect.spec import ModelSpec

#: Components in report order; ``mlp`` holds dense feed-forwards and shared experts
#: (always active), ``experts`` the routed ones; ``vision_tower`` is reported only when
#: the model has one.
COMPONENTS = ("embeddings", "attention", "mlp", "experts", "router", "norms", "lm_head")


def standard_parameters(*, num_hidden_layers: int, hidden_size: int, vocab_size: int) -> int:
    """(params) ``N ≈ 2·V·d + 12·L·d²`` — "Estimating Layers in Transformers", quoted by
    the seed: untied input and output embeddings (2Vd) plus, per block, 4d² of attention
    (Q, K, V, O) and 8d² of feed-forward (d→4d→d). Biases and norm weights are ignored;
    the head count cancels. The seed's standard spec (:func:`introspect.spec.standard_spec`)
    takes its N from here; :func:`introspect.simplified.parameters` is this function."""
    d, L, V = hidden_size, num_hidden_layers, vocab_size
    return 2 * V * d + 12 * L * d * d


def norm_params(spec: ModelSpec, width: int) -> int:
    """One norm over ``width`` features: a scale, plus a bias for LayerNorm with bias."""
    has_bias = spec.norm == "layernorm" and spec.norm_bias
    return width * (2 if has_bias else 1)


def _rms(width: int) -> int:
    return width  # RMSNorm inside MLA / Gated DeltaNet: one scale per feature


def attention_params(spec: ModelSpec, att: Attention | None = None) -> int:
    """One layer's attention (``att``, default the spec's own block):

    * full / sliding / chunked: Q (d×q_dim), K and V (d×kv_dim each), O (q_dim×d), their
      biases where present, one sink logit per query head (gpt-oss), and Qwen3-Next's
      output gate (q_proj twice as wide);
    * MLA: q_a (d×r_q) + its RMSNorm + q_b (r_q × h·(nope+rope)), or a plain q_proj;
      kv_a (d × (r_kv + rope)) + its RMSNorm + kv_b (r_kv × h·(nope+v)); O (h·v × d);
      ``qkv_bias`` on q_a/kv_a, ``o_bias`` on O;
    * linear (Gated DeltaNet): in_proj_qkvz (d → 2·key + 2·value), in_proj_ba
      (d → 2·value heads), a depthwise conv over 2·key + value channels, dt_bias and
      A_log per value head, a gated RMSNorm of the value head width, out_proj (value → d);
    * mamba2 (``GraniteMoeHybridMambaLayer`` / ``NemotronHMamba2Mixer``, l. 517 of
      ``modeling_granitemoehybrid.py``): in_proj d → P = I + C + h (I = h·p, C = I + 2·g·n,
      + P with ``mamba_proj_bias``), a depthwise conv of C channels × w taps (+ C with
      ``mamba_conv_bias``), dt_bias, A_log and D per head, the gated RMSNorm over I
      (none in Falcon-H1's ``FalconH1Mixer`` without ``mamba_rms_norm``), out_proj I → d
      (+ d with the bias: Falcon-H1's ``projectors_bias``);
    * mamba1 (``MambaMixer``, ``FalconMambaMixer``, ``JambaMambaMixer``; ``__init__`` of
      ``modeling_mamba.py`` l. 293): in_proj d → 2·I (+ 2·I with ``use_bias``), a
      depthwise conv of I channels × w taps (+ I with ``use_conv_bias``), x_proj
      I → R + 2·n, dt_proj R → I with its bias, A_log I × n, D per channel, out_proj
      I → d (+ d with the bias); Jamba's RMSNorms on dt, B and C add R + 2·n weights
      (Falcon-Mamba's are weightless: buffers, not parameters);
    * rglru (``RecurrentGemmaRecurrentBlock`` and ``RecurrentGemmaRglru``,
      ``models/recurrent_gemma/modeling_recurrent_gemma.py`` l. 284-299, 395-413):
      linear_y and linear_x d → W with biases, linear_out W → d with its bias, the
      depthwise conv_1d of W channels × w taps with its bias, and the RG-LRU's
      ``recurrent_param`` (W), input and recurrent gates of h diagonal blocks
      (h·(W/h)² weights and W biases each).
    """
    att = att or spec.default_kind.attention
    d = spec.hidden_size
    if att.kind == "none":
        return 0
    if att.kind == "mla":
        h, qk, r_kv = att.num_attention_heads, att.qk_head_dim, att.kv_lora_rank
        if att.q_lora_rank is None:
            q = d * h * qk
        else:
            r_q = att.q_lora_rank
            q = d * r_q + (r_q if att.qkv_bias else 0) + _rms(r_q) + r_q * h * qk
        kv_a = d * (r_kv + att.qk_rope_head_dim)
        kv = kv_a + (r_kv + att.qk_rope_head_dim if att.qkv_bias else 0) + _rms(r_kv)
        kv += r_kv * h * (att.qk_nope_head_dim + att.v_head_dim)
        o = h * att.v_head_dim * d + (d if att.o_bias else 0)
        return q + kv + o
    if att.kind == "linear":
        key = att.linear_num_key_heads * att.linear_key_head_dim
        value = att.linear_num_value_heads * att.linear_value_head_dim
        nv = att.linear_num_value_heads
        conv = (2 * key + value) * att.linear_conv_kernel_dim
        return (
            d * (2 * key + 2 * value)
            + d * 2 * nv
            + conv
            + 2 * nv
            + _rms(att.linear_value_head_dim)
            + value * d
        )
    if att.kind == "mamba1":
        inner, n, R = att.mamba_inner_size, att.mamba_state_size, att.mamba_dt_rank
        bias = att.mamba_proj_bias
        return (
            d * 2 * inner
            + (2 * inner if bias else 0)
            + inner * att.mamba_conv_kernel
            + (inner if att.mamba_conv_bias else 0)
            + inner * (R + 2 * n)
            + R * inner
            + inner
            + inner * n
            + inner
            + inner * d
            + (d if bias else 0)
            + (R + 2 * n if att.mamba_bcdt_norm == "weighted" else 0)
        )
    if att.kind == "rglru":
        W, w = att.lru_width, att.lru_conv_width
        block = W // att.num_attention_heads
        gates = 2 * (W * block + W)
        return 2 * (d * W + W) + (W * d + d) + (W * w + W) + W + gates
    if att.kind == "mamba2":
        h = att.mamba_num_heads
        inner = h * att.mamba_head_dim
        conv = inner + 2 * att.mamba_n_groups * att.mamba_state_size
        proj = inner + conv + h
        bias = att.mamba_proj_bias
        out_bias = bias if att.mamba_out_bias is None else att.mamba_out_bias
        return (
            d * proj
            + (proj if bias else 0)
            + conv * att.mamba_conv_kernel
            + (conv if att.mamba_conv_bias else 0)
            + 3 * h
            + (_rms(inner) if att.mamba_gated_norm else 0)
            + inner * d
            + (d if out_bias else 0)
        )
    q, kv = att.q_dim, att.k_dim
    total = d * q + 2 * d * kv + q * d
    if att.qkv_bias:
        total += q + 2 * kv
    if att.o_bias:
        total += d
    if att.sinks:
        total += att.num_attention_heads
    if att.output_gate:
        total += d * q + (q if att.qkv_bias else 0)
    return total


def dense_ffn_params(d: int, width: int, ffn: str, bias: bool) -> int:
    """One feed-forward d→width→d: plain (2·d·f) or gated (3·d·f), with biases (f per
    up-side projection, d for down) where present."""
    if ffn == "none":
        return 0
    matrices = 3 if ffn == "gated" else 2
    total = matrices * d * width
    if bias:
        total += (matrices - 1) * width + d
    return total


def ffn_params(spec: ModelSpec, ff: FeedForward | None = None) -> int:
    """One feed-forward of the block's width (for MoE: one routed expert)."""
    ff = ff or spec.default_kind.feed_forward
    return dense_ffn_params(spec.hidden_size, ff.intermediate_size, ff.ffn, ff.bias)


def feed_forward_by_component(spec: ModelSpec, ff: FeedForward) -> dict[str, int]:
    """One layer's feed-forward: ``mlp`` (dense, or the shared experts and their gate),
    ``experts`` (E routed experts) and ``router`` (d·E, plus E with a router bias). The
    DeepSeek correction bias is a buffer and counts nowhere."""
    d = spec.hidden_size
    if not ff.is_moe:
        return {"mlp": ffn_params(spec, ff), "experts": 0, "router": 0}
    shared = 0
    if ff.shared_intermediate_size:
        shared = dense_ffn_params(d, ff.shared_intermediate_size, ff.ffn, False)
        shared += d if ff.shared_expert_gate else 0
    return {
        "mlp": shared,
        "experts": ff.num_experts * ffn_params(spec, ff),
        "router": d * ff.num_experts + (ff.num_experts if ff.router_bias else 0),
    }


def qk_norm_params(spec: ModelSpec, att: Attention | None = None) -> int:
    """One layer's q/k norms: per head (``head_dim`` each, shared across heads, as Qwen3)
    or over the full projection widths (q_dim + kv_dim, as OLMo2); L2 norms (Llama 4)
    have no weights."""
    att = att or spec.default_kind.attention
    if att.qk_norm == "head":
        return 2 * norm_params(spec, att.head_dim)
    if att.qk_norm == "full":
        return norm_params(spec, att.q_dim) + norm_params(spec, att.k_dim)
    return 0


def layer_by_component(spec: ModelSpec, kind: LayerKind) -> dict[str, int]:
    """One block of ``kind``, by component (with a shared block, only what each use
    of it owns: :func:`shared_use_params`; the shared weights are the stack's, counted
    once in :func:`parameters_by_component`; a parallel mixer, Falcon-H1's, with the
    attention: both are the block's token mixing)."""
    out = {"attention": attention_params(spec, kind.attention)}
    if kind.mixer is not None:
        out["attention"] += attention_params(spec, kind.mixer)
    out.update(feed_forward_by_component(spec, kind.feed_forward))
    out["norms"] = kind.norms * norm_params(spec, spec.hidden_size) + qk_norm_params(
        spec, kind.attention
    )
    if kind.shared is not None:
        for name, n in shared_use_params(spec, kind.shared).items():
            out[name] += n
    return out


def shared_use_params(spec: ModelSpec, block: SharedBlock) -> dict[str, int]:
    """What each layer that uses a shared block owns (``Zamba2HybridLayer``,
    ``modeling_zamba2.py``: ``get_layers`` makes one ``linear`` per hybrid layer, and the
    tied block holds one adapter per use, ``Zamba2MLP.gate_up_proj_adapter_list`` /
    ``Zamba2Attention.linear_{q,k,v}_adapter_list``): the output linear d·d, the gate_up
    adapter d·r + r·(2·f gated, f plain), and with attention adapters 3·(W·r + r·W),
    W the block's input width."""
    d, W, ff = spec.hidden_size, block.input_width, block.feed_forward
    r_att, r_ff = block.attention_adapter_rank, block.ffn_adapter_rank
    up = (2 if ff.ffn == "gated" else 1) * ff.intermediate_size
    return {
        "attention": (d * d if block.output_linear else 0) + 3 * (W * r_att + r_att * W),
        "mlp": d * r_ff + r_ff * up,
    }


def shared_block_params(spec: ModelSpec, block: SharedBlock) -> dict[str, int]:
    """One shared block's own weights, counted once however many layers use it
    (``Zamba2AttentionDecoderLayer``): q, k, v over the input width W (W·q_dim,
    W·kv_dim each) and o_proj q_dim → d, their biases where present; the gated
    feed-forward over d; the input norm over W and the pre-feed-forward norm over d."""
    d, W, att = spec.hidden_size, block.input_width, block.attention
    q, kv = att.q_dim, att.k_dim
    attention = W * q + 2 * W * kv + q * d
    attention += (q + 2 * kv if att.qkv_bias else 0) + (d if att.o_bias else 0)
    ff = block.feed_forward
    out = {
        "attention": attention,
        "mlp": dense_ffn_params(d, ff.intermediate_size, ff.ffn, ff.bias),
        "norms": norm_params(spec, W) + norm_params(spec, d),
    }
    if block.idle_adapters:  # adapter sets no use runs (SharedBlock.idle_adapters)
        one = shared_use_params(spec, block)
        out["attention"] += block.idle_adapters * (
            one["attention"] - (d * d if block.output_linear else 0)
        )
        out["mlp"] += block.idle_adapters * one["mlp"]
    return out


def shared_blocks(spec: ModelSpec) -> dict[int, SharedBlock]:
    """The stack's shared blocks by id, each once (first-seen order)."""
    out: dict[int, SharedBlock] = {}
    for kind, _ in spec.kinds:
        if kind.shared is not None:
            out.setdefault(kind.shared.block_id, kind.shared)
    return out


def layer_parameters(spec: ModelSpec, kind: LayerKind | None = None) -> int:
    """Parameters of one block of ``kind`` (default the spec's own block), every expert."""
    return sum(layer_by_component(spec, kind or spec.default_kind).values())


def parameters_by_component(spec: ModelSpec) -> dict[str, int]:
    """Exact parameters per component; the values sum to :func:`parameter_count`.

    embeddings = V·d (+ learned positions); per layer kind, its count times its
    attention, feed-forward (dense or shared → ``mlp``, routed → ``experts``, router) and
    norms (block norms + q/k norms); the final norm; lm_head = V·d unless tied (+ its
    bias); ``vision_tower`` when the model has one.
    """
    V, d = spec.vocab_size, spec.hidden_size
    embeddings = V * d
    if spec.position_embedding == "learned":
        embeddings += (spec.max_position_embeddings or 0) * d
    out = {name: 0 for name in COMPONENTS}
    out["embeddings"] = embeddings
    for kind, count in spec.kinds:
        for name, n in layer_by_component(spec, kind).items():
            out[name] += count * n
    for block in shared_blocks(spec).values():
        for name, n in shared_block_params(spec, block).items():
            out[name] += n
    out["norms"] += norm_params(spec, d) * (1 + spec.embedding_norm + spec.head_transform)
    out["lm_head"] = (0 if spec.tie_word_embeddings else V * d) + (V if spec.lm_head_bias else 0)
    if spec.head_transform:  # the transform's dense (a bias, where it has one, is noted)
        out["lm_head"] += d * d
    if spec.per_layer_input_size:
        for name, n in per_layer_input_params(spec).items():
            out[name] += n
    if spec.tower_parameters:
        out["vision_tower"] = spec.tower_parameters
    return out


def per_layer_input_params(spec: ModelSpec) -> dict[str, int]:
    """Gemma 4's per-layer inputs (``models/gemma4/modeling_gemma4.py`` l. 1345-1350,
    1565-1580), with P = L·d_pl: embeddings = V_pl·P (``embed_tokens_per_layer``) + d·P
    (``per_layer_model_projection``, no bias); norms = d_pl
    (``per_layer_projection_norm``) + L·d (each block's ``post_per_layer_input_norm``);
    mlp = L·2·d·d_pl (each block's ``per_layer_input_gate`` and ``per_layer_projection``,
    no biases)."""
    d, L, dpl = spec.hidden_size, spec.num_hidden_layers, spec.per_layer_input_size
    P = L * dpl
    return {
        "embeddings": spec.per_layer_input_vocab * P + d * P,
        "norms": dpl + L * d,
        "mlp": L * 2 * d * dpl,
    }


def block_per_layer_input_params(spec: ModelSpec) -> int:
    """One block's share of :func:`per_layer_input_params`: its ``per_layer_input_gate``
    and ``per_layer_projection`` (2·d·d_pl, no biases) and ``post_per_layer_input_norm``
    (d); 0 without per-layer inputs. Their gradients are made in the block's backward,
    first of the block's (the tail is its last op, ``models/gemma4/modeling_gemma4.py``
    l. 1408-1415)."""
    dpl = spec.per_layer_input_size
    return 2 * spec.hidden_size * dpl + spec.hidden_size if dpl else 0


def parameter_count(spec: ModelSpec) -> int:
    """N from the structure: the sum of :func:`parameters_by_component`."""
    return sum(parameters_by_component(spec).values())


def active_parameter_count(spec: ModelSpec) -> int:
    """Parameters one token passes through: N with each MoE layer's routed experts
    counted ``top_k / num_experts`` (the embedding, router and shared experts in full).
    Equal to N for a dense model."""
    total = spec.n_params
    for kind, count in spec.kinds:
        ff = kind.feed_forward
        if ff.is_moe:
            routed = ff.num_experts * ffn_params(spec, ff)
            total -= count * (routed - ff.top_k * ffn_params(spec, ff))
    return total


def trainable_parameter_count(spec: ModelSpec, *, freeze_tower: bool = False) -> int:
    """Parameters that get gradients and optimizer state: N, less the multimodal tower
    when it is frozen, else less the tower's parameters its class freezes itself."""
    return spec.n_params - (spec.tower_parameters if freeze_tower else spec.tower_frozen_parameters)
