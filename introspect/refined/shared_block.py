"""What one use of a shared transformer block keeps for backward (Zamba2's hybrid
layers): transformers' classes, per use; the weights' autocast copies once per block.

Source: ``transformers/models/zamba2/modeling_zamba2.py`` — ``Zamba2HybridLayer.forward``
(the block, then ``self.linear``, whose output joins the mixer layer's input),
``Zamba2AttentionDecoderLayer.forward`` (``torch.concatenate([hidden, original])``,
``input_layernorm``, ``self_attn``, ``pre_ff_layernorm``, ``feed_forward``; no residual
inside), ``Zamba2Attention.forward`` (q/k/v plus the per-use adapters, optional rotary,
``eager_attention_forward`` or SDPA, o_proj), ``Zamba2MLP.forward`` (``gate_up_proj``
plus its adapter, ``torch.chunk``, ``act_fn(gate) * up``, ``down_proj``) and
``Zamba2RMSNorm`` (Llama's: an FP32 copy of its input, the rstd, ``x·rstd`` cast back,
times the weight). Notation: B·T tokens, d, W = the block's input width (2·d), h heads
of ``head_dim``, q = h·head_dim, f the MLP width, r the adapter ranks, ``s`` the
activation bytes, ``rb`` the residual stream's (FP32 under autocast).

Terms per use, by the line that keeps them (storages once; parameters and the layer's
input not — the concatenation is a new tensor):

* ``input_norm``: the norm's FP32 input (the concatenation itself in FP32, else its
  ``.to(float32)`` copy; under autocast the stream and the embeddings are FP32), B·T·W·4;
  the rstd, B·T·4; ``x·rstd`` cast back to the stream's dtype (saved by the weight
  multiply), B·T·W·rb.
* ``input_norm/output``: the norm's output as q, k, v (and the q/k/v adapters' first
  linears) keep it: once at rb, or under autocast one BF16 cast per linear.
* ``attention/adapters``: each q/k/v adapter's rank-r middle (saved by its second
  linear), 3·B·T·r·s.
* ``attention/q``, ``k``, ``v``, ``context``, ``probs`` / ``probs_cast`` (eager) or
  ``logsumexp`` (SDPA): what :mod:`~introspect.refined.hf_saved` keeps for a Llama
  attention of these widths (K/V repeated to every head where it repeats them), the
  context o_proj keeps (B·T·q·s).
* ``ffn_norm``: ``pre_ff_layernorm`` over o_proj's d-wide output (at s): its FP32 copy
  (or the output itself, FP32), B·T·d·4; the rstd; ``x·rstd`` at s. Its output as
  gate_up and the gate_up adapter's first linear keep it: once at s, or two BF16 casts.
* ``feed_forward``: ``gate_up_proj(x) + adapter(x)`` (B·T·2f·s, whose halves the
  activation and the product read as views), the adapter's middle (B·T·r·s), the
  activation's output and the product (B·T·f·s each; plus what the activation's own
  ops keep, ``hf_saved.ACTIVATION_EXTRA``), and down_proj's output, saved by the per-use
  ``linear`` (B·T·d·s).
* ``autocast_weights`` (autocast only): the BF16 copies of the per-use linears (the
  output linear, the adapters) each use, and of the shared block's own (q, k, v, o,
  gate_up, down), which autocast's cache of leaf casts (``cached_cast``,
  ``aten/src/ATen/autocast_mode.cpp``) makes once per forward and every use's matmul
  saves: counted in each use (the one a checkpointed recompute makes) and once per
  block in the stack (:func:`stack_correction`).

The layer input after the block (``hidden + linear(...)``) is the mixer layer's norm
input, the size the previous layer's output would have been kept at: no term here.
"""

from __future__ import annotations

from introspect import _record
from introspect.layers import SharedBlock
from introspect.refined import hf_saved
from introspect.refined.cuda_sdpa import logsumexp_bytes
from introspect.refined.stream import is_amp, residual_bytes
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

