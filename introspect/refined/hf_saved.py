"""What autograd keeps for backward when the model is transformers' own class.

The same bookkeeping as :mod:`introspect.refined.saved` (bytes for all L layers unless a
function says per layer), derived from transformers 5.x's source and checked by the
saved-tensor census (:mod:`introspect.measure.census`) of the real classes
(``tests/hf_steps.py``). Per layer, by where the code makes it:

* **Norms.** ``LlamaRMSNorm`` (``models/llama/modeling_llama.py``, and Qwen2/Qwen3/
  Mistral/OLMo2's copies) runs ``hidden_states.to(torch.float32)``, then ``pow(2).mean``,
  ``rsqrt``, ``x·rstd`` and ``weight * x.to(input_dtype)``: under a 16-bit residual the
  FP32 copy of its input is saved (by ``pow`` and the ``rsqrt`` multiply) in place of the
  16-bit input, plus the FP32 rstd and the normalized value cast back (saved by the
  weight multiply). ``GemmaRMSNorm`` (``models/gemma/modeling_gemma.py``) multiplies
  ``x·rstd`` by ``1 + weight.float()`` in FP32, so its normalized value stays FP32.
  Gemma 4's (``models/gemma4_unified/modeling_gemma4_unified.py`` l. 156-173) does the
  same and takes its rstd as ``torch.pow(mean_squared, -0.5)``, whose backward keeps
  ``mean_squared`` too (two FP32 values a row), copies a 16-bit weight to FP32
  (``self.weight.float()``, saved by the multiply) and norms V without a weight.
  ``nn.LayerNorm`` (GPT-2, Phi) saves its input, mean and rstd. ``Cohere2LayerNorm``
  (``models/cohere2/modeling_cohere2.py``), written out in FP32, saves two ``x - mean``
  (each computed anew), the rstd and the normalized value, and none of its input.
* **Autocast** (``torch.autocast``, ``amp``): weights, embedding and residual stream stay
  FP32; each ``nn.Linear`` (GPT-2's ``Conv1D`` = ``addmm``) casts its weight to BF16 once
  (the cast cache; the copy is saved by the matmul) and casts an FP32 input — a norm's
  output — to BF16 itself, so a norm read by q, k and v leaves three BF16 copies and no
  FP32 output.
* **Attention.** Q, K, V as the attention kernel keeps them: eager repeats K and V to
  every query head (``repeat_kv``, ``expand`` + ``reshape`` = a copy); SDPA keeps them at
  ``num_key_value_heads`` when ``use_gqa_in_sdpa`` (no mask, head_dim ≤ 256:
  ``integrations/sdpa_attention.py``). Eager: ``softmax(dtype=float32)`` saves its FP32
  output and ``.to(query.dtype)`` a 16-bit copy for probs·V (GPT-2's softmax runs in the
  input dtype, ``models/gpt2/modeling_gpt2.py``); the context's ``transpose(1, 2)
  .reshape`` copy is saved by o_proj. SDPA on CPU (``_scaled_dot_product_flash_attention
  _for_cpu``) saves its output — already laid out for o_proj, no copy — and a
  log-sum-exp per row (a head-major Q, as Phi's partial rotary ``cat`` makes it, gives a
  head-major output, and the reshape for o_proj copies it). The rotary cos/sin are made
  once per forward by the model's ``rotary_emb`` and shared by every layer
  (2·T·rotary_dim, not per layer). On CUDA the kernel is flash (16-bit, no mask) or
  memory-efficient (FP32, or a mask), whose log-sum-exp is padded to 32 rows
  (:mod:`introspect.refined.cuda_sdpa`, from ``sdp_utils.cpp``).
* **Dropout** in train mode with p > 0 (``nn.functional.dropout``): on CPU torch's
  ``_dropout_impl`` draws ``empty_like(input).bernoulli_()`` — a mask in the input's
  dtype, saved — and the dropped tensor; CUDA's ``native_dropout`` keeps a one-byte
  mask. With dropout on the probabilities, SDPA on CPU falls back to the math kernel,
  which keeps what eager keeps (the FP32 softmax, mask, dropped probabilities); CUDA's
  kernels keep a log-sum-exp. p = 0 returns its input: nothing kept.
* **Feed-forward.** gate, up, act, product (gated) or up, act (plain), and what the
  activation's own ops keep (:data:`ACTIVATION_EXTRA`, from ``activations.py``).
* **Checkpointing** (``gradient_checkpointing_enable``, ``modeling_utils.py`` →
  ``torch.utils.checkpoint`` around each decoder layer): each layer keeps its input at
  the residual dtype; one layer is recomputed at a time.
"""

from __future__ import annotations

from introspect.refined.cuda_sdpa import logsumexp_bytes
from introspect.refined.precision import working_weight_bytes
from introspect.refined.saved_feed_forward import expert_bytes, feed_forward
from introspect.refined.stream import is_amp, residual_bytes
from introspect.refined.transformers_classes import facts
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

FP32 = 4

#: B·T·f tensors an activation's own ops keep beyond its input and output, read from
#: ``transformers/activations.py``. ``NewGELUActivation`` (gelu_new) and
#: ``AccurateGELUActivation``: ``0.5 * x * (1 + tanh(c·(x + 0.044715·x³)))`` — tanh saves
#: its output, ``1 + tanh`` and ``0.5·x`` are saved by the final multiply: 3.
#: ``FastGELUActivation``: ``x·0.797…`` and ``1 + 0.044715·x·x`` (saved by their product),
#: tanh, ``1 + tanh``, ``0.5·x``: 5. ``QuickGELUActivation``: the sigmoid's output: 1.
#: ``nn.SiLU``, ``GELUActivation`` (``F.gelu``), ``GELUTanh`` (``F.gelu(approximate=
#: "tanh")``) and ReLU are single ops: 0.
ACTIVATION_EXTRA: dict[str, int] = {
    "gelu_new": 3,
    "gelu_accurate": 3,
    "gelu_fast": 5,
    "quick_gelu": 1,
}

#: Per-family facts of transformers' classes (parallel blocks, norm placement, FP32
#: norms and rotary tables, GPT-2's softmax): :mod:`introspect.refined.transformers_classes`.


def norm_input_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Bytes per value of a block norm's saved input: RMSNorm's ``.to(torch.float32)``
    copy (FP32) when the stream is 16-bit, and OLMo's LayerNorm's (``ClassFacts.
    layernorm_fp32_input``); otherwise the stream itself; none for a LayerNorm written by
    hand (Cohere2's keeps its two ``x - mean`` instead: :func:`_norm_terms`)."""
    if facts(spec).layernorm_by_hand:
        return 0
    r = residual_bytes(setup)
    return FP32 if spec.norm == "rmsnorm" or facts(spec).layernorm_fp32_input else r


def dropout_mask_bytes(setup: TrainingSetup, value_bytes: int) -> int:
    """Bytes per value of a dropout mask: the input's dtype on CPU (``_dropout_impl``),
    one byte on CUDA (``native_dropout``'s bool mask)."""
    return 1 if setup.resolved_device == "cuda" else value_bytes


def dropped_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Bytes per value of the probabilities the attention dropout reads: the softmax's
    output cast to the query's dtype (``eager_attention_forward``:
    ``softmax(..., dtype=torch.float32).to(query.dtype)``). The query is FP32 in SDPA's
    math fallback, and under autocast wherever an FP32 tensor meets the BF16 projection:
    the rotary tables (``cos.to(x.dtype)`` with ``x`` the FP32 residual stream,
    ``LlamaRotaryEmbedding``; ``q * cos`` promotes) or a Llama-style q norm's FP32 weight
    (``self.weight * hidden_states.to(input_dtype)``, Qwen3); otherwise (GPT-2's learned
    positions) the activations' dtype. A class that does not cast the softmax's output
    (``ClassFacts.softmax_uncast``, BioGPT) hands the dropout autocast's FP32 softmax."""
    if math_fallback(spec, setup):
        return FP32
    if is_amp(setup) and facts(spec).softmax_uncast:
        return FP32
    if is_amp(setup) and spec.position_embedding == "rope":
        return FP32
    if is_amp(setup) and spec.qk_norm != "none" and not facts(spec).fp32_normalized:
        return FP32
    return setup.activation_bytes


