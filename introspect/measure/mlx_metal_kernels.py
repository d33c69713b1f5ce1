"""Metal's fused kernels' saved sets, emulated on MLX's CPU stream.

On the GPU ``mx.fast.rms_norm`` and ``mx.fast.rope`` are single primitives with their own
VJPs (``mlx/fast.cpp:112-177`` and ``573-605``; ``metal/normalization.cpp:13-15``,
``metal/rope.cpp:10-12``: the elementwise fallback runs on the CPU only). What a step
keeps for them differs: ``RMSNorm`` keeps its inputs x and w and ``RMSNormVJP`` reads
x, w and the cotangent; ``RoPE``'s VJP is the inverse rotation of the cotangent and keeps
nothing of x. :func:`metal_kernels` swaps both for ``mx.custom_function`` s with exactly
those saved sets and the same values, so a CPU step shows what the fused kernels change
in ``mx.get_peak_memory()`` — an emulation of the saved set, not a Metal measurement.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


def _fused_rms_norm(orig):
    import mlx.core as mx

    def rms_norm(x, weight, eps):
        @mx.custom_function
        def f(x, w):
            return orig(x, w, eps)

        @f.vjp
        def f_vjp(primals, cotangent, output):
            # RMSNorm::vjp's fallback formula (fast.cpp:133-163), on x, w, g only
            # In x's dtype: the Metal kernel makes no B·T·d temporaries at all (it
            # accumulates in registers), so the fewest the emulation can make; the values
            # round as x's dtype does, which moves no buffer.
            x, w = primals
            g = cotangent
            n = mx.rsqrt(mx.mean(mx.square(x), axis=-1, keepdims=True) + eps)
            gw = g * w
            t = mx.mean(gw * x, axis=-1, keepdims=True)
            dx = gw * n - x * t * n**3
            dw = mx.sum(g * (x * n), axis=tuple(range(g.ndim - 1)))
            return dx.astype(x.dtype), dw.astype(w.dtype)

        return f(x, weight)

    return rms_norm


def _fused_rope(orig):
    import mlx.core as mx

    def rope(x, dims, *, traditional, base, scale, offset, freqs=None):
        kw = dict(traditional=traditional, base=base, offset=offset, freqs=freqs)

        @mx.custom_function
        def f(x):
            return orig(x, dims, scale=scale, **kw)

        @f.vjp
        def f_vjp(primals, cotangent, output):
            # the inverse rotation: positions (offset + t)·scale negated
            return orig(cotangent, dims, scale=-scale, **kw)

        return f(x)

    return rope


@contextlib.contextmanager
def metal_kernels(rms_norm: bool = True, rope: bool = True) -> Iterator[None]:
    """``mx.fast.rms_norm`` / ``mx.fast.rope`` with Metal's saved sets while inside."""
    import mlx.core as mx

    orig_rms, orig_rope = mx.fast.rms_norm, mx.fast.rope
    if rms_norm:
        mx.fast.rms_norm = _fused_rms_norm(orig_rms)
    if rope:
        mx.fast.rope = _fused_rope(orig_rope)
    try:
        yield
    finally:
        mx.fast.rms_norm, mx.fast.rope = orig_rms, orig_rope


def sdpa_fallback_024(scale: float, heads: int, kv_heads: int, causal: bool):
    """MLX 0.24.0's ``scaled_dot_product_attention`` fallback (``mlx/fast.cpp``
    v0.24.0:667-717), the graph ``Custom::vjp`` differentiates (``fast.cpp``
    v0.24.0:15-29: ``vjp(fallback_, primals, cotangents)``): q scaled, grouped-query
    heads unflattened, ``scores = q @ kᵀ``, the causal mask ``q_idx >= k_idx`` (T² bool)
    applied by ``where`` with the dtype's minimum, ``softmax(precise=True)``, ``@ v``."""
    import mlx.core as mx

    def fallback(q, k, v):
        q = mx.array(scale, q.dtype) * q
        rep = heads // kv_heads
        batch, _, length, dim = q.shape
        if rep > 1:
            q = q.reshape(batch, kv_heads, rep, length, dim)
            k, v = mx.expand_dims(k, 2), mx.expand_dims(v, 2)
        scores = q @ mx.swapaxes(k, -1, -2)
        if causal:
            k_len, q_len = k.shape[-2], q.shape[-2]
            off = max(k_len - q_len, 0)
            mask = mx.arange(off, off + q_len)[:, None] >= mx.arange(k_len)[None]
            scores = mx.where(mask, scores, mx.array(mx.finfo(scores.dtype).min, scores.dtype))
        out = mx.softmax(scores, axis=-1, precise=True) @ v
        return out.reshape(batch, heads, length, -1) if rep > 1 else out

    return fallback


