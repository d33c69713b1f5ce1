"""Model shapes for measuring: the seed's nominal sizes and their Llama-style variants.

A Llama-style variant keeps L, d, h and V of a nominal shape and changes what Llama
changes: RMSNorm, a gated SiLU feed-forward of width ⌈8d/3⌉ rounded up to a multiple of
64 (Llama's ``multiple_of`` rule, so the parameters stay close to the standard 12d²
per block), grouped-query attention with a quarter of the heads for K and V (Llama 3
keeps 8 of 32), and no biases.
"""

from __future__ import annotations

from introspect.errors import IntrospectError
from introspect.spec import ModelSpec


def llama_style(spec: ModelSpec, multiple_of: int = 64) -> ModelSpec:
    """``spec`` as a Llama would build it (see the module docstring)."""
    d, h = spec.hidden_size, spec.num_attention_heads
    ffn = -(-8 * d // 3 // multiple_of) * multiple_of
    kv = max(1, h // 4)
    while h % kv:
        kv -= 1
    return spec.replace(
        norm="rmsnorm",
        norm_bias=False,
        ffn="gated",
        hidden_act="silu",
        intermediate_size=ffn,
        num_key_value_heads=kv,
        num_parameters=None,
        model_type="llama",
        source=f"{spec.source}, Llama-style (RMSNorm, SwiGLU f={ffn}, {kv} K/V heads)",
    )


def nominal_spec(name: str) -> ModelSpec | None:
    """The seed's synthetic shape for a nominal size (``10M``, ``40M``, …) with N counted
    from its structure, or ``None`` when ``name`` is not one."""
    from introspect.sizes import SHAPES

    for s in SHAPES:
        if s.nominal.lower() == name.lower():
            # The seed's N (2Vd + 12Ld²) leaves out norm weights; a model that is built
            # has them, so count them.
            return s.spec().replace(num_parameters=None)
    return None


def known_nominals() -> str:
    from introspect.sizes import SHAPES

    return ", ".join(s.nominal for s in SHAPES)


def require(condition: bool, message: str) -> None:
    if not condition:
        raise IntrospectError(message)