FP32 = 4
BF16 = 2
PREFIX = "shared_block/"


def attention_spec(spec: ModelSpec, block: SharedBlock) -> ModelSpec:
    """The block's attention as a homogeneous spec of width W (what hf_saved's
    attention rules read: heads, K/V heads, head width, dropout, positions)."""
    att = block.attention
    return spec.replace(
        hidden_size=block.input_width,
        num_attention_heads=att.num_attention_heads,
        num_key_value_heads=att.num_key_value_heads,
        head_dim=att.head_dim,
        qk_norm="none",
        sliding_window=None,
        layers=(),
        num_local_experts=0,
        num_experts_per_tok=0,
        position_embedding="rope" if att.rope else "none",
        num_parameters=None,
    )


def _attention(spec: ModelSpec, setup: TrainingSetup, block: SharedBlock) -> dict[str, int]:
    """Q, K, V, the context and the kernel's own (hf_saved's rules at the block's
    widths)."""
    B, T, s = setup.batch_size, setup.seq_len, setup.activation_bytes
    BT, a = B * T, attention_spec(spec, block)
    h = a.num_attention_heads
    inner = FP32 if hf_saved.math_fallback(a, setup) else s
    kv = hf_saved.kv_saved_width(a, setup)
    out = {
        "attention/q": BT * a.q_dim * inner,
        "attention/k": BT * kv * inner,
        "attention/v": BT * kv * inner,
        "attention/context": BT * a.q_dim * s,
    }
    if hf_saved.keeps_t2(a, setup):
        t2 = B * h * T * T
        probs = hf_saved.probs_bytes(a, setup)
        out["attention/probs"] = t2 * probs
        if a.attention_dropout > 0:
            mask = hf_saved.dropout_mask_bytes(setup, hf_saved.dropped_bytes(a, setup))
            out["attention/dropout_mask"] = t2 * mask
            out["attention/dropped"] = t2 * inner
        elif probs > s:
            out["attention/probs_cast"] = t2 * s
    else:
        out["attention/logsumexp"] = logsumexp_bytes(
            B,
            h,
            T,
            device=setup.resolved_device,
            query_bytes=BF16 if is_amp(setup) else s,
            qk_head_dim=a.head_size,
            v_head_dim=a.head_size,
            masked=False,
        )
    return out


def block_weights(spec: ModelSpec, block: SharedBlock) -> int:
    """Elements of the shared block's linear weights (q, k, v, o, gate_up, down; not the
    adapter sets no use runs)."""
    from introspect.params import shared_block_params

    parts = shared_block_params(spec, _record.replace(block, idle_adapters=0))
    ff, att = block.feed_forward, block.attention
    biases = (att.q_dim + 2 * att.k_dim if att.qkv_bias else 0) + (
        spec.hidden_size if att.o_bias else 0
    )
    ffn_biases = (2 if ff.ffn == "gated" else 1) * ff.intermediate_size + spec.hidden_size
    return parts["attention"] - biases + parts["mlp"] - (ffn_biases if ff.bias else 0)


