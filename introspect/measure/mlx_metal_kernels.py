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
