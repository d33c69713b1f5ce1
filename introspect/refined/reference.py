"""Our reference model's saved set: what autograd keeps for backward in one training step
of ``introspect/measure/torch_model.py`` (one implementation behind
:mod:`introspect.refined.implementations`; transformers' classes are
:mod:`~introspect.refined.hf_saved`'s).

The seed counts every tensor the forward pass produces. A framework keeps only what each
operation's backward needs, and shares a tensor between the operations that need it. For
a pre-norm block run eagerly in torch (the reference model in
``introspect/measure/torch_model.py``, Hugging Face's Llama/Qwen2 code has the same ops)
a census with ``torch.autograd.graph.saved_tensors_hooks`` — unique storages, parameters
excluded — finds, per layer:

* the layer input (saved by the first norm; it is the previous layer's output, or the
  embedding for layer 0) and the attention residual ``x + attn`` (saved by the second
  norm) — the seed's "down" and "out" terms;
* each norm's output (saved by the next matmul); LayerNorm's mean and rstd (FP32, one
  each per token); RMSNorm (``nn.RMSNorm``, composite) its rstd and the normalized
  ``x·rstd`` (saved by the weight multiply) — one more B·T·d tensor per norm;
* Q, K, V as the attention matmuls see them (after RoPE; with GQA, eager attention
  materialises K and V repeated to every query head; SDPA with ``enable_gqa`` does not);
  the cos/sin tables of each RoPE multiply (T·head_dim, four per layer);
* eager attention: ONE T×T tensor per layer, the softmax output in FP32 (softmax saves
  its result; QKᵀ's backward needs Q and K, not the scores), plus its cast to the
  activation dtype when that is 16-bit; memory-efficient attention: a log-sum-exp per
  row (B·h·T FP32) instead;
* the attention context (saved by the output projection);
* the feed-forward's up (the activation's input), the activation's output (plain), or
  gate, up, act, product (gated);
* after the last layer: the final norm's output (saved by lm_head) and, with a standard
  cross-entropy, the FP32 log-softmax over B·T·V (saved by the loss).

Checked by ``/tmp`` census runs against the reference model (standard and Llama-style,
eager and SDPA, T = 256 and 1024): the sum of these terms matched the census to the
byte. With activation checkpointing only each layer's input is kept.

MLX (``mlx``/``mlx_compiled``) keeps the same set except: ``mx.fast.rms_norm`` and
``mx.fast.rope`` keep no normalized tensor and no cos/sin tables, and its fast attention
keeps the T×T probabilities (:func:`keeps_t2`). MLX's own peak (what its one lazy graph
holds, mlx-lm's CPU fallbacks included) is :mod:`introspect.refined.mlx`'s.

Every function returns bytes for all L layers (per device: B is the per-device batch).
"""

from __future__ import annotations

from introspect.layers import LayerKind
from introspect.refined.cuda_sdpa import logsumexp_bytes
from introspect.refined.saved_feed_forward import feed_forward
from introspect.refined.stream import is_amp
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec
from introspect.terms import EMBEDDING

FP32 = 4


def is_mlx(setup: TrainingSetup) -> bool:
    return setup.framework in ("mlx", "mlx_compiled")


def keeps_t2_for(spec: ModelSpec, setup: TrainingSetup) -> bool:
    """:func:`keeps_t2` with the model known: CPU SDPA has no fused kernel for MLA's
    unequal head widths (:func:`math_sdpa`)."""
    return keeps_t2(setup) or any(math_sdpa(setup, kind) for kind, _ in spec.kinds)


