"""What autograd really keeps for backward: the saved activations of one training step.

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
keeps the T×T probabilities (:func:`keeps_t2`). What MLX holds beyond this set at its
peak is calibrated in :mod:`introspect.refined.execution`.

Every function returns bytes for all L layers (per device: B is the per-device batch).
"""

from __future__ import annotations

from introspect.refined import hf_saved
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

FP32 = 4


def is_mlx(setup: TrainingSetup) -> bool:
    return setup.framework in ("mlx", "mlx_compiled")


def is_transformers(setup: TrainingSetup) -> bool:
    """transformers' own classes (:mod:`introspect.refined.hf_saved`) rather than our
    reference model."""
    return setup.implementation == "transformers" and setup.framework == "torch"


def keeps_t2(setup: TrainingSetup) -> bool:
    """Whether the T×T probabilities are kept: eager attention, and on MLX always —
    ``mx.fast.scaled_dot_product_attention`` has no fused backward on the CPU backend;
    its vjp runs the unfused composition (measured: 496.7 MB memory-efficient vs 493.5 MB
    eager, L=4, d=256, h=8, V=8000, T=1024)."""
    return setup.attention == "eager" or is_mlx(setup)


def keeps_t2_for(spec: ModelSpec, setup: TrainingSetup) -> bool:
    """:func:`keeps_t2` with the model known (transformers' SDPA falls back to the math
    kernel under dropout on CPU: :func:`introspect.refined.hf_saved.keeps_t2`)."""
    if is_transformers(setup):
        return hf_saved.keeps_t2(spec, setup)
    return keeps_t2(setup)


