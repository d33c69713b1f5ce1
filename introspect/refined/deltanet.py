"""What one Gated DeltaNet layer keeps for backward: transformers' torch fallbacks.

Source: ``transformers/models/qwen3_next/modeling_qwen3_next.py`` — ``Qwen3NextGatedDeltaNet``
(``forward``), ``causal_conv1d_fn``, ``l2norm``, ``torch_chunk_gated_delta_rule`` and
``Qwen3NextRMSNormGated``: what runs without the ``fla`` and ``causal_conv1d`` kernels
(CPU, or any machine without them). Notation: B, T; ``n_k``, ``n_v`` key and value heads,
``d_k``, ``d_v`` their widths, K = n_k·d_k, V = n_v·d_v, C = 2K + V (the conv's
channels), w = ``linear_conv_kernel_dim``, d = hidden size; c = 64, the chunk
(``chunk_size=64``, the caller passes none), T_p = T rounded up to a multiple of c
(``pad_size``), N = T_p / c chunks; ``a`` the activation bytes. Every kernel tensor is
FP32 (``.to(torch.float32)`` of q, k, v, β, g); under autocast (``amp``) its matmuls
(``@``, on autocast's BF16 list) save BF16 copies of their operands instead, while
``solve_triangular``, ``exp``, the element-wise products and the pads stay FP32.

Terms, by the line that keeps them (autograd saves the tensor named; storages count once):

* ``conv/input`` B·T·C·a: ``F.conv1d(hidden_states.to(weight.dtype), …)`` saves its input,
  the ``torch.cat((query, key, value))`` (under autocast: conv1d's BF16 cast of it);
  ``conv/output`` B·(T+w−1)·C·a: ``ACT2FN[activation](out)``, SiLU, saves its input, a
  slice of the conv's output, whose storage is w−1 positions longer (``padding``).
* ``gates``: ``b.sigmoid()`` keeps its output (B·T·n_v·a); ``F.softplus(a.float() +
  dt_bias)`` its FP32 input, and the product with ``-A_log.float().exp()`` the FP32
  softplus output (2·B·T·n_v·4) and the exp and its negation (2·n_v·4).
* ``qk_l2norm`` 2·B·n_v·T·(d_k + 1)·4: q and k, repeated to every value head
  (``repeat_interleave``) and upcast, each saved by ``x * x`` and ``x * inv_norm``,
  with ``inv_norm`` (``rsqrt``).
* ``padded`` B·n_v·T_p·(2·d_k + d_v + 1)·4: ``F.pad`` of q (scaled), k, v and β, saved by
  ``query @ key.transpose``, ``value * beta``, ``key * beta`` and the decay products.
* ``k_beta`` B·n_v·T_p·d_k·4: ``key * beta``, saved by ``k_beta @ key.transpose`` (or,
  under autocast, by ``k_beta * cum_decay.exp()``).
* ``mask`` c·c bytes: the boolean ``strictly_upper_mask`` of ``masked_fill``.
* ``chunk_matrices``, B·n_v·N·c² each: FP32 ``pairwise_decay`` (``exp`` keeps its output)
  and ``ut_system`` (saved by ``solve_triangular``); the two ``@ key.transpose``
  products (saved by their ``* pairwise_decay``; BF16 under autocast) and, without
  autocast, ``intra_chunk_attn`` (saved by ``intra_chunk_attn[:, :, i] @ v_new``).
* ``solved`` B·n_v·T_p·(d_v + d_k)·4: ``new_values`` and ``k_cumdecay``, the outputs
  ``solve_triangular`` saves.
* ``decays`` (3·B·n_v·T_p + B·n_v·N)·4: the three ``cum_decay… .exp()`` and
  ``chunk_decay`` (``exp`` keeps its output).
* ``state`` N·B·n_v·d_k·d_v·4: the recurrent state entering each chunk, saved by
  ``last_recurrent_state * chunk_decay[:, :, i]`` (the last chunk's result is not).
* Without autocast, ``scan``: each chunk's ``v_new`` (B·n_v·T_p·d_v·4 over all chunks,
  saved by the two matmuls that read it), the decayed ``key`` (B·n_v·T_p·d_k·4, saved by
  ``key[:, :, i].transpose(-1, -2) @ v_new``) and, from the second chunk on, the
  decayed ``query`` (B·n_v·T_p·d_k·4, saved by ``query[:, :, i] @ last_recurrent_state``;
  the first chunk's state is ``torch.zeros``, which needs no gradient, so with one chunk
  it is not kept).
* Under autocast, ``matmul_casts`` instead (BF16): key twice, k_beta and q for the two
  chunk products (4·B·n_v·T_p·d_k·2), and per chunk the state twice (2·d_k·d_v), the
  ``intra_chunk_attn`` slice (c²), ``v_new`` twice (2·c·d_v) and the key slice (c·d_k),
  and from the second chunk the ``k_cumdecay`` and query slices (2·c·d_k), each ·B·n_v·2.
* ``gated_norm`` (``Qwen3NextRMSNormGated`` over B·T·n_v rows of d_v): its FP32 input
  (the kernel's output, copied back to B·T order or upcast), the FP32 ``rsqrt``
  (B·T·n_v·4), ``x·rstd`` cast back (a), ``weight * …`` (a; FP32 under autocast, the
  weight being FP32), the FP32 gate ``z`` and its SiLU — each B·T·V. ``z`` is a copy
  (``reshape`` of a strided slice cannot be a view) unless n_k = n_v, when in FP32 it is
  a view of ``in_proj_qkvz``'s output and SiLU keeps that whole B·T·2(K+V) storage.
* ``context`` B·T·V·a: the gated output, saved by ``out_proj``.
* Under autocast, ``input_casts`` 2·B·T·d·2 — ``in_proj_qkvz`` and ``in_proj_ba`` each
  cast the FP32 norm output (autocast caches only casts of leaf tensors, the weights) —
  and ``autocast_weights``: the BF16 copies of the four weights,
  (d·2(K+V) + d·2n_v + C·w + V·d)·2.

* Layouts, in FP32 without autocast only, where ``x.transpose(1, 2).to(torch.float32,
  memory_format=torch.contiguous_format)`` copies nothing (``Tensor.to`` aliases when
  the dtype matches and the suggested format is already contiguous): q and k keep
  ``repeat_interleave``'s (B, T, n_v, d_k) order — with n_k = n_v they are views of the
  SiLU output, so ``x * x`` keeps that whole B·C·T storage, and ``z`` stays a view of
  ``in_proj_qkvz``'s output (B·T·2(K+V) kept by the gate's SiLU). With T a multiple of c,
  ``F.pad`` pads nothing and keeps that order, so ``matmul`` cannot fold the (B, n_v, N)
  batch of ``k_beta @ key.T`` and ``query @ key.T`` into one view (:func:`_folds`) and
  copies all four operands (``matmul_copies``, saved by ``bmm``), and each chunk's
  ``query[:, :, i] @ state`` copies its slice when B and n_v do not fold. With one
  value head and no copy back to (B, T, V), the gated norm keeps the padded output.

OLMo-Hybrid (``models/olmo_hybrid/modeling_olmo_hybrid.py``, ``OlmoHybridGatedDeltaNet``,
l. 572–750) runs the same ``causal_conv1d_fn``, ``l2norm``, ``torch_chunk_gated_delta_rule``
and gated RMSNorm (the code is identical) behind six separate linears
(``linear_projections="separate"``): ``torch.cat`` of q_proj, k_proj, v_proj feeds the conv
as above, the gate is ``g_proj``'s own contiguous output (so never the fused-projection
storage of the n_k = n_v case above: B·T·V·4 kept by its SiLU), and under autocast six
linears cast the FP32 norm output (``input_casts`` 6·B·T·d·2; the weights are as many).
``linear_allow_neg_eigval``'s ``beta * 2.0`` saves nothing (a multiply by a number).
Checked to the byte against the real module in ``tests/test_hybrids.py``.

Qwen3.5 (``models/qwen3_5/modeling_qwen3_5.py``, ``Qwen3_5GatedDeltaNet``, l. 500–656;
``models/qwen3_5_moe/modeling_qwen3_5_moe.py``, ``Qwen3_5MoeGatedDeltaNet``, l. 517–673,
the same code) runs the same kernels (``causal_conv1d_fn``, ``l2norm``,
``torch_chunk_gated_delta_rule``, l. 256–426, are Qwen3-Next's line for line, and
``Qwen3_5RMSNormGated``, l. 204–220, is ``Qwen3NextRMSNormGated``) behind four linears
(``linear_projections="qkv_z_b_a"``): ``in_proj_qkv``'s output is already the conv's
channel order, so ``mixed_qkv.transpose(1, 2)`` feeds ``causal_conv1d_fn`` with no
``torch.cat`` — conv1d keeps that projection's own B·T·C storage (in FP32 and BF16 its
``.to(weight.dtype)`` is the tensor itself; under autocast its BF16 cast of the FP32
copy), the same ``conv/input`` bytes; the gate is ``in_proj_z``'s own contiguous output
(``reshape`` views of it), never a view of a wider fused storage, so in FP32 its SiLU
keeps B·T·V·4 even with n_k = n_v; under autocast four linears cast the FP32 norm
output (``input_casts`` 4·B·T·d·2) and their weights, d·(C + V + 2·n_v), are the fused
layout's. A_log, dt_bias, the sigmoid of b and the softplus of a are Qwen3-Next's.
Checked to the byte against both classes in ``tests/test_deltanet.py``.

Checked against a census of the real module (``tests/test_deltanet.py``): equal to the
byte in FP32, BF16 and autocast, T = 5, 64, 100, 128, 130, B = 1, 2, with n_k < n_v and
n_k = n_v.
"""