def embedding(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """Bytes kept before the first layer: the embedding output (layer 0's input)."""
    return {EMBEDDING: setup.tokens * spec.hidden_size * setup.activation_bytes}


def keeps_t2(setup: TrainingSetup) -> bool:
    """Whether the T×T probabilities are kept: eager attention, and on MLX always —
    ``mx.fast.scaled_dot_product_attention`` has no fused backward on the CPU backend;
    its vjp runs the unfused composition (measured: 496.7 MB memory-efficient vs 493.5 MB
    eager, L=4, d=256, h=8, V=8000, T=1024)."""
    return setup.attention == "eager" or is_mlx(setup)


def math_sdpa(setup: TrainingSetup, kind: LayerKind) -> bool:
    """torch's CPU SDPA has no fused kernel for a V head width other than Q/K's (MLA:
    ``qk_nope + qk_rope`` vs ``v_head_dim``) and runs the math composition, which keeps
    the T×T probabilities like eager attention (measured: ``benchmarks/moe_window.py``,
    DeepSeek-V3-style MLA, SDPA peak equal to eager's)."""
    att = kind.attention
    return (
        setup.attention != "eager"
        and setup.framework == "torch"
        and setup.resolved_device == "cpu"
        and att.kind == "mla"
        and att.qk_head_dim != att.v_head_dim
    )


def math_sdpa_bytes(setup: TrainingSetup, kind: LayerKind) -> int:
    """Bytes per value of Q, K and V as attention saves them: the activations' dtype, but
    FP32 in CPU SDPA's math composition (:func:`math_sdpa`). torch 2.13's
    ``_scaled_dot_product_attention_math`` (``aten/src/ATen/native/transformers/
    attention.cpp``; its ops traced under a dispatch mode on CPU) upcasts 16-bit Q, K and
    V (``_to_copy`` to FP32), scales ``q·√scale`` and ``kᵀ·√scale`` (new FP32 tensors,
    saved by QKᵀ's ``bmm``; the inputs themselves are saved by nothing and freed),
    multiplies V (FP32, made contiguous for the ``bmm``) by the FP32 softmax as it is,
    and casts only the output back. So Q, K, V are kept at their widths in FP32, and no
    16-bit copy of the probabilities is made for probs·V. Measured (DeepSeek-V3 MLA
    stack, d=64, h=4, L=2, B=2, bf16 SDPA, dry run): the live set at the softmax
    backward's peak held ``mul.Scalar`` (B, h, T, 48) and (B, h, 48, T) FP32 per layer,
    the FP32 softmax and no 16-bit one."""
    return FP32 if math_sdpa(setup, kind) else setup.activation_bytes


def mla_latent_bytes(spec: ModelSpec, setup: TrainingSetup, kind: LayerKind) -> int:
    """Bytes an MLA layer keeps of its latents (``DeepseekV3Attention.forward``,
    ``models/deepseek_v3/modeling_deepseek_v3.py`` l. 437-462; ``DeepseekV3RMSNorm``
    l. 47-52: ``x.to(float32)``, ``x·rsqrt(mean(x²))``, ``weight * (…).to(input_dtype)``).

    Each latent RMSNorm keeps its input as ``pow`` and the rstd multiply see it, its
    ``x·rstd`` cast back (saved by the weight multiply), its output (saved by the next
    projection) and its rstd (FP32, one per token):

    * FP32 step: ``.to(float32)`` is the input itself, a view of the projection's output,
      which is kept whole: q_a's ``r_q`` and kv_a's ``r_kv + rope`` (``kv_nope`` is a
      split of ``compressed_kv``) — ``3·r_q + (r_kv + rope) + 2·r_kv`` at ``s``;
    * 16-bit step (bf16, or autocast, whose projections return BF16): ``.to(float32)``
      is a new FP32 copy of ``r_q`` / ``r_kv`` values, and the projection's output is
      saved by nothing (``k_rot``'s rotary multiplies save only cos/sin, which need no
      gradient) — ``(r_q + r_kv)·4 + 2·(r_q + r_kv)·s``; under autocast the norm's FP32
      output (FP32 weight) is cast for q_b/kv_b (the cast saved, the output not), and
      the block's first norm output is cast by each of its two readers (q_a or q_proj,
      and kv_a: ``cached_cast`` caches only leaf weights), one more ``B·T·d·s``.

    Measured (DeepSeek-V3 MLA stack, d=64, r_q=48, r_kv=32, rope=16, L=2, B=2, T=256,
    dry run's live set): FP32 ``mm`` (B·T, 48) ×2 per layer, ``mul`` (B, T, 48) ×2,
    (B, T, 32) ×2; autocast ``_to_copy`` (B, T, 48) FP32 + 2 BF16, (B, T, 32) FP32 + 2
    BF16, and two BF16 (B, T, 64) copies of the first norm's output."""
    att, BT, s = kind.attention, setup.tokens, setup.activation_bytes
    ranks = (att.q_lora_rank or 0) + att.kv_lora_rank
    stats = (2 if att.q_lora_rank else 1) * BT * FP32  # each latent RMSNorm's rstd
    if s >= FP32 and not is_amp(setup):
        widths = 3 * ranks + att.qk_rope_head_dim
        return BT * widths * s + stats
    kept = BT * ranks * (FP32 + 2 * s) + stats
    if is_amp(setup):
        kept += BT * spec.hidden_size * s  # the first norm's output, cast once more
    return kept


def kv_saved_width(spec: ModelSpec, setup: TrainingSetup, kind: LayerKind | None = None) -> int:
    """Width of the K and V tensors the attention keeps: eager attention repeats them to
    every query head (``repeat_interleave``, as Hugging Face's ``repeat_kv``) before the
    matmuls, which then save the repeated copies; SDPA with ``enable_gqa`` keeps
    ``kv_dim``."""
    att = (kind or spec.default_kind).attention
    if keeps_t2(setup) and att.group_size > 1:
        return att.num_attention_heads * att.head_dim
    return att.k_dim


def norm_statistics(spec: ModelSpec, tokens: int) -> int:
    """Bytes of one norm's saved statistics over ``tokens`` rows: LayerNorm's mean and
    rstd, RMSNorm's rstd — FP32, one value per row each."""
    return (2 if spec.norm == "layernorm" else 1) * tokens * FP32


def norm_extra(spec: ModelSpec, tokens: int, width: int, s: int) -> int:
    """Bytes a composite RMSNorm keeps beyond its input and output: the normalized
    ``x·rstd`` that the weight multiply saves (LayerNorm's fused kernel keeps none)."""
    return tokens * width * s if spec.norm == "rmsnorm" else 0


def _attention(spec: ModelSpec, setup: TrainingSetup, kind: LayerKind) -> dict[str, int]:
    """What one layer's attention keeps (see the module docstring), by term.

    * MLA (``DeepseekV3Attention.forward``): Q and K are concatenations of their
      non-rotary and rotary parts, kept at full width (``h·(nope+rope)``); V is a slice of
      kv_b's output (``expand_kv``, ``models/deepseek_v3/modeling_deepseek_v3.py`` l.
      407-424) that probs·V's ``matmul`` (l. 256) copies contiguous and saves: ``h·v``
      (kv_b's output itself is saved by nothing; census of the dry run: a ``clone`` of
      (B, h, T, v) per layer, no (B·T, h·(nope+v)) output); the latents — q_a's output and
      its RMSNorm (input, x·rstd, output: ``3·r_q``), kv_a's output (``r_kv + rope``) and
      its norm (``2·r_kv``) — are ``latent``.
    * Sliding-window and chunked layers run the same kernels as full ones in transformers:
      eager builds ``QKᵀ`` over all T keys and adds the window mask
      (``eager_attention_forward``: matmul, then ``+ attention_mask``), so the T×T
      probabilities are kept as for full attention; SDPA gets the mask as a tensor and
      keeps its log-sum-exp and, below T, its mask as a ``B×1×T×T`` additive tensor per
      layer (census: ``where`` inside each call).
    * Sinks (gpt-oss): the softmax runs over T + 1 columns.
    * Linear attention (Gated DeltaNet): what transformers' ``Qwen3NextGatedDeltaNet``
      and its torch fallbacks (``causal_conv1d_fn``, ``torch_chunk_gated_delta_rule``,
      ``Qwen3NextRMSNormGated``) keep, tensor by tensor
      (:func:`introspect.refined.deltanet.saved`; equal to a census of the real module,
      ``tests/test_deltanet.py``), plus the layer's ``out`` as for the other kinds.
    """
    from introspect.refined import deltanet, mamba1, mamba2, rglru

    B, T, s = setup.batch_size, setup.seq_len, setup.activation_bytes
    BT, att = B * T, kind.attention
    h = att.num_attention_heads
    if att.kind == "none":
        return {}
    if kind.feed_forward.ffn == "none":
        # One branch: the mixer's output goes straight into the residual add, which keeps
        # nothing; the block's output is the feed-forward's ``down`` term.
        single = _attention(spec, setup, _with_feed_forward(kind))
        single.pop("attention/linear/out", None)
        return single
    if att.kind == "linear":
        out = deltanet.saved(att, setup, spec.hidden_size)
        out["attention/linear/out"] = BT * spec.hidden_size * s
        return out
    if att.kind in ("mamba1", "mamba2", "rglru"):
        mixer = {"mamba1": mamba1, "mamba2": mamba2, "rglru": rglru}[att.kind]
        out = mixer.saved(att, setup, spec.hidden_size)
        out["attention/linear/out"] = BT * spec.hidden_size * s
        return out
    kv = kv_saved_width(spec, setup, kind)
    inner = math_sdpa_bytes(setup, kind)
    out = {
        "attention/linear/q": BT * att.q_dim * inner,
        "attention/linear/k": BT * (att.k_dim if att.kind == "mla" else kv) * inner,
        "attention/linear/v": BT * (att.v_dim if att.kind == "mla" else kv) * inner,
        "attention/linear/context": BT * att.context_dim * s,
        "attention/linear/out": BT * spec.hidden_size * s,
    }
    if att.output_gate:
        # Qwen3-Next: q_proj's gate half (its storage is kept whole by the q norm), the
        # gate's sigmoid and the gated context (kept by o_proj).
        out["attention/linear/output_gate"] = 3 * BT * att.q_dim * s
    if att.kind == "mla":
        out["attention/linear/latent"] = mla_latent_bytes(spec, setup, kind)
        if setup.framework == "torch" and not keeps_t2(setup) and not math_sdpa(setup, kind):
            # A fused SDPA kernel (V as wide as Q/K: GLM-4.7-Flash's 192 + 64 = 256) saves
            # V as given: a split view of kv_b's output, whose whole (nope + v) storage
            # stays; Q is ``torch.cat((q_pass, q_rot))``, head-major, so the kernel's
            # saved output is too and o_proj's reshape copies it: the context twice
            # (census of Glm4MoeLiteAttention, BF16 SDPA, T = 512: ``mm`` (1, 4, 512,
            # 448-wide storage), the kernel's output and a ``clone`` (512, 1024);
            # models/glm4_moe_lite/modeling_glm4_moe_lite.py l. 280-296, 335-354).
            out["attention/linear/v"] = (
                BT * att.num_attention_heads * (att.qk_nope_head_dim + att.v_head_dim) * inner
            )
            out["attention/linear/context_copy"] = BT * att.context_dim * s
    if att.qk_norm == "head" and not keeps_t2(setup):
        # Per-head q/k norms leave Q head-major, so SDPA's saved output is head-major too
        # and the reshape for o_proj copies it: the context is kept twice (census).
        out["attention/linear/context_copy"] = BT * att.q_dim * s
    keys = T + (1 if att.sinks else 0)
    if keeps_t2(setup) or math_sdpa(setup, kind):
        out["attention/quadratic/probs"] = B * h * T * keys * FP32
        if s < FP32 and not math_sdpa(setup, kind):  # the math kernel's probs stay FP32
            out["attention/quadratic/probs_cast"] = B * h * T * keys * s
        if spec.attn_logit_softcapping:
            out["attention/quadratic/softcap"] = B * h * T * keys * s
    else:
        window = att.kind in ("sliding", "chunked") and att.keys_seen(T) < T
        mla = att.kind == "mla"
        out["attention/logsumexp"] = logsumexp_bytes(
            B,
            h,
            T,
            device=setup.resolved_device,
            query_bytes=2 if setup.precision == "amp" else s,
            qk_head_dim=att.qk_head_dim,
            v_head_dim=att.v_head_dim if mla else att.head_dim,
            masked=window,
        )
        if window:
            # SDPA turns the boolean window mask into an additive one in the query's
            # dtype (``convert_boolean_attn_mask``) inside each call, and keeps it.
            out["attention/mask"] = B * T * T * s
    if att.rope and spec.position_embedding == "rope" and not is_mlx(setup):
        # cos and sin, for Q and for K, each T × (rotary) head_dim (not per batch row).
        width = att.qk_rope_head_dim if att.kind == "mla" else att.head_dim
        out["attention/rope"] = 4 * T * width * s
    return out


def _with_feed_forward(kind: LayerKind) -> LayerKind:
    """``kind`` with a placeholder feed-forward (the mixer's own terms do not read it)."""
    from introspect import _record
    from introspect.layers import FeedForward

    return _record.replace(kind, feed_forward=FeedForward(ffn="plain", intermediate_size=1))


def per_layer(spec: ModelSpec, setup: TrainingSetup, kind: LayerKind) -> dict[str, int]:
    """Bytes one layer of ``kind`` keeps for backward, by term (the layer input is the
    previous layer's ``feed_forward/down`` or the embedding, so it is not repeated here)."""
    BT, d, s = setup.tokens, spec.hidden_size, setup.activation_bytes
    n = kind.norms
    att = kind.attention
    out: dict[str, int] = {
        "layernorm": n * BT * d * s,
        "layernorm/statistics": n * norm_statistics(spec, BT),
    }
    if spec.norm == "rmsnorm" and not is_mlx(setup):
        out["layernorm/normalized"] = n * norm_extra(spec, BT, d, s)
    if att.qk_norm != "none":
        # The norm keeps its input (the raw q/k projection) and, for RMSNorm, x·rstd.
        widths = att.q_dim + att.k_dim
        heads = att.num_attention_heads + att.num_key_value_heads
        rows = BT * heads if att.qk_norm in ("head", "l2") else 2 * BT
        stats = (2 if spec.norm == "layernorm" else 1) * rows * FP32
        out["layernorm/qk_norm"] = BT * widths * s + stats
        if spec.norm == "rmsnorm":
            out["layernorm/qk_norm/normalized"] = BT * widths * s
    out.update(_attention(spec, setup, kind))
    out.update(feed_forward(spec, setup, kind))
    return out


def autocast_weight_bytes(spec: ModelSpec, kind: LayerKind) -> int:
    """Under autocast each linear layer's matmul runs on a BF16 copy of its FP32 weight,
    and autograd keeps that copy for the input's gradient until the layer's backward
    (autocast caches the cast of a leaf that requires grad: ``cached_cast``,
    ``aten/src/ATen/autocast_mode.cpp``): 2 bytes per weight of the block's linears — the
    attention's projections, the router, the dense or shared MLP, and Llama 4's batched
    experts; not the grouped-matmul experts, which are not autocast's. For the layer
    kinds :mod:`~introspect.refined.hf_saved` does not model (MLA, sinks, output gates,
    linear attention)."""
    from introspect.params import layer_by_component

    parts = layer_by_component(spec, kind)
    experts = parts["experts"] if kind.feed_forward.all_experts else 0
    # Gated DeltaNet's, the Mamba mixers' and the RG-LRU block's own copies are their
    # kernels' terms (introspect.refined.deltanet, mamba1, mamba2, rglru).
    own = ("linear", "mamba1", "mamba2", "rglru")
    attention = 0 if kind.attention.kind in own else parts["attention"]
    return 2 * (attention + parts["mlp"] + parts["router"] + experts)


def final(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """Bytes kept after the last layer: the final norm's output (saved by lm_head), its
    statistics and, for RMSNorm, its normalized input. The embedding output (layer 0's
    input) is the ``activations/embedding`` term."""
    BT, d, s = setup.tokens, spec.hidden_size, setup.activation_bytes
    out = {"final_norm": BT * d * s, "final_norm/statistics": norm_statistics(spec, BT)}
    if spec.norm == "rmsnorm" and not is_mlx(setup):
        out["final_norm/normalized"] = norm_extra(spec, BT, d, s)
    return out


def logits_saved(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """Bytes the loss keeps. Standard cross-entropy (``F.cross_entropy`` = log-softmax +
    NLL) saves the log-softmax output, computed in FP32 (Hugging Face upcasts the logits
    with ``.float()`` first): ``B·T·V·4``. The logits themselves are not saved by any
    backward, but the training loop holds them (``logits = model(x)``) until the step
    ends: ``B·T·V·s``. A fused or chunked loss never materialises either; it keeps one
    log-sum-exp per token."""
    BTV = setup.tokens * spec.vocab_size
    if setup.cross_entropy == "standard":
        return {"logits/log_softmax": BTV * FP32, "logits/output": BTV * setup.activation_bytes}
    return {"logits/logsumexp": setup.tokens * FP32}


def checkpointed_layer(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """With activation checkpointing (``torch.utils.checkpoint`` around each block) a
    layer keeps only its input — the previous layer's output — so of the per-layer terms
    only ``feed_forward/down`` (the layer output, B·T·d) stays; the rest is recomputed,
    one layer at a time, during backward."""
    return {"feed_forward/down": setup.tokens * spec.hidden_size * setup.activation_bytes}