def embedding(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """Bytes kept before the first layer: the embedding output (layer 0's input) and, for
    transformers' classes, the embedding dropout's mask and the shared rotary tables."""
    if is_transformers(setup):
        return hf_saved.embedding(spec, setup)
    return {"activations/embedding": setup.tokens * spec.hidden_size * setup.activation_bytes}


def kv_saved_width(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Width of the K and V tensors the attention keeps: eager attention repeats them to
    every query head (``repeat_interleave``, as Hugging Face's ``repeat_kv``) before the
    matmuls, which then save the repeated copies; SDPA with ``enable_gqa`` keeps
    ``kv_dim``."""
    if keeps_t2(setup) and spec.group_size > 1:
        return spec.q_dim
    return spec.kv_dim


def norm_statistics(spec: ModelSpec, tokens: int) -> int:
    """Bytes of one norm's saved statistics over ``tokens`` rows: LayerNorm's mean and
    rstd, RMSNorm's rstd — FP32, one value per row each."""
    return (2 if spec.norm == "layernorm" else 1) * tokens * FP32


def norm_extra(spec: ModelSpec, tokens: int, width: int, s: int) -> int:
    """Bytes a composite RMSNorm keeps beyond its input and output: the normalized
    ``x·rstd`` that the weight multiply saves (LayerNorm's fused kernel keeps none)."""
    return tokens * width * s if spec.norm == "rmsnorm" else 0


def per_layer(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """Bytes one layer's backward keeps, by term (the layer input is the previous
    layer's ``feed_forward/down`` or the embedding, so it is not repeated here)."""
    if is_transformers(setup):
        return hf_saved.per_layer(spec, setup)
    B, T, s = setup.batch_size, setup.seq_len, setup.activation_bytes
    BT, d, h = B * T, spec.hidden_size, spec.num_attention_heads
    n = spec.norms_per_layer
    out: dict[str, int] = {
        "layernorm": n * BT * d * s,
        "layernorm/statistics": n * norm_statistics(spec, BT),
    }
    if spec.norm == "rmsnorm" and not is_mlx(setup):
        out["layernorm/normalized"] = n * norm_extra(spec, BT, d, s)
    if spec.qk_norm != "none":
        # The norm keeps its input (the raw q/k projection) and, for RMSNorm, x·rstd.
        widths = spec.q_dim + spec.kv_dim
        rows = BT * (spec.num_attention_heads + spec.kv_heads) if spec.qk_norm == "head" else 2 * BT
        keep = (2 if spec.norm == "rmsnorm" else 1) * BT * widths * s
        stats = (2 if spec.norm == "layernorm" else 1) * rows * FP32
        out["layernorm/qk_norm"] = keep + stats
    kv = kv_saved_width(spec, setup)
    out.update(
        {
            "attention/linear/q": BT * spec.q_dim * s,
            "attention/linear/k": BT * kv * s,
            "attention/linear/v": BT * kv * s,
            "attention/linear/context": BT * spec.q_dim * s,
            "attention/linear/out": BT * d * s,
        }
    )
    if spec.qk_norm == "head" and not keeps_t2(setup):
        # Per-head q/k norms leave Q head-major, so SDPA's saved output is head-major too
        # and the reshape for o_proj copies it: the context is kept twice (census).
        out["attention/linear/context_copy"] = BT * spec.q_dim * s
    if keeps_t2(setup):
        out["attention/quadratic/probs"] = B * h * T * T * FP32
        if s < FP32:
            out["attention/quadratic/probs_cast"] = B * h * T * T * s
    else:
        out["attention/logsumexp"] = B * h * T * FP32
    if spec.position_embedding == "rope" and not is_mlx(setup):
        # cos and sin, for Q and for K, each T × head_dim (not per batch row).
        out["attention/rope"] = 4 * T * spec.head_size * s
    f = spec.ffn_dim
    k = spec.num_experts_per_tok if spec.is_moe else 1
    if spec.ffn == "gated":
        out["feed_forward/gate"] = k * BT * f * s
    out["feed_forward/up"] = k * BT * f * s
    out["feed_forward/act"] = k * BT * f * s
    if spec.ffn == "gated":
        out["feed_forward/product"] = k * BT * f * s
    out["feed_forward/down"] = k * BT * d * s
    if spec.is_moe:
        out["feed_forward/router"] = 2 * BT * spec.num_local_experts * s
    return out


#: Per-layer terms still alive when that layer's attention backward runs (the rest of
#: the layer — the feed-forward side, the second norm, the context, the layer output —
#: has been freed by then, since backward runs the block in reverse).
ATTENTION_SIDE = (
    "layernorm/qk_norm",
    "attention/linear/q",
    "attention/linear/k",
    "attention/linear/v",
    "attention/quadratic/probs",
    "attention/quadratic/probs_cast",
    "attention/quadratic/dropout_mask",
    "attention/quadratic/dropped",
    "attention/logsumexp",
    "attention/rope",
)


def attention_side(layer: dict[str, int], spec: ModelSpec) -> int:
    """Bytes of ``layer`` still held during its attention backward: the attention-side
    terms plus the first norm's output and statistics (half of the norm terms when the
    block has two norms)."""
    kept = sum(layer.get(k, 0) for k in ATTENTION_SIDE)
    n = spec.norms_per_layer or 1
    for name in ("layernorm", "layernorm/statistics", "layernorm/normalized"):
        kept += layer.get(name, 0) // n
    return kept


def final(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """Bytes kept after the last layer: the final norm's output (saved by lm_head), its
    statistics and, for RMSNorm, its normalized input. The embedding output (layer 0's
    input) is the ``activations/embedding`` term."""
    if is_transformers(setup):
        return hf_saved.final(spec, setup)
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
    if is_transformers(setup):
        return hf_saved.logits_saved(spec, setup)
    BTV = setup.tokens * spec.vocab_size
    if setup.cross_entropy == "standard":
        return {"logits/log_softmax": BTV * FP32, "logits/output": BTV * setup.activation_bytes}
    return {"logits/logsumexp": setup.tokens * FP32}


def checkpointed_layer(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """With activation checkpointing (``torch.utils.checkpoint`` around each block) a
    layer keeps only its input — the previous layer's output — so of the per-layer terms
    only ``feed_forward/down`` (the layer output, B·T·d) stays; the rest is recomputed,
    one layer at a time, during backward."""
    if is_transformers(setup):
        return hf_saved.checkpointed_layer(spec, setup)
    return {"feed_forward/down": per_layer(spec, setup)["feed_forward/down"]}