from __future__ import annotations

from introspect.layers import Attention
from introspect.refined.architecture import LINEAR_CHUNK
from introspect.setup import TrainingSetup

FP32 = 4
BF16 = 2
#: The linears that read the mixer's input, by layout (``Attention.linear_projections``):
#: in_proj_qkvz and in_proj_ba; q, k, v, a, b and g_proj; in_proj_qkv, _z, _b and _a.
_LINEARS = {"qkvz": 2, "separate": 6, "qkv_z_b_a": 4}


def saved(att: Attention, setup: TrainingSetup, hidden_size: int) -> dict[str, int]:
    """Bytes one Gated DeltaNet forward (``Qwen3NextGatedDeltaNet``, OLMo-Hybrid's or
    Qwen3.5's, by ``att.linear_projections``) keeps for backward, by term (see the module
    docstring), excluding its input and parameters; B is the per-device batch."""
    B, T, a = setup.batch_size, setup.seq_len, setup.activation_bytes
    autocast = setup.precision == "amp"
    nk, nv = att.linear_num_key_heads, att.linear_num_value_heads
    dk, dv, w, d = (
        att.linear_key_head_dim,
        att.linear_value_head_dim,
        att.linear_conv_kernel_dim,
        hidden_size,
    )
    K, V = nk * dk, nv * dv
    C = 2 * K + V
    c = LINEAR_CHUNK
    N = -(-T // c)
    Tp = N * c
    heads = B * nv  # every kernel tensor is per batch row and value head
    # Without autocast, FP32 activations make ``.to(torch.float32)`` a no-op: q and k stay
    # the repeat_interleave'd (B, T, n_v, d_k) layout (n_k = n_v: views of the conv's
    # output), and an unpadded F.pad keeps that layout, so the chunk products copy.
    aliased = a == FP32 and not autocast
    qk = 2 * heads * T * dk * FP32
    if aliased and nk == nv:
        qk = B * C * T * FP32  # x * x saves the view: the SiLU output's whole storage
    out = {
        "attention/deltanet/conv/input": B * T * C * a,
        "attention/deltanet/conv/output": B * (T + w - 1) * C * a,
        "attention/linear/gates": B * T * nv * a + 2 * B * T * nv * FP32 + 2 * nv * FP32,
        "attention/deltanet/qk_l2norm": qk + 2 * heads * T * FP32,
        "attention/deltanet/padded": heads * Tp * (2 * dk + dv + 1) * FP32,
        "attention/deltanet/k_beta": heads * Tp * dk * FP32,
        "attention/deltanet/mask": c * c,
        "attention/deltanet/solved": heads * Tp * (dv + dk) * FP32,
        "attention/deltanet/decays": (3 * heads * Tp + heads * N) * FP32,
        "attention/deltanet/state": N * heads * dk * dv * FP32,
    }
    square = heads * N * c * c
    if autocast:
        out["attention/deltanet/chunk_matrices"] = 2 * square * FP32 + 2 * square * BF16
        per_chunk = 2 * dk * dv + c * c + 2 * c * dv + c * dk
        loop = N * per_chunk + (N - 1) * 2 * c * dk
        out["attention/deltanet/matmul_casts"] = (4 * Tp * dk + loop) * heads * BF16
    else:
        out["attention/deltanet/chunk_matrices"] = 5 * square * FP32
        # Unpadded, q, k and k_beta keep their layout: (B, T, n_v, d_k) from
        # repeat_interleave, or with n_k = n_v the conv's (B, n_v, d_k, T); the strides
        # of their (B, n_v, N) batch dims once chunked.
        strided = aliased and T % c == 0
        if nk != nv:
            batch = (T * nv * dk, dk, c * nv * dk)
        else:
            batch = (nv * dk * T, dk * T, c)
        query = heads * Tp * dk * FP32 if N > 1 else 0
        if strided and not _folds((B, nv), batch[:2]):
            # query[:, :, i] @ state cannot fold B and n_v into one batch: each chunk's
            # product copies its slice and saves the copy (from the second chunk on).
            query = (N - 1) * heads * c * dk * FP32
        out["attention/deltanet/scan"] = heads * Tp * (dv + dk) * FP32 + query
        if strided and not _folds((B, nv, N), batch):
            # k_beta @ key.T and query @ key.T copy both operands to fold (B, n_v, N).
            out["attention/deltanet/matmul_copies"] = 4 * heads * Tp * dk * FP32
    rows = B * T * V
    weighted = FP32 if autocast else a
    layout = att.linear_projections
    gate = rows * FP32
    if nk == nv and aliased and layout == "qkvz":
        gate = B * T * 2 * (K + V) * FP32  # SiLU keeps in_proj_qkvz's whole output
    kernel_out = rows * FP32
    if aliased and nv == 1 and (B == 1 or T == Tp):
        # The output's transpose back to (B, T, V) is already contiguous: no copy, and
        # the norm keeps the padded ``zeros_like`` it was written into.
        kernel_out = heads * Tp * dv * FP32
    out["attention/deltanet/gated_norm"] = (
        kernel_out + rows * (a + weighted + FP32) + B * T * nv * FP32 + gate
    )
    out["attention/linear/context"] = rows * a
    if autocast:
        casts = _LINEARS[layout]  # the linears that read the FP32 norm output
        out["attention/linear/input_casts"] = casts * B * T * d * BF16
        weights = d * 2 * (K + V) + d * 2 * nv + C * w + V * d
        out["attention/linear/autocast_weights"] = weights * BF16
    return out


def _folds(sizes: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether dims of ``sizes``/``strides`` merge into one without a copy (torch's view
    rule: each dim of size > 1 spans exactly the next one's extent), as ``matmul`` needs to
    fold batch dims before ``bmm``."""
    dims = [(n, st) for n, st in zip(sizes, strides, strict=True) if n > 1]
    return all(st == nxt * m for (_, st), (m, nxt) in zip(dims, dims[1:], strict=False))


def forward_extra(att: Attention, setup: TrainingSetup, hidden_size: int) -> dict[str, int]:
    """Bytes one Gated DeltaNet forward holds at its peak beyond its whole saved set
    (:func:`saved`; may be negative where the saved set made after the peak outweighs the
    locals): the largest of :func:`forward_moments`, as the term
    ``attention/deltanet/forward``. The layer's forward peak is its saved set plus this;
    under checkpointing the recomputation at the start of the layer's backward runs the
    same forward (``torch/utils/checkpoint.py``) and reaches the same peak."""
    return {"attention/deltanet/forward": max(forward_moments(att, setup, hidden_size).values())}


def forward_moments(att: Attention, setup: TrainingSetup, hidden_size: int) -> dict[str, int]:
    """Each moment of one ``Qwen3NextGatedDeltaNet`` / ``OlmoHybridGatedDeltaNet`` /
    ``Qwen3_5GatedDeltaNet`` forward (by ``att.linear_projections``)
    that can hold its peak, as bytes alive beyond the whole saved set (:func:`saved`):
    the locals still bound (made and not saved) less the saved tensors not yet made.

    Source: ``transformers/models/qwen3_next/modeling_qwen3_next.py`` —
    ``Qwen3NextGatedDeltaNet.forward`` (l. 660–770), ``causal_conv1d_fn`` (l. 340–361),
    ``torch_chunk_gated_delta_rule`` (l. 371–509), ``Qwen3NextRMSNormGated.forward``
    (l. 66–75); ``models/olmo_hybrid/modeling_olmo_hybrid.py``,
    ``OlmoHybridGatedDeltaNet.forward`` (l. 637–749), the same kernel and norm. Notation
    as the module docstring; m the kernel matmuls' output bytes (BF16 under autocast, on
    its list, else FP32).

    Locals of the mixer, bound until it returns (``mixer``): the SiLU output of the conv,
    B·C·T·a, whose views q, k and v are (saved instead where FP32 without autocast and
    n_k = n_v: ``x * x`` keeps it); ``g`` B·T·n_v·4 (its transposed copy is what the kernel
    reads). Qwen3-Next: ``in_proj_ba``'s output B·T·2n_v·a, ``in_proj_qkvz``'s
    B·T·2(K+V)·a (saved as the gate instead in the FP32 n_k = n_v case), and with
    1 < n_k < n_v the ``reshape`` copies of b, a (2·B·T·n_v·a) and of z (B·T·V·a; in FP32
    the gate itself, saved). OLMo-Hybrid: ``beta * 2.0`` (``linear_allow_neg_eigval``,
    the class default) B·T·n_v·a. Qwen3.5 (``models/qwen3_5/modeling_qwen3_5.py``,
    ``Qwen3_5GatedDeltaNet.forward``, l. 546–656; ``Qwen3_5MoeGatedDeltaNet`` the same):
    ``in_proj_b``'s and ``in_proj_a``'s outputs (2·B·T·n_v·a) and ``in_proj_z``'s, B·T·V·a
    (``reshape`` views it; in FP32 the gate itself, saved — never a wider storage, so the
    gate made before the kernel is B·T·V·4 even with n_k = n_v); no ``torch.cat`` and no
    grouped ``reshape`` copies; ``in_proj_qkv``'s output is conv1d's saved input (under
    autocast its BF16 output dies with ``causal_conv1d_fn``'s FP32 copy once conv1d has
    cast it).

    Locals of the kernel through its scan (``kernel``): the padded decay and its cumsum
    (2·B·n_v·T_p·4), ``v_beta`` and ``k_beta * cum_decay.exp()`` (the right-hand sides
    ``solve_triangular`` does not save, B·n_v·T_p·(d_v + d_k)·4), ``core_attn_out``
    (``zeros_like``, B·n_v·T_p·d_v·4), the decayed query where nothing saves it (one
    chunk, autocast, or the strided case whose matmuls copy its slices — and the decayed
    key's there), and under
    autocast the decayed key and ``intra_chunk_attn`` (B·n_v·T_p·d_k·4 + B·n_v·N·c²·4:
    their BF16 casts are saved instead). In the last chunk ``v_new`` (autocast: saved
    only as casts) and ``inter_chunk_attn`` (B·n_v·c·d_v·m) are bound.

    Moments: ``scan/state`` — the last chunk's state update
    ``last_recurrent_state * chunk_decay[:, :, i] + key[…]ᵀ @ v_new``: the product, the
    matmul and the sum, B·n_v·d_k·d_v·(4 + m + 4); ``scan/output`` — its
    ``core_attn_out[:, :, i] = inter + intra @ v_new``: the matmul and the sum,
    2·B·n_v·c·d_v·m; ``reshape`` — with several chunks ``core_attn_out.reshape`` copies
    (``solve_triangular``'s output, and so ``zeros_like``'s, is column-major in its last
    two dims), B·n_v·T_p·d_v·4; ``cast`` — 16-bit activations: the output's
    ``.to(initial_dtype, contiguous_format)`` B·T·V·a (FP32 aliases); ``norm`` — at the
    gated norm's last line, the kernel's locals freed: ``variance`` B·T·n_v·4 and, 16-bit,
    the kernel's output B·T·V·a (OLMo-Hybrid: and ``g_proj``'s) and the FP32 product
    before its cast B·T·V·4; ``out_proj`` — its output B·T·d·a.

    The saved set not yet made at the kernel's moments: the gated norm's (but the gate,
    where FP32 keeps the z copy or ``in_proj_qkvz``'s output made before the kernel),
    out_proj's input and, under autocast, its weight's cast (V·d·2) — OLMo-Hybrid's
    ``g_proj`` runs after the kernel too: under autocast its input's and weight's casts
    (B·T·d·2 + d·V·2). After the scan :func:`released` is freed (a decayed key still
    bound to ``key`` when the kernel returns). Checked to the byte
    against a live-storage trace of the real modules (``tests/test_deltanet_rows.py``)."""
    B, T, a = setup.batch_size, setup.seq_len, setup.activation_bytes
    autocast = setup.precision == "amp"
    nk, nv = att.linear_num_key_heads, att.linear_num_value_heads
    dk, dv, d = att.linear_key_head_dim, att.linear_value_head_dim, hidden_size
    K, V = nk * dk, nv * dv
    C = 2 * K + V
    c = LINEAR_CHUNK
    N = -(-T // c)
    Tp = N * c
    heads = B * nv
    rows = B * T * V
    m = BF16 if autocast else FP32
    aliased = a == FP32 and not autocast
    layout = att.linear_projections
    separate = layout == "separate"
    grouped = 1 < nk != nv  # reshape of a strided (n_k, n_v / n_k) split copies
    mixer = B * T * nv * FP32  # g
    if not (aliased and nk == nv):
        mixer += B * C * T * a  # the conv's SiLU output (q, k, v are its views)
    if separate:
        mixer += B * T * nv * a  # beta * 2.0
    elif layout == "qkv_z_b_a":
        # in_proj_b's and in_proj_a's outputs; in_proj_z's (FP32: the gate, saved).
        # in_proj_qkv's output is conv1d's saved input (autocast: freed after its cast).
        mixer += B * T * 2 * nv * a
        if not aliased:
            mixer += rows * a
    else:
        mixer += B * T * 2 * nv * a  # in_proj_ba's output
        if not (aliased and nk == nv):
            mixer += B * T * 2 * (K + V) * a  # in_proj_qkvz's output
        if grouped:
            mixer += 2 * B * T * nv * a  # b and a, reshaped
            if not aliased:
                mixer += rows * a  # z, reshaped (FP32: the gate, saved)
    kernel = 2 * heads * Tp * FP32 + heads * Tp * (2 * dv + dk) * FP32
    copied = _query_slices_copied(att, setup)
    if autocast or N == 1 or copied:
        kernel += heads * Tp * dk * FP32  # the decayed query, saved by nothing
    if copied:
        # So is the decayed key: key[:, :, i].transpose(-1, -2) @ v_new copies each slice
        # (saved: :func:`saved`'s scan counts the same bytes), the last after the output's line.
        kernel += heads * Tp * dk * FP32
    if autocast:
        kernel += heads * Tp * dk * FP32 + heads * N * c * c * FP32
    loop = heads * c * dv * m + (heads * c * dv * FP32 if autocast else 0)
    kept = saved(att, setup, d)
    gate = 0
    if aliased and not separate:  # the FP32 gate made before the kernel
        gate = B * T * 2 * (K + V) * FP32 if nk == nv and layout == "qkvz" else rows * FP32
    later = kept["attention/deltanet/gated_norm"] - gate + kept["attention/linear/context"]
    weight_cast = V * d * BF16 if autocast else 0
    later += weight_cast
    if autocast and separate:
        later += B * T * d * BF16 + d * V * BF16  # g_proj's input and weight casts
    held = mixer + kernel + loop
    # Under autocast the state update's casts of the key slice and v_new, saved, come after
    # the output's line.
    state_casts = heads * c * (dk + dv) * BF16 if autocast else 0
    key_copy = heads * c * dk * FP32 if copied else 0
    out = {
        "scan/state": held + heads * dk * dv * (2 * FP32 + m) - later,
        "scan/output": held + 2 * heads * c * dv * m - later - state_casts - key_copy,
    }
    # From ``last_recurrent_state = None`` on, the last state update's graph is freed;
    # a decayed key it alone saved stays bound to ``key`` until the kernel returns.
    gone = released(att, setup)
    early = gone if autocast or copied else 0
    if N > 1:
        out["reshape"] = held + heads * Tp * dv * FP32 - later - early
    if not aliased:
        out["cast"] = held + rows * a - later - early
        after = rows * a * (2 if separate else 1) + rows * FP32
        out["norm"] = mixer + after + B * T * nv * FP32 - weight_cast - gone
        out["out_proj"] = mixer + B * T * d * a + (rows * a if separate else 0) - gone
    else:
        out["norm"] = mixer + B * T * nv * FP32 - gone
        out["out_proj"] = mixer + B * T * d * a - gone
    return out


def released(att: Attention, setup: TrainingSetup) -> int:
    """Bytes of :func:`saved` that the forward frees again: what only the last chunk's
    state update (``last_recurrent_state * chunk_decay[:, :, i] + key[:, :, i]ᵀ @ v_new``,
    ``torch_chunk_gated_delta_rule`` l. 500) saves. Its result is dropped
    (``last_recurrent_state = None`` without ``output_final_state``, l. 503), so no path
    leads from the loss to that node and autograd frees it with what it saved. Under
    autocast that is the FP32 state entering the last chunk (the other matmuls keep its
    BF16 casts), B·n_v·d_k·d_v·4, and the BF16 casts of the key slice and v_new,
    B·n_v·c·(d_k + d_v)·2; else the decayed key where only that matmul keeps it: the
    whole B·n_v·T_p·d_k·4 with one chunk, or the last chunk's copy B·n_v·c·d_k·4 where
    each slice is copied. (The census of :func:`saved` holds every saved tensor, so it
    counts these too.) Measured with a live-storage trace of the real module whose
    pack hook holds weak references only (``tests/test_deltanet_rows.py``)."""
    B, T = setup.batch_size, setup.seq_len
    nv, dk, dv = att.linear_num_value_heads, att.linear_key_head_dim, att.linear_value_head_dim
    c = LINEAR_CHUNK
    heads = B * nv
    if setup.precision == "amp":
        return heads * dk * dv * FP32 + heads * c * (dk + dv) * BF16
    if _query_slices_copied(att, setup):
        return heads * c * dk * FP32
    return heads * c * dk * FP32 if T <= c else 0


def _query_slices_copied(att: Attention, setup: TrainingSetup) -> bool:
    """Whether each chunk's ``query[:, :, i] @ last_recurrent_state`` copies its slice
    (FP32 without autocast, T a multiple of c, B and n_v not folding: :func:`saved`'s
    ``scan`` rule), so that the decayed query itself is saved by nothing."""
    B, T = setup.batch_size, setup.seq_len
    nk, nv, dk = att.linear_num_key_heads, att.linear_num_value_heads, att.linear_key_head_dim
    aliased = setup.activation_bytes == FP32 and setup.precision != "amp"
    if not (aliased and T % LINEAR_CHUNK == 0):
        return False
    batch = (T * nv * dk, dk) if nk != nv else (nv * dk * T, dk * T)
    return not _folds((B, nv), batch)


def backward_transient(att: Attention, setup: TrainingSetup, hidden_size: int) -> int:
    """Bytes one Gated DeltaNet layer's backward holds inside its kernel's first
    ``solve_triangular`` backward beyond its saved set less :func:`released` (negative
    where what autograd has freed by then outweighs what it made).

    Source: ``torch_chunk_gated_delta_rule`` (``models/olmo_hybrid/modeling_olmo_hybrid.py``
    l. 360–500; Qwen3-Next's and Qwen3.5's line for line). The engine runs ready nodes by
    descending sequence number (``torch/csrc/autograd/engine.cpp``, ``ReadyQueue``), so the
    ``solve_triangular`` for ``new_values`` (l. 458, the kernel's first) runs after every
    node made after it; this moment is at its ``neg``
    (``linalg_solve_triangular_backward``, ``torch/csrc/autograd/FunctionsManual.cpp``:
    the gradient of A is ``-(gB @ Xᴴ)`` masked to its lower triangle).

    Alive then, beyond the saved set (``Temp``): four chunk-square blocks
    B·n_v·N·c²·4 — ``intra_chunk_attn``'s accumulated gradient, the other solve's gradient
    of ``ut_system`` (``tril``), this solve's ``bmm`` and ``neg``; the gradients of query
    and key, the right-hand sides' (``v_beta`` and ``decayed_k_beta``) and ``v_beta``'s
    ``mul``, B·n_v·T_p·(3·d_k + 2·d_v)·4 — with one chunk (N = 1) one B·n_v·T_p·d_k·4
    fewer: the decayed key gets no gradient, the last chunk's state update being dropped;
    the cumulative decay's gradient B·n_v·T_p·4; and OLMo-Hybrid's ``g_proj`` input
    gradient, B·T·d (FP32 under autocast, the norm output's dtype; its backward ran, the
    gate being made after the kernel), or for Qwen3-Next and Qwen3.5 the gate's gradient
    B·T·V·a (BF16 under autocast), waiting for ``in_proj_qkvz`` / ``in_proj_z`` (made
    before the kernel, so lower in sequence).

    Freed by then (every node after the first solve has run and released what it saved,
    :func:`saved`'s terms): ``k_cumdecay`` (of ``solved``) B·n_v·T_p·d_k·4; the two
    decays' ``exp`` outputs 2·B·n_v·T_p·4 and ``chunk_decay`` B·n_v·N·4 (of ``decays``);
    the states (``state``); the gated norm and ``context``; and, less :func:`released`
    (already gone): under autocast the scan's BF16 casts (``matmul_casts`` but the chunk
    products' 4·B·n_v·T_p·d_k·2), the padded query (saved by ``query * cum_decay.exp()``
    alone, its matmuls keeping BF16 casts) B·n_v·T_p·d_k·4, ``out_proj``'s weight cast
    V·d·2 and OLMo-Hybrid's ``g_proj`` input and weight casts B·T·d·2 + d·V·2; else the
    ``scan`` term and ``intra_chunk_attn`` B·n_v·N·c²·4 (saved by the scan's matmuls),
    and where ``query @ key.T`` saved copies of its operands (``matmul_copies``) the
    padded query too.

    Measured: a live-storage trace of the real modules' forward and backward
    (``tests/test_deltanet_rows.py``)."""
    B, T, a = setup.batch_size, setup.seq_len, setup.activation_bytes
    autocast = setup.precision == "amp"
    nv, dk, dv, d = (
        att.linear_num_value_heads,
        att.linear_key_head_dim,
        att.linear_value_head_dim,
        hidden_size,
    )
    V = nv * dv
    c = LINEAR_CHUNK
    N = -(-T // c)
    Tp = N * c
    heads = B * nv
    square = heads * N * c * c * FP32
    separate = att.linear_projections == "separate"
    # The decayed key's gradient comes only from chunks before the last (the last state
    # update is dropped, :func:`released`): with one chunk there is none.
    blocks = (3 if N > 1 else 2) * dk + 2 * dv + 1
    temp = 4 * square + heads * Tp * blocks * FP32
    if separate:
        temp += B * T * d * (FP32 if autocast else a)  # g_proj's input gradient
    else:
        temp += B * T * V * (BF16 if autocast else a)  # the gate's, waiting for its projection
    kept = saved(att, setup, d)
    freed = (
        heads * Tp * dk * FP32  # k_cumdecay
        + 2 * heads * Tp * FP32  # the decays' exp outputs
        + heads * N * FP32  # chunk_decay
        + kept["attention/deltanet/state"]
        + kept["attention/deltanet/gated_norm"]
        + kept["attention/linear/context"]
        - released(att, setup)
    )
    if autocast:
        freed += kept["attention/deltanet/matmul_casts"] - 4 * heads * Tp * dk * BF16
        freed += heads * Tp * dk * FP32 + V * d * BF16  # the padded query, out_proj's cast
        if separate:
            freed += B * T * d * BF16 + d * V * BF16  # g_proj's input and weight casts
    else:
        freed += kept["attention/deltanet/scan"] + square  # and intra_chunk_attn
        if "attention/deltanet/matmul_copies" in kept:
            # query @ key.T saved its copies: the padded query, as under autocast.
            freed += heads * Tp * dk * FP32
    return temp - freed