def math_fallback(spec: ModelSpec, setup: TrainingSetup) -> bool:
    """SDPA runs the math kernel: with dropout on the probabilities on CPU, and on any
    device when K and V reach it with fewer heads than Q and no ``enable_gqa``
    (``ModelSpec.sdpa_kv_heads_broadcast``: the fused kernels' ``check_batch_size_and_
    num_heads_dense`` in ``sdp_utils_cpp.h`` refuses them; the math kernel's matmuls
    broadcast the heads, ``_scaled_dot_product_attention_math`` in ``attention.cpp``)."""
    if setup.attention == "eager":
        return False
    if spec.sdpa_kv_heads_broadcast and spec.group_size > 1:
        return True
    return spec.attention_dropout > 0 and setup.resolved_device != "cuda"


def _broadcast_kv(spec: ModelSpec, setup: TrainingSetup) -> bool:
    """K and V kept at their own heads by SDPA's math kernel, which broadcasts them."""
    return setup.attention != "eager" and spec.sdpa_kv_heads_broadcast


def keeps_t2(spec: ModelSpec, setup: TrainingSetup) -> bool:
    """Whether a T×T tensor per layer is kept: eager attention, or SDPA's math fallback."""
    return setup.attention == "eager" or math_fallback(spec, setup)


def kv_repeated(spec: ModelSpec, setup: TrainingSetup) -> bool:
    """Whether ``repeat_kv`` repeats K and V to every query head before the kernel: GQA on
    the T×T path (eager, or SDPA given a mask or head_dim > 256)."""
    if _broadcast_kv(spec, setup):
        return False
    return spec.group_size > 1 and (
        keeps_t2(spec, setup) or spec.head_size > 256 or _sdpa_mask(spec, setup)
    )


def kv_saved_width(spec: ModelSpec, setup: TrainingSetup) -> int:
    """K/V width kept: repeated to every query head by ``repeat_kv`` (:func:`kv_repeated`),
    else ``kv_dim``. With one K/V head the repeat is a view: ``repeat_kv``'s
    ``expand(B, 1, n_rep, T, hd).reshape(B, n_rep, T, hd)`` merges a size-1 dim with the
    stride-0 one, which ``reshape`` can view (``computeStride``,
    ``aten/src/ATen/TensorUtils.cpp``), so the matmuls save the kv_dim storage (census:
    Granite-SWA at one K/V head keeps B·T·kv of each), and so do SDPA's fused kernels,
    which save their inputs as given (dry run: Mistral at one K/V head, its window as an
    explicit mask, under BF16 SDPA keeps B·T·kv of each). SDPA's math fallback keeps the
    repeated width even then (:func:`math_fallback`; dry run: Seed-OSS, whose attention
    dropout sends CPU steps to it, at one K/V head under BF16 SDPA holds B·T·q of each)."""
    if kv_repeated(spec, setup) and (spec.kv_heads > 1 or math_fallback(spec, setup)):
        return spec.q_dim
    return spec.kv_dim


def short_window(kind, setup: TrainingSetup) -> bool:
    """A sliding (or Llama 4's chunked) layer that SDPA gets an explicit mask for: the
    sequence at least as long as the window. ``sdpa_mask`` skips the mask (``is_causal``
    instead) only while ``kv_length < local_attention_size`` (``_ignore_causal_mask_sdpa``,
    ``transformers/masking_utils.py`` l. 286; ``local_size`` is ``sliding_window`` or
    ``attention_chunk_size``, l. 1248, 1484), so at T equal to the window — Mistral's
    4096 at T = 4096, ModernBERT-decoder's 64 — the mask is built though it hides no
    key."""
    att = kind.attention
    if att.window is None or att.kind not in ("sliding", "chunked"):
        return False
    return setup.seq_len >= att.window


def _sdpa_mask(spec: ModelSpec, setup: TrainingSetup) -> bool:
    """Whether SDPA gets an explicit mask: a sliding window shorter than the sequence
    (``use_gqa_in_sdpa`` in ``transformers/integrations/sdpa_attention.py`` then declines
    SDPA's own GQA on CPU and CUDA, so K and V are repeated to every head), or packed
    sequences' block-diagonal mask (:func:`packed_mask`), or a model that builds an
    explicit mask for every layer (:attr:`~introspect.spec.ModelSpec.
    sdpa_mask_every_layer`)."""
    if setup.packed_sequences or spec.sdpa_mask_every_layer:
        return True
    return any(short_window(k, setup) for k, _ in spec.kinds)


def packed_mask(setup: TrainingSetup) -> int:
    """Bytes per layer of packed sequences' mask as SDPA keeps it. With ``position_ids``
    and no ``attention_mask``, ``create_causal_mask`` finds the packed sequences
    (``find_packed_sequence_indices``, masking_utils.py:735) and ``sdpa_mask`` builds a
    (B, 1, T, T) boolean block-diagonal causal mask (no ``is_causal`` skip, :996); torch's
    ``scaled_dot_product_attention`` turns a boolean mask into an additive one of the
    query's dtype (``convert_boolean_attn_mask``, aten/src/ATen/native/transformers/
    attention.cpp) in every layer's call, and the kernel saves it for backward: B·T²·s a
    layer (measured on CPU: exactly 4·T² a layer in FP32, and K/V repeated to every head).
    Eager's mask is T×T packed or not (its own term under checkpointing)."""
    if not setup.packed_sequences or setup.attention == "eager":
        return 0
    return setup.batch_size * setup.seq_len**2 * setup.activation_bytes


def probs_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Bytes per value of the saved softmax output (and of its backward's two T×T
    gradients): FP32 where the code asks for it (``softmax(..., dtype=torch.float32)``),
    under autocast (softmax is on its FP32 list) and in SDPA's math fallback; GPT-2's
    plain ``softmax`` runs in the activation dtype."""
    if facts(spec).softmax_in_input_dtype and not is_amp(setup) and not math_fallback(spec, setup):
        return setup.activation_bytes
    return FP32


def _norm_terms(spec: ModelSpec, setup: TrainingSetup, consumers: int) -> dict[str, int]:
    """One block norm read by ``consumers`` projections, minus its input (the residual
    tensor, counted where the stream is): its output as the projections keep it, the
    statistics, RMSNorm's normalized value."""
    BT, d, s, r = setup.tokens, spec.hidden_size, setup.activation_bytes, residual_bytes(setup)
    out_bytes = consumers * s if is_amp(setup) else r
    if facts(spec).layernorm_by_hand:
        # Cohere2LayerNorm: ``(x - mean)`` twice (saved by ``pow`` and by the rstd
        # multiply), the rstd, ``(x - mean)·rstd`` (saved by the weight multiply), all
        # FP32; the output cast back to the stream's dtype.
        return {
            "layernorm": BT * d * out_bytes,
            "layernorm/statistics": BT * FP32,
            "layernorm/centered": 2 * BT * d * FP32,
            "layernorm/normalized": BT * d * FP32,
        }
    terms = {
        "layernorm": BT * d * out_bytes,
        "layernorm/statistics": (2 if spec.norm == "layernorm" else _rms_stats(spec)) * BT * FP32,
    }
    if spec.norm == "rmsnorm" and spec.norm_weight:
        normalized = FP32 if facts(spec).fp32_normalized else r
        terms["layernorm/normalized"] = BT * d * normalized
    return terms