def saved(spec: ModelSpec, setup: TrainingSetup, block: SharedBlock) -> dict[str, int]:
    """Bytes one use of ``block`` keeps for backward, by term (the module docstring),
    each name under ``shared_block/``; B is the per-device batch."""
    from introspect.params import shared_use_params

    BT, s, rb = setup.tokens, setup.activation_bytes, residual_bytes(setup)
    amp = is_amp(setup)
    d, W = spec.hidden_size, block.input_width
    ff, r_att, r_ff = block.feed_forward, block.attention_adapter_rank, block.ffn_adapter_rank
    f = ff.intermediate_size
    up = (2 if ff.ffn == "gated" else 1) * f
    qkv_readers = 3 + (3 if r_att else 0)
    out = {
        "input_norm": BT * W * FP32 + BT * FP32 + BT * W * rb,
        "input_norm/output": BT * W * (qkv_readers * BF16 if amp else rb),
    }
    if r_att:
        out["attention/adapters"] = 3 * BT * r_att * s
    out.update(_attention(spec, setup, block))
    ffn_readers = 2 if r_ff else 1
    out["ffn_norm"] = BT * d * FP32 + BT * FP32 + BT * d * s
    out["ffn_norm/output"] = BT * d * (ffn_readers * BF16 if amp else s)
    out["feed_forward/gate_up"] = BT * up * s
    if r_ff:
        out["feed_forward/adapter"] = BT * r_ff * s
    out["feed_forward/act"] = BT * f * s
    extra = hf_saved.ACTIVATION_EXTRA.get(ff_act(spec), 0)
    if extra:
        out["feed_forward/act_intermediates"] = extra * BT * f * s
    if ff.ffn == "gated":
        out["feed_forward/product"] = BT * f * s
    out["feed_forward/down"] = BT * d * s
    if amp:
        own = sum(shared_use_params(spec, block).values())
        out["autocast_weights"] = BF16 * (own + block_weights(spec, block))
    return {PREFIX + k: v for k, v in out.items()}


def ff_act(spec: ModelSpec) -> str:
    """The block MLP's activation (``hidden_act``)."""
    return spec.hidden_act


def stack_correction(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """What the stack's per-use sum counts too often: under autocast each shared block's
    BF16 weight copies once per forward, not once per use (the cache of leaf casts), so
    less (uses − 1) copies per block. Negative values, to add to the stack's terms."""
    if not is_amp(setup):
        return {}
    uses: dict[int, int] = {}
    blocks: dict[int, SharedBlock] = {}
    for kind, count in spec.kinds:
        if kind.shared is not None:
            uses[kind.shared.block_id] = uses.get(kind.shared.block_id, 0) + count
            blocks[kind.shared.block_id] = kind.shared
    extra = sum((uses[i] - 1) * block_weights(spec, b) * BF16 for i, b in blocks.items())
    return {PREFIX + "autocast_weights": -extra} if extra else {}


def embedding_copy(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Bytes of ``original_hidden_states = torch.clone(inputs_embeds)``
    (``Zamba2Model.forward``) still held at the end of forward: only with checkpointing,
    where every checkpointed layer keeps it among its inputs (nothing saves it
    otherwise: the concatenation keeps no input)."""
    if not setup.activation_checkpointing:
        return 0
    if not any(kind.shared is not None for kind, _ in spec.kinds):
        return 0
    return setup.tokens * spec.hidden_size * residual_bytes(setup)


def autocast_cache(spec: ModelSpec) -> int | None:
    """Bytes of autocast's cache of BF16 weight copies over the whole forward (every leaf
    cast once: :func:`introspect.refined.execution.loss_forward`'s ``autocast_cache``)
    for a stack with shared blocks: each Mamba-2 layer's in_proj, out_proj and conv
    (:func:`introspect.refined.mamba2.saved`'s ``autocast_weights``), each use's own
    linears, each shared block's weights once. None for a stack without shared blocks
    (the caller's rule)."""
    from introspect.params import shared_use_params
    from introspect.refined import mamba2

    if not any(kind.shared is not None for kind, _ in spec.kinds):
        return None
    d, total = spec.hidden_size, 0
    for kind, count in spec.kinds:
        att = kind.attention
        if att.kind == "mamba2":
            w = mamba2.widths(att, d)
            total += count * (d * w["P"] + w["I"] * d + w["C"] * att.mamba_conv_kernel)
        if kind.shared is not None:
            total += count * sum(shared_use_params(spec, kind.shared).values())
    blocks = {k.shared.block_id: k.shared for k, _ in spec.kinds if k.shared is not None}
    total += sum(block_weights(spec, b) for b in blocks.values())
    return BF16 * total