def fused_attention_vjp_bytes(
    batch: int, heads: int, kv_heads: int, seq: int, head_dim: int, dtype: str = "bf16"
) -> int:
    """Replay one layer's fused-attention VJP as MLX 0.24.x ran it (the fallback's VJP
    built in the backward, :func:`sdpa_fallback_024`) on the CPU stream: the bytes
    ``mx.get_peak_memory()`` rises by above q, k, v and the cotangent, less the three
    gradients it returns."""
    import mlx.core as mx

    dt = {"bf16": mx.bfloat16, "fp16": mx.float16, "fp32": mx.float32}[dtype]
    keys = mx.random.split(mx.random.key(0), 4)
    q = mx.random.normal((batch, heads, seq, head_dim), key=keys[0]).astype(dt)
    k = mx.random.normal((batch, kv_heads, seq, head_dim), key=keys[1]).astype(dt)
    v = mx.random.normal((batch, kv_heads, seq, head_dim), key=keys[2]).astype(dt)
    g = mx.random.normal((batch, heads, seq, head_dim), key=keys[3]).astype(dt)
    mx.eval(q, k, v, g)
    f = sdpa_fallback_024(head_dim**-0.5, heads, kv_heads, causal=True)
    mx.synchronize()
    mx.clear_cache()
    base = mx.get_active_memory()
    mx.reset_peak_memory()
    _, grads = mx.vjp(f, [q, k, v], [g])
    mx.eval(grads)
    return mx.get_peak_memory() - base - sum(a.nbytes for a in grads)


#: (B, h, kv heads, T, head dim) of the VJP replays :func:`attention_vjp_t2_bytes` reads.
VJP_SHAPES = (
    (1, 4, 2, 256, 64), (1, 4, 2, 512, 64), (2, 4, 2, 512, 64), (1, 8, 2, 512, 64),
    (1, 4, 4, 512, 64), (1, 4, 2, 1024, 64), (1, 4, 2, 512, 128), (3, 4, 2, 384, 64),
    (1, 8, 4, 768, 32), (2, 2, 1, 640, 64),
)  # fmt: skip


def attention_vjp_t2_bytes(dtype: str = "bf16") -> float:
    """Bytes per B·h·T² element one layer's 0.24.x fused-attention VJP holds at once:
    the least-squares coefficient of B·h·T² over the replays of :data:`VJP_SHAPES`
    (:func:`fused_attention_vjp_bytes`), beside T² (the bool mask), B·h·T·hd, B·kv·T·hd
    and B·h·T (q's and k/v's copies, the soft-max's row sums)."""
    import numpy as np

    rows, peaks = [], []
    for b, h, kv, t, hd in VJP_SHAPES:
        rows.append([b * h * t * t, t * t, b * h * t * hd, b * kv * t * hd, b * h * t])
        peaks.append(fused_attention_vjp_bytes(b, h, kv, t, hd, dtype))
    coef, *_ = np.linalg.lstsq(np.array(rows, float), np.array(peaks, float), rcond=None)
    return float(coef[0])


def _fused_sdpa_024(orig):
    import mlx.core as mx

    def sdpa(q, k, v, *, scale, mask=None, **kw):
        causal = isinstance(mask, str) and mask == "causal"
        if mask is not None and not causal:
            return orig(q, k, v, scale=scale, mask=mask, **kw)  # array masks: not emulated
        fallback = sdpa_fallback_024(scale, q.shape[1], k.shape[1], causal)

        @mx.custom_function
        def f(q, k, v):
            return orig(q, k, v, scale=scale, mask=mask, **kw)

        @f.vjp
        def f_vjp(primals, cotangent, output):
            # Custom::vjp (v0.24.0 fast.cpp:15-29): the fallback's VJP built here
            _, grads = mx.vjp(fallback, list(primals), [cotangent])
            return tuple(grads)

        return f(q, k, v)

    return sdpa


@contextlib.contextmanager
def fused_attention_024() -> Iterator[None]:
    """``mx.fast.scaled_dot_product_attention`` as MLX 0.24.x ran it on Metal under grad
    while inside: the forward keeps only its output (the fused kernel makes no T×T) and
    the VJP is the 0.24.0 fallback's, built in the backward (:func:`sdpa_fallback_024`)."""
    import mlx.core as mx

    orig = mx.fast.scaled_dot_product_attention
    mx.fast.scaled_dot_product_attention = _fused_sdpa_024(orig)
    try:
        yield
    finally:
        mx.fast.scaled_dot_product_attention = orig