def _rms_stats(spec: ModelSpec) -> int:
    """FP32 values an RMSNorm keeps per normalized row: the rstd (rsqrt's output, saved by
    rsqrt and the ``x·rstd`` multiply), and with ``torch.pow(mean_squared, -0.5)`` its
    input too (:attr:`~introspect.refined.transformers_classes.ClassFacts.rstd_by_pow`)."""
    return 2 if facts(spec).rstd_by_pow else 1


def norm_weight_casts(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Bytes of one layer's ``self.weight.float()`` copies (Gemma 4's RMSNorm, ClassFacts.
    rstd_by_pow): with 16-bit weights each scaled norm makes an FP32 copy of its weight,
    saved by ``normed * weight``: ``norms_per_layer`` of width d and, with per-head q/k
    norms, two of width head_dim (V's norm has no weight). FP32 weights cast to
    themselves (a parameter, not an activation)."""
    if not facts(spec).rstd_by_pow or working_weight_bytes(setup) >= FP32:
        return 0
    heads = 2 * spec.head_size if spec.qk_norm == "head" else 0
    return (spec.norms_per_layer * spec.hidden_size + heads) * FP32


def _add(into: dict[str, int], more: dict[str, int]) -> None:
    for k, v in more.items():
        into[k] = into.get(k, 0) + v


def fused(spec: ModelSpec, which: str) -> bool:
    """Whether the class computes ``which`` (``qkv``, ``gate_up``) as one linear: the
    architecture fact ``spec.fused_linears`` (GPT-2's ``c_attn``, Phi-3's ``qkv_proj`` and
    ``gate_up_proj``)."""
    return which in spec.fused_linears


def attention_consumers(spec: ModelSpec) -> int:
    """Projections reading the attention norm's output: q, k, v (one when fused:
    GPT-2's ``c_attn``, Phi-3's ``qkv_proj``), plus in a parallel block the feed-forward's
    (Phi's fc1; Cohere2's gate and up)."""
    qkv = 1 if fused(spec, "qkv") else 3
    return qkv + (feed_forward_consumers(spec) if spec.parallel_block else 0)


def feed_forward_consumers(spec: ModelSpec) -> int:
    """Linear layers reading the feed-forward norm's output, each keeping its own cast
    under autocast: gate and up (up alone when plain); for MoE the router, not the
    experts (their grouped matmuls take the FP32 rows, ``feed_forward/routed_input``),
    plus the shared experts' gate and up and Qwen2-MoE's gate on them. A fused
    ``gate_up_proj`` (Phi-3) is one linear, one cast."""
    two = 2 if spec.ffn == "gated" and not fused(spec, "gate_up") else 1
    if not spec.is_moe:
        return two
    ff = spec.kinds[0][0].feed_forward
    return 1 + (two if ff.shared_intermediate_size else 0) + (1 if ff.shared_expert_gate else 0)


def linear_weights_per_layer(spec: ModelSpec) -> int:
    """Weight elements of one block's linear layers (biases excluded: autocast's cast of a
    bias is not kept for backward)."""
    d, f = spec.hidden_size, spec.ffn_dim
    attention = d * spec.q_dim + 2 * d * spec.kv_dim + spec.q_dim * d
    if facts(spec).output_gate_proj:
        attention += d * spec.q_dim  # AFMoE's gate_proj
    if spec.is_moe:
        # The router is a linear layer; the experts' grouped matmuls are not autocast's
        # (they run at the weights' dtype), so no copy of them is made. Shared experts
        # (and Qwen2-MoE's gate on them) are linear layers.
        ff = spec.kinds[0][0].feed_forward
        fs = ff.shared_intermediate_size
        shared = ((3 if spec.ffn == "gated" else 2) * d * fs) if fs else 0
        shared += d if ff.shared_expert_gate else 0
        # Llama 4's experts are one torch.bmm each, which autocast casts.
        experts = spec.num_local_experts * 3 * d * f if ff.all_experts else 0
        return attention + d * spec.num_local_experts + shared + experts
    return attention + (3 if spec.ffn == "gated" else 2) * d * f


def per_layer(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """Bytes one layer keeps, by term. ``attention/linear/out`` (the mid-block residual)
    and ``feed_forward/down`` (the layer output, the next norm's input) are kept at
    :func:`norm_input_bytes`."""
    B, T, s = setup.batch_size, setup.seq_len, setup.activation_bytes
    BT, d, h, f = B * T, spec.hidden_size, spec.num_attention_heads, spec.ffn_dim
    parallel = spec.parallel_block
    gated = spec.ffn == "gated"
    out: dict[str, int] = {}
    post = facts(spec).post_norm
    if post:
        out.update(_post_norm_terms(spec, setup))
    else:
        _add(out, _norm_terms(spec, setup, attention_consumers(spec)))
        if not parallel:
            _add(out, _norm_terms(spec, setup, feed_forward_consumers(spec)))
    if spec.qk_norm == "l2":
        # Llama 4's weightless L2 norm (``Llama4TextL2Norm``: ``x.float() * rsqrt(…)``,
        # cast back): the FP32 input and the per-head rstd; no x·rstd (no weight).
        widths = spec.q_dim + spec.kv_dim
        out["layernorm/qk_norm"] = BT * widths * FP32 + BT * (h + spec.kv_heads) * FP32
    elif spec.qk_norm != "none":
        widths = spec.q_dim + spec.kv_dim
        rows = BT * (h + spec.kv_heads) if spec.qk_norm == "head" else 2 * BT
        if spec.norm == "layernorm":
            # Phi's q/k LayerNorm: the fused kernel keeps its input (FP32 under autocast,
            # whose FP32 list has layer_norm; else the projection's own dtype), mean and
            # rstd per row; no normalized value.
            kept = FP32 if is_amp(setup) else s
            out["layernorm/qk_norm"] = BT * widths * kept + 2 * rows * FP32
        else:
            # The raw projection upcast (or kept, FP32), its rstd, x·rstd (cast back, or
            # FP32).
            normalized = FP32 if facts(spec).fp32_normalized else s
            out["layernorm/qk_norm"] = BT * widths * FP32 + _rms_stats(spec) * rows * FP32
            out["layernorm/qk_norm/normalized"] = BT * widths * normalized
            if facts(spec).v_norm:
                # ClassFacts.v_norm: V's FP32 copy and statistics; no weight, no x·rstd kept
                v_rows = BT * spec.kv_heads if spec.qk_norm == "head" else BT
                out["layernorm/v_norm"] = BT * spec.kv_dim * FP32 + _rms_stats(spec) * v_rows * FP32
    kv = kv_saved_width(spec, setup)
    # SDPA's math kernel upcasts 16-bit Q, K, V to FP32 on CPU and runs everything in
    # FP32 (census of GPT-2 under bf16 and amp); its output is cast back.
    inner = FP32 if math_fallback(spec, setup) else s
    out["attention/linear/q"] = BT * spec.q_dim * inner
    out["attention/linear/k"] = BT * kv * inner
    out["attention/linear/v"] = BT * kv * inner
    out["attention/linear/context"] = BT * spec.q_dim * s
    if facts(spec).rotary_tables_per_layer and spec.position_embedding == "rope":
        # each layer's repeat_interleave'd cos and sin (ClassFacts.rotary_tables_per_layer)
        table = _table(spec, residual_bytes(setup))
        out["attention/rotary_tables"] = 2 * BT * _rotary_width(spec) * table
    if facts(spec).output_gate_proj:
        # the gate's sigmoid and the gated context (ClassFacts.output_gate_proj)
        out["attention/linear/output_gate"] = 2 * BT * spec.q_dim * s
    if keeps_t2(spec, setup):
        t2 = B * h * T * T
        probs = probs_bytes(spec, setup)
        out["attention/quadratic/probs"] = t2 * probs
        if spec.attn_logit_softcapping:
            out["attention/quadratic/softcap"] = t2 * s
        if facts(spec).scores_clamped:
            # ClassFacts.scores_clamped: the masked scores ``maximum`` keeps
            out["attention/quadratic/clamped"] = t2 * (FP32 if is_amp(setup) else s)
        if spec.attention_dropout > 0:
            mask = dropout_mask_bytes(setup, dropped_bytes(spec, setup))
            out["attention/quadratic/dropout_mask"] = t2 * mask
            out["attention/quadratic/dropped"] = t2 * inner
        elif probs > s and not math_fallback(spec, setup):
            # eager's ``softmax(..., dtype=torch.float32).to(query.dtype)``; the math
            # kernel multiplies V by its FP32 softmax as it is.
            out["attention/quadratic/probs_cast"] = t2 * s
        if facts(spec).lse_sink_scale:
            out.update(_lse_sink_terms(spec, setup))
    else:
        out["attention/logsumexp"] = logsumexp_bytes(
            B,
            h,
            T,
            device=setup.resolved_device,
            query_bytes=2 if is_amp(setup) else s,
            qk_head_dim=spec.head_size,
            v_head_dim=spec.head_size,
            masked=_sdpa_mask(spec, setup),
        )
        if setup.packed_sequences:
            out["attention/packed_mask"] = packed_mask(setup)
        if spec.partial_rotary_factor < 1 or facts(spec).rotary_cat:
            # Partial rotary ``torch.cat``s the rotated and passed parts: Q comes out
            # head-major, SDPA's output follows Q's layout, and o_proj's reshape copies it.
            out["attention/linear/context_copy"] = BT * spec.q_dim * s
    out.update(_fused_qkv_kept(spec, setup))
    if spec.hidden_dropout > 0:
        out["attention/dropout_mask"] = BT * d * dropout_mask_bytes(setup, s)
    if post:
        out["attention/linear/out"] = BT * d * stream_kept_bytes(setup, 2 if gated else 1)
    elif not parallel:
        out["attention/linear/out"] = BT * d * norm_input_bytes(spec, setup)
    if spec.is_moe:
        out.update(_routed_feed_forward(spec, setup))
    else:
        # Beam's SwiGLU in FP32 keeps FP32 copies of gate and up and an FP32 activation.
        g = FP32 if gated and facts(spec).swiglu_fp32 else s
        if gated:
            out["feed_forward/gate"] = BT * f * g
        out["feed_forward/up"] = BT * f * g
        out["feed_forward/act"] = BT * f * g
        extra = ACTIVATION_EXTRA.get(spec.hidden_act, 0)
        if extra:
            out["feed_forward/act_intermediates"] = extra * BT * f * s
        if gated:
            # BitNet's ffn_sub_norm keeps its FP32 copy of the product instead (the
            # product itself in FP32): see sub_norms.
            out["feed_forward/product"] = BT * f * (FP32 if facts(spec).sub_norms else s)
    if spec.hidden_dropout > 0:
        out["feed_forward/dropout_mask"] = BT * d * dropout_mask_bytes(setup, s)
    if spec.sandwich_norms and facts(spec).sub_norms:
        out.update(sub_norms(spec, setup))
    elif spec.sandwich_norms:
        # Two output norms: FP32 input, an rstd per token, and the normalized value: FP32
        # where the weight multiplies in FP32 (ClassFacts.fp32_normalized: Gemma 2's),
        # else Llama's ``self.weight * hidden_states.to(input_dtype)`` keeps x·rstd cast
        # back to the stream's dtype (HyperCLOVA X's ``post_norm1``/``post_norm2`` are
        # ``HyperCLOVAXRMSNorm``, models/hyperclovax/modeling_hyperclovax.py l. 53-58,
        # 276-281, 326-333).
        normalized = FP32 if facts(spec).fp32_normalized else residual_bytes(setup)
        out["layernorm/branch_outputs"] = 2 * (BT * d * FP32 + _rms_stats(spec) * BT * FP32)
        out["layernorm/branch_outputs/normalized"] = 2 * BT * d * normalized
    if norm_weight_casts(spec, setup):
        out["layernorm/weight_casts"] = norm_weight_casts(spec, setup)
    if is_amp(setup):
        out["autocast_weights"] = 2 * linear_weights_per_layer(spec)
    if layer_input_bytes(spec, setup):
        out["feed_forward/down"] = BT * d * layer_input_bytes(spec, setup)
    if spec.per_layer_input_size:
        _add(out, per_layer_input_terms(spec, setup))
    return out


def per_layer_input_terms(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """What one block's per-layer-input tail keeps (``Gemma4TextDecoderLayer.forward``,
    ``models/gemma4/modeling_gemma4.py`` l. 1408-1415: ``per_layer_input_gate(h)``,
    ``act_fn``, ``* per_layer_input``, ``per_layer_projection``,
    ``post_per_layer_input_norm``, ``residual +``), with d_pl =
    ``ModelSpec.per_layer_input_size``:

    * the gate keeps its input h, the stream after the feed-forward's residual add
      (B·T·d at the stream's dtype; under autocast its BF16 cast): the layer's output
      is now ``h + norm(…)``, which the next layer keeps as before;
    * the activation keeps the gate's output, the product keeps the activation's output
      and the layer's slice of the per-layer inputs (a view of the model-level tensor,
      :func:`per_layer_input_embedding`), the projection keeps the product (under
      autocast its BF16 cast): 3·B·T·d_pl at the activations' dtype (Gemma 4's
      ``gelu_pytorch_tanh`` is ``GELUTanh``, one op: nothing more of its own);
    * the norm (``Gemma4RMSNorm``, l. 196-214) keeps its input's FP32 copy, the two FP32
      values a row of ``torch.pow(mean_squared, -0.5)`` and the FP32 ``x·rstd``; with
      16-bit weights the ``self.weight.float()`` copy (d·4);
    * under autocast the BF16 copies of the gate and projection weights (2·2·d·d_pl)."""
    BT, d, s = setup.tokens, spec.hidden_size, setup.activation_bytes
    dpl = spec.per_layer_input_size
    out = {
        "per_layer_input/gate_input": BT * d * stream_kept_bytes(setup, 1),
        "per_layer_input/gate": BT * dpl * s,
        "per_layer_input/act": BT * dpl * s,
        "per_layer_input/product": BT * dpl * s,
        "per_layer_input/norm": BT * d * FP32 + _rms_stats(spec) * BT * FP32,
        "per_layer_input/norm/normalized": BT * d * FP32,
    }
    if working_weight_bytes(setup) < FP32:
        out["per_layer_input/norm/weight_cast"] = d * FP32
    if is_amp(setup):
        out["autocast_weights"] = 2 * 2 * d * dpl
    return out


def per_layer_input_grad(spec: ModelSpec, setup: TrainingSetup, top: bool) -> dict[str, int]:
    """The per-layer inputs' gradient at a layer's backward moments (``top``: the top
    layer's). Each layer's product backward makes its slice's gradient (B·T·d_pl at the
    per-layer inputs' dtype: FP32 under autocast, :func:`per_layer_input_embedding`) —
    the tail is the layer's last op, so its backward runs first and the slice's
    gradient is alive at the layer's feed-forward and attention backward — and
    ``select_backward`` puts it into a zero B·T·L·d_pl tensor (``per_layer_inputs[:, :,
    i, :]``, ``models/gemma4/modeling_gemma4.py`` l. 1684), which the engine's input
    buffer of the per-layer inputs' node sums over the layers
    (``torch/csrc/autograd/input_buffer.cpp``) until layer 0's backward. The select of
    layer i was made before layer i's call, so its node has a lower sequence number than
    every node of the layer and the engine (``torch/csrc/autograd/engine.cpp``: the ready
    queue takes the highest sequence number first) runs it after the whole layer: the
    top layer's moments hold its slice's gradient alone, every lower layer's the summed
    B·T·L·d_pl tensor beside its own slice's (measured: the every-type Gemma 4 dry run at
    T = 2048, peak inside the top layer's attention backward, holds one B·T·d_pl FP32
    gradient and no B·T·L·d_pl one)."""
    BT, r = setup.tokens, residual_bytes(setup)
    P = spec.num_hidden_layers * spec.per_layer_input_size
    return {
        "activations/per_layer_inputs/grad": 0 if top else BT * P * r,
        "activations/per_layer_inputs/grad/slice": BT * spec.per_layer_input_size * r,
    }


def per_layer_input_embedding(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """What the model-level per-layer inputs keep (``Gemma4TextModel.get_per_layer_inputs``
    and ``project_per_layer_inputs``, ``models/gemma4/modeling_gemma4.py`` l. 1626-1629,
    1705-1784), with P = L·d_pl:

    * ``embed_tokens_per_layer(input_ids)`` times its scale (a 0-dim buffer at the
      weights' dtype, which the multiply keeps; it keeps nothing of the lookup, whose
      scale needs no gradient); the lookup keeps the ids only;
    * ``per_layer_model_projection(inputs_embeds)`` keeps its input: the embedding output
      the first layer keeps anyway where that layer keeps the stream itself (FP32, or a
      checkpoint), else the B·T·d 16-bit embedding output (BF16, whose first norm keeps
      an FP32 copy) or under autocast its BF16 cast (and the weight's, 2·d·P); the
      multiply by ``hidden_size**-0.5`` (a number) keeps nothing;
    * ``per_layer_projection_norm`` over the B·T·L rows of width d_pl: its input's FP32
      copy, two FP32 values a row, the FP32 ``x·rstd`` (and with 16-bit weights the
      weight's FP32 copy);
    * ``(projection + per_layer_inputs) * 2**-0.5``: the sum keeps nothing, and the
      result (B·T·P; FP32 under autocast, where the 16-bit norm output meets the FP32
      lookup) is kept by every layer's product through its slice (``per_layer_inputs[:,
      :, i, :]``, a view; under checkpointing each layer's input) until the first
      layer's backward."""
    BT, d, r = setup.tokens, spec.hidden_size, residual_bytes(setup)
    L, dpl = spec.num_hidden_layers, spec.per_layer_input_size
    P = L * dpl
    kept = r if setup.activation_checkpointing else layer_input_bytes(spec, setup)
    if is_amp(setup):
        projection_input = BT * d * setup.activation_bytes
    else:
        projection_input = 0 if kept == r else BT * d * setup.activation_bytes
    out = {
        # the scale, ``self.embed_scale.to(self.weight.dtype)``: a 0-dim tensor
        "activations/per_layer_inputs/scale": working_weight_bytes(setup),
        "activations/per_layer_inputs": BT * P * r,
        "activations/per_layer_inputs/norm": BT * P * FP32 + _rms_stats(spec) * BT * L * FP32,
        "activations/per_layer_inputs/norm/normalized": BT * P * FP32,
    }
    if projection_input:
        out["activations/per_layer_inputs/projection_input"] = projection_input
    if working_weight_bytes(setup) < FP32:
        out["activations/per_layer_inputs/norm/weight_cast"] = dpl * FP32
    if is_amp(setup):
        out["activations/per_layer_inputs/autocast_weight"] = 2 * d * P
    return out


def _lse_sink_terms(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """What Granite-SWA's post-attention sink scale keeps per layer
    (:attr:`~introspect.refined.transformers_classes.ClassFacts.lse_sink_scale`):
    ``logsumexp`` saves its input, the masked scores (``attn_weights + attention_mask``:
    the mask is at the residual dtype, so FP32 under autocast by type promotion), and its
    B·h·T output; ``sigmoid`` its FP32 output; ``attn_output * sink_scale…`` the
    probabilities·V product (B·T·q at the activations' dtype) and, when that dtype is
    16-bit, the scale's cast copy (``.to(attn_output.dtype)``)."""
    B, T, s, h = setup.batch_size, setup.seq_len, setup.activation_bytes, spec.num_attention_heads
    r = residual_bytes(setup)
    rows = B * h * T
    scale = rows * (r + FP32 + (s if s < FP32 else 0))
    return {
        "attention/quadratic/sink_scores": rows * T * r,
        "attention/sink_scale": scale,
        "attention/linear/sink_context": B * T * spec.q_dim * s,
    }


def sub_norms(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """BitNet's two in-branch RMSNorms (``BitNetRMSNorm``: ``hidden_states.to(torch.
    float32)``, ``pow(2).mean``, ``rsqrt``, ``self.weight * hidden_states.to(input_dtype)``;
    ``models/bitnet/modeling_bitnet.py`` l. 53-58), on SDPA's output (width q_dim, before
    o_proj) and on the gated product (width f, before down_proj). Each keeps its input's
    FP32 copy (saved by ``pow`` and the rstd multiply) — for the attention one beyond the
    16-bit output SDPA keeps itself, none when that output is FP32; the product's copy is
    counted as ``feed_forward/product`` — its rstd, the normalized value cast back to the
    stream's dtype (saved by the weight multiply) and its output at the activations' dtype
    (kept by o_proj / down_proj; under autocast their BF16 casts)."""
    BT, s, r = setup.tokens, setup.activation_bytes, residual_bytes(setup)
    q, f = spec.q_dim, spec.ffn_dim
    copy = BT * q * FP32 if s < FP32 else 0
    return {
        "layernorm/sub_norms": copy + 2 * BT * FP32 + BT * (q + f) * s,
        "layernorm/sub_norms/normalized": BT * (q + f) * r,
    }


def _fused_qkv_kept(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """SDPA beside a fused q/k/v projection with rotary positions: SDPA saves V as it is
    given, a view of the fused output (``qkv[..., q + kv:]`` in
    ``models/phi3/modeling_phi3.py``; ``repeat_kv`` returns its input when K and V are
    not repeated), so the whole B·T·(q + 2·kv) storage stays while the rotary made Q and
    K anew: the q and k parts, B·T·(q + kv), beyond separate projections. Not when K and
    V are repeated (a copy), nor on the T×T path with B > 1: ``torch.matmul(probs, V)``
    folds V's (B, h, T, hd) view to (B·h, T, hd), which at B = 1 merges the size-1 batch
    dim and stays a view (``bmm`` then keeps the fused storage: dry run of GPT-NeoX-
    Japanese's ``_attn``, ``models/gpt_neox_japanese/modeling_gpt_neox_japanese.py``
    l. 173-186, 241-268, FP32 eager at B = 1) but at B > 1 must copy (the batch stride
    T·(q + 2·kv) is not h times the head stride; ``reshape`` of such a view at B = 2
    returns a new storage), nor without rotary (GPT-2: Q, K, V are all views of one
    storage, already the three terms), nor when a q/k LayerNorm keeps its input as
    given outside autocast (Persimmon's ``q_layernorm(query_states)`` on the
    ``_split_heads`` views of ``fused_qkv``, ``models/persimmon/modeling_persimmon.py``
    l. 216-254: the q and k parts are ``layernorm/qk_norm`` already; an RMSNorm's
    ``.to(torch.float32)`` and autocast's FP32 ``layer_norm`` copy them instead), nor
    when SDPA's math kernel upcasts 16-bit Q, K and V and keeps its FP32 copies, not the
    views (:func:`math_fallback`; dry run of Falcon at one K/V head under BF16 SDPA,
    ``models/falcon/modeling_falcon.py`` l. 315-345: T = 64 1.018 with the term, 1.001
    without)."""
    if not fused(spec, "qkv") or spec.position_embedding != "rope" or facts(spec).alibi:
        return {}
    if kv_repeated(spec, setup) or (keeps_t2(spec, setup) and setup.batch_size > 1):
        return {}
    if spec.qk_norm not in ("none", "l2") and spec.norm == "layernorm" and not is_amp(setup):
        return {}
    if math_fallback(spec, setup) and setup.activation_bytes < FP32:
        return {}
    return {
        "attention/linear/qkv_fused": setup.tokens
        * (spec.q_dim + spec.kv_dim)
        * (setup.activation_bytes)
    }


def _routed_feed_forward(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """A mixture-of-experts block's feed-forward as transformers 5 runs it: the routed
    path of :func:`introspect.refined.saved_feed_forward.feed_forward` (grouped matmuls
    over the k·B·T routed rows, at the weights' dtype:
    :func:`introspect.refined.saved_feed_forward.expert_bytes`), beside this module's
    attention side."""
    kind = spec.kinds[0][0]
    out = {k: v for k, v in feed_forward(spec, setup, kind).items() if k != "feed_forward/down"}
    if facts(spec).swiglu_fp32 and kind.feed_forward.ffn == "gated":
        s = expert_bytes(setup)
        for name in ("feed_forward/gate", "feed_forward/up", "feed_forward/act"):
            if name in out:
                out[name] = out[name] // s * FP32
    return out


def stream_kept_bytes(setup: TrainingSetup, consumers: int) -> int:
    """Bytes per value at which projections reading the residual stream directly keep
    it: the stream itself, or under autocast one BF16 cast per projection."""
    return consumers * setup.activation_bytes if is_amp(setup) else residual_bytes(setup)


def layer_input_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Bytes per value at which a layer's input is kept: by its first norm
    (:func:`norm_input_bytes`), or in a post-norm block by q, k and v themselves."""
    if facts(spec).post_norm:
        return stream_kept_bytes(setup, attention_consumers(spec))
    return norm_input_bytes(spec, setup)


def _post_norm_terms(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """OLMo2's two norms on the branch outputs: each keeps its input's FP32 copy (or the
    FP32 input), rstd and the FP32 ``x·rstd``; their outputs go into the residual add,
    which keeps nothing."""
    BT, d = setup.tokens, spec.hidden_size
    return {
        "layernorm/input": 2 * BT * d * FP32,
        "layernorm/statistics": 2 * BT * FP32,
        "layernorm/normalized": 2 * BT * d * FP32,
    }


def checkpointed_layer(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """``torch.utils.checkpoint`` around each decoder layer keeps its input (the stream,
    at the residual dtype): the layer output ``feed_forward/down``."""
    return {"feed_forward/down": setup.tokens * spec.hidden_size * residual_bytes(setup)}


def attention_norm(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """The part of :func:`per_layer` that the attention's backward still needs besides
    Q, K, V and the T×T tensors: the norm before it (read by q, k, v — and fc1 in a
    parallel block; none in a post-norm block) and, under autocast, the BF16 copies of the
    q, k and v weights."""
    if facts(spec).post_norm:
        out: dict[str, int] = {}
    else:
        out = _norm_terms(spec, setup, attention_consumers(spec))
    if is_amp(setup):
        d = spec.hidden_size
        out["autocast_weights"] = 2 * (d * spec.q_dim + 2 * d * spec.kv_dim)
    return out


def recomputed_extra(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """What the one recomputed layer keeps beyond :func:`per_layer` under checkpointing:
    the layer input as its first reader keeps it, when that is a new tensor — the first
    norm's FP32 copy under a 16-bit stream, or in a post-norm block under autocast the
    BF16 casts q, k and v make. Without checkpointing these are the previous layer's
    ``feed_forward/down``; with it, the checkpoint keeps the stream itself and the
    recomputation makes them again."""
    kept = layer_input_bytes(spec, setup)
    if kept in (0, residual_bytes(setup)):
        return {}
    return {"layernorm/input": setup.tokens * spec.hidden_size * kept}


#: Layer kinds that read the causal mask (softmax attention over positions).
_MASKED_KINDS = frozenset({"full", "sliding", "chunked", "mla"})


def takes_causal_mask(spec: ModelSpec) -> bool:
    """Whether a layer reads a causal mask, which checkpointing then keeps: a softmax
    attention layer (or a shared transformer block, Zamba2's). A stack of state-space
    mixers alone (Mamba, Falcon-Mamba, Mamba-2) builds none: ``MambaModel`` hands its
    blocks the caller's 2D ``attention_mask`` (``models/mamba/modeling_mamba.py`` l.
    682-686), ``Mamba2Model`` ``create_recurrent_attention_mask``'s (``models/mamba2/
    modeling_mamba2.py`` l. 801; ``masking_utils.py`` l. 1494-1524: ``None`` when no
    mask is given or it is all ones)."""
    return any(
        kind.attention.kind in _MASKED_KINDS
        or kind.shared is not None
        or (kind.mixer is not None and kind.mixer.kind in _MASKED_KINDS)
        for kind, _ in spec.kinds
    )


def embedding(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """Layer 0's input as its first norm (or checkpoint) keeps it, and the embedding
    dropout's mask (GPT-2, Phi: ``embd_pdrop``); the undropped output is freed."""
    BT, d, r = setup.tokens, spec.hidden_size, residual_bytes(setup)
    kept = r if setup.activation_checkpointing else layer_input_bytes(spec, setup)
    out = {"activations/embedding": BT * d * kept} if kept else {}
    if spec.embedding_dropout > 0:
        out["activations/embedding/dropout_mask"] = BT * d * dropout_mask_bytes(setup, r)
    masked = setup.activation_checkpointing and takes_causal_mask(spec)
    if masked and setup.attention == "eager":
        # ``create_causal_mask`` (``masking_utils.py``) builds eager's additive mask,
        # (B, 1, T, T) in the embeddings' dtype; each checkpointed layer keeps it among
        # its inputs until its backward (without checkpointing nothing saves it); one
        # per layer type (eager_masks).
        out["activations/attention_mask"] = eager_masks(spec, setup, mask_types(spec))
    elif masked and setup.packed_sequences:
        # SDPA's packed mask as sdpa_mask builds it, boolean, kept by every
        # checkpointed layer among its inputs (each layer's additive copy is made again
        # when it is recomputed)
        out["activations/attention_mask"] = setup.batch_size * setup.seq_len**2
    if spec.embedding_norm or facts(spec).norm_before_layers:
        # A norm on the embedding output before layer 0 (ModernBERT-decoder's
        # ``embeddings.norm``, BLOOM's ``word_embeddings_layernorm``, NanoChat's final
        # norm called first there: ClassFacts.norm_before_layers): it keeps its input,
        # the embedding's output, and its statistics; its output is layer 0's input above.
        norm = _norm_terms(spec, setup, 1)
        out["activations/embedding/norm"] = BT * d * norm_input_bytes(spec, setup) + sum(
            v for k, v in norm.items() if k != "layernorm"
        )
    if spec.position_embedding == "rope" and not facts(spec).rotary_tables_per_layer:
        width = _table_widths(spec)
        out["activations/positions"] = 2 * setup.seq_len * width * _table(spec, r)
    if spec.per_layer_input_size:
        out.update(per_layer_input_embedding(spec, setup))
    return out


#: Attention kinds that get a causal mask of their own (``masking_utils.py``:
#: ``create_causal_mask``, ``create_sliding_window_causal_mask``,
#: ``create_chunked_causal_mask``).
MASKED_KINDS = ("full", "sliding", "chunked")


def mask_types(spec: ModelSpec, kinds=None) -> set[str]:
    """The mask types of the layer kinds ``kinds`` (default: the whole stack's): each
    kind's attention kind among :data:`MASKED_KINDS`."""
    kinds = [kind for kind, _ in spec.kinds] if kinds is None else kinds
    return {k.attention.kind for k in kinds if k.attention.kind in MASKED_KINDS}


def eager_masks(spec: ModelSpec, setup: TrainingSetup, types: set[str]) -> int:
    """Bytes of eager's additive masks that checkpointed layers of the mask types
    ``types`` keep: one (B, 1, T, T) mask at the embeddings' dtype per type (at least
    one, as a stack of one kind builds). A stack with sliding and full layers builds
    both in its forward — ``causal_mask_mapping = {"full_attention":
    create_causal_mask(...), "sliding_attention":
    create_sliding_window_causal_mask(...)}`` (``models/gemma4/modeling_gemma4.py``
    l. 1650-1653, ``models/gemma4_unified/modeling_gemma4_unified.py`` l. 622-625,
    ``models/gemma3/modeling_gemma3.py`` l. 525-528, ``models/gemma2/modeling_gemma2.py``
    l. 431-434) — a new tensor each, even where the window covers T, and each layer
    gets its type's as an input its checkpoint keeps (non-reentrant: the recompute
    closure holds it) until that layer's backward. Below the lowest layer of a type,
    that type's mask is freed: at layer i's backward only the types of layers 0..i are
    alive (measured: Gemma 4 unified's dry run at T = 512, peak at layer 0's backward,
    holds the sliding mask alone; at T = 2048, peak at the top full layer, both). A class
    that casts its mask to bool (``ClassFacts.bool_causal_mask``, MPT) keeps one byte a
    value."""
    B, T = setup.batch_size, setup.seq_len
    value = 1 if facts(spec).bool_causal_mask else residual_bytes(setup)
    return max(1, len(types)) * B * T * T * value


def kv_store_layers(spec: ModelSpec, setup: TrainingSetup) -> list[tuple[int, object]]:
    """The layers (index, kind) whose K and V the model's ``shared_kv_states`` holds
    (ClassFacts.stores_kv_per_type, transformers' classes only): the topmost layer of
    each attention kind (the class's "store" layer of each layer type with
    ``num_kv_shared_layers = 0``, ``kv_sharing_modes``,
    ``models/gemma4/configuration_gemma4.py`` l. 226-251)."""
    if setup.implementation != "transformers" or not facts(spec).stores_kv_per_type:
        return []
    tops: dict[str, tuple[int, object]] = {}
    start = 0
    for run in spec.runs:
        if run.kind.attention.kind in MASKED_KINDS:
            tops[run.kind.attention.kind] = (start + run.count - 1, run.kind)
        start += run.count
    return sorted(tops.values(), key=lambda t: t[0])


def kv_store_outputs(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Bytes of one store layer's K and V as ``shared_kv_states`` holds them (``spec`` the
    layer's kind): K the rotary output ``(x * cos) + (rotate_half(x) * sin)``, promoted to
    the tables' dtype (FP32 tables under autocast: ``_table``), V the weightless
    ``v_norm``'s output cast back to the v projection's dtype
    (``normed_output.type_as(hidden_states)``, ``models/gemma4/modeling_gemma4.py``
    l. 205-214, 1216-1231): B·T·kv_dim each. Saved by nothing else (eager's matmuls save
    the repeated copies, ``repeat_kv``), the dict keeps them from the layer's forward on."""
    BT, kv, s = setup.tokens, spec.kv_dim, setup.activation_bytes
    k = max(s, _table(spec, residual_bytes(setup)))
    return BT * kv * (k + s)


def kv_store_graph(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Bytes a checkpointed store layer's recomputed K and V keep once its recomputation
    has run (``spec`` the layer's kind), to the end of backward.

    The recomputation runs the layer's forward again with grad enabled
    (``torch/utils/checkpoint.py`` l. 1175-1187) and its pack hook returns each tensor it
    stores (``return x``, l. 1132-1133, "Rule 6"), so the recomputed graph's nodes save
    their tensors as an ordinary graph does; the recomputed outputs are normally dropped
    with that graph, but the store layer puts its recomputed K and V into
    ``shared_kv_states`` (l. 1230-1231 of ``modeling_gemma4.py``), which every
    checkpointed layer's call keeps, and nothing ever runs that graph's backward (the
    original graph's nodes take the recomputed tensors from ``frame.recomputed``), so
    everything saved on the paths into K and V stays:

    * ``input_layernorm`` (``Gemma4RMSNorm``, l. 205-214): its input (the layer's input,
      or its FP32 copy: :func:`norm_input_bytes`), ``mean_squared`` and its ``pow(-0.5)``
      (ClassFacts.rstd_by_pow), the FP32 ``x·rstd`` the weight multiply keeps, and with
      16-bit weights ``self.weight.float()``;
    * ``k_proj`` and ``v_proj``: their input (under autocast one BF16 cast each, else the
      norm's output, one tensor) and, under autocast, their BF16 weight copies;
    * ``k_norm``: the FP32 copy of k, its two statistics per head row, the FP32 ``x·rstd``
      (and its 16-bit weight's FP32 copy); ``v_norm`` (no weight): the FP32 copy of v and
      two statistics per head row;
    * K and V themselves (:func:`kv_store_outputs`); the rotary multiplies keep only the
      shared tables.

    Measured: Gemma 4 unified's dry run (d=64, L=6, autocast, checkpointing, T = 512),
    the top sliding and full layers' sets alive at layer 0's attention backward, to the
    byte of this sum."""
    BT, d, s = setup.tokens, spec.hidden_size, setup.activation_bytes
    kv, rows = spec.kv_dim, setup.tokens * spec.kv_heads
    stats = _rms_stats(spec)
    fp32_weights = working_weight_bytes(setup) >= FP32
    norm = BT * d * norm_input_bytes(spec, setup) + stats * BT * FP32 + BT * d * FP32
    inputs = 2 * BT * d * s if is_amp(setup) else BT * d * residual_bytes(setup)
    weights = 2 * 2 * d * kv if is_amp(setup) else 0
    k_norm = 2 * BT * kv * FP32 + stats * rows * FP32
    v_norm = BT * kv * FP32 + stats * rows * FP32
    casts = 0 if fp32_weights else (d + spec.head_size) * FP32  # weight.float() copies
    return norm + inputs + weights + k_norm + v_norm + casts + kv_store_outputs(spec, setup)


def _rotary_width(spec: ModelSpec) -> int:
    """Width of the rotary tables: the rotated part of a head; MLA's is
    ``qk_rope_head_dim`` (DeepSeek-V3's config sets ``head_dim = qk_rope_head_dim``,
    ``models/deepseek_v3/configuration_deepseek_v3.py`` l. 123, which its rotary
    embedding's tables are built at)."""
    for kind, _ in spec.kinds:
        if kind.attention.kind == "mla":
            return kind.attention.qk_rope_head_dim
    return int(spec.head_size * spec.partial_rotary_factor)


def _table_widths(spec: ModelSpec) -> int:
    """Summed width of the shared rotary tables: one pair at the rotary width, or with
    ClassFacts.rope_tables_per_layer_type one pair per layer type at its head_dim — the
    distinct (attention kind, head_dim) pairs stand for the layer types (Gemma 4's full-
    attention layers have their own head_dim, proportional RoPE full-width tables, and
    its wrapper's stack reads both kinds as full; ModernBERT-decoder's sliding and full
    types share one head_dim)."""
    if not facts(spec).rope_tables_per_layer_type:
        return _rotary_width(spec)
    types = {(kind.attention.kind, spec.for_kind(kind).head_size) for kind, _ in spec.kinds}
    return sum(width for _, width in types)


def _table(spec: ModelSpec, r: int) -> int:
    """Bytes per value of the rotary tables: FP32 where the class returns them uncast."""
    return FP32 if facts(spec).rope_tables_fp32 else r


def final(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """After the last layer: the final norm (its output as lm_head keeps it, statistics,
    normalized value) and, with checkpointing, its FP32 input copy (no later checkpoint
    keeps the last layer's output); autocast's BF16 copy of the lm_head weight."""
    terms = {
        f"final_norm{k[len('layernorm') :]}": v for k, v in _norm_terms(spec, setup, 1).items()
    }
    BTd = setup.tokens * spec.hidden_size
    if spec.residual_in_fp32 and "final_norm/normalized" in terms and not is_amp(setup):
        # An FP32 stream in a 16-bit step (``residual_in_fp32``): the final RMSNorm's
        # input dtype is FP32, so ``self.weight * hidden_states.to(input_dtype)`` keeps
        # x·rstd in FP32 (``Mamba2RMSNorm``, ``MambaRMSNorm``); its FP32 output is cast
        # for lm_head (``hidden_states.to(self.lm_head.weight.dtype)``), which keeps the
        # cast: the ``final_norm`` term at the activations' dtype.
        terms["final_norm/normalized"] = BTd * FP32
    if setup.activation_checkpointing and norm_input_bytes(spec, setup):
        terms["final_norm/input"] = BTd * norm_input_bytes(spec, setup)
    elif facts(spec).post_norm:
        # The last layer's output is kept by the final (pre-)norm, not by a next layer's
        # q/k/v: the difference to the per-layer ``feed_forward/down`` it was counted at
        # (signed: under autocast the three BF16 casts it stands for weigh more).
        terms["final_norm/input"] = BTd * (
            norm_input_bytes(spec, setup) - layer_input_bytes(spec, setup)
        )
    if norm_weight_casts(spec, setup):
        # the final norm's ``self.weight.float()`` copy (ClassFacts.rstd_by_pow)
        terms["final_norm/weight_cast"] = spec.hidden_size * FP32
    if is_amp(setup):
        terms["logits/autocast_weight"] = 2 * spec.vocab_size * spec.hidden_size
    if spec.head_transform:
        terms |= head_transform(spec, setup)
    return terms


def head_transform(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """A transform between the final norm and the output projection,
    ``norm(act(dense(x)))`` (``ModernBertDecoderPredictionHead.forward``,
    ``models/modernbert_decoder/modeling_modernbert_decoder.py`` l. 346-347): the final
    norm's output is kept by ``dense`` as it would be by lm_head; the dense's output by the
    activation (B·T·d·s, the compute dtype: BF16 under autocast); the activation's output
    by the norm as a block norm keeps its input (:func:`norm_input_bytes`: FP32 under
    autocast, whose LayerNorm casts up); the norm's statistics, and its output as the
    output projection keeps it (:func:`_norm_terms`); under autocast the dense weight's
    BF16 copy (2·d²)."""
    BTd, d = setup.tokens * spec.hidden_size, spec.hidden_size
    norm = _norm_terms(spec, setup, 1)
    out = {
        "head/dense": BTd * setup.activation_bytes,
        "head/act": BTd * norm_input_bytes(spec, setup),
        "head/norm": norm.pop("layernorm"),
    }
    out |= {f"head/norm{k[len('layernorm') :]}": v for k, v in norm.items()}
    if is_amp(setup):
        out["head/autocast_weight"] = 2 * d * d
    return out


def loss_bytes(setup: TrainingSetup) -> int:
    """Bytes per value of the cross-entropy's log-softmax: FP32 when the model computes
    the loss (``ForCausalLMLoss`` upcasts with ``logits.float()``,
    ``loss/loss_utils.py``) or under autocast (``log_softmax`` and ``nll_loss`` are on
    autocast's FP32 list); a hand-written loss on held 16-bit logits stays 16-bit."""
    if setup.loop == "labels" or is_amp(setup):
        return FP32
    return setup.activation_bytes


def logits_saved(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """What the loss keeps: the log-softmax at :func:`loss_bytes`; the logits only in the
    logits loop (the loop holds them until the step ends). In the labels loop the logits
    go with the output object (``Trainer.compute_loss`` returns the loss alone), the FP32
    copy ``.float()`` makes is saved by nothing, and the shifted labels (int64) are kept
    by the NLL."""
    BT, V = setup.tokens, spec.vocab_size
    # Gemma 2's cap·tanh(logits/cap): tanh's backward keeps its output (logits' dtype).
    softcap = {}
    if spec.final_logit_softcapping:
        capped = FP32 if facts(spec).softcap_fp32 else setup.activation_bytes
        softcap["logits/softcap"] = BT * V * capped
    if setup.cross_entropy != "standard":
        return {"logits/logsumexp": BT * FP32} | softcap
    out = {"logits/log_softmax": BT * V * loss_bytes(setup)} | softcap
    if setup.loop == "logits":
        out["logits/output"] = BT * V * setup.activation_bytes
    else:
        out["logits/labels"] = BT * 8
    return out
