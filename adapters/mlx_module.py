"""Walk a live ``mlx.nn.Module`` into a ModuleDescription without evaluating it.

MLX arrays are lazy: a freshly built model's weights are unevaluated graph nodes until
something calls ``mx.eval``. This walker reads ``.shape`` only, so a 7B-shaped model is
described without allocating its weights. Parameters come from
``mlx.utils.tree_flatten(module.parameters())``; the same array object under two names
(a weight assigned to two modules) is counted once. mlx-lm's tied models have no
``lm_head`` at all and call ``embed_tokens.as_linear``: the walker reads that as tied.
Quantized layers (``mlx.nn.quantize``, mlx-lm's 4-bit models) are read at their unpacked
shapes, so a quantized model reports the parameter count of the model it came from.
"""

from __future__ import annotations

from introspect.adapters.module_walk import (
    ModuleDescription,
    ModuleTree,
    ParamEntry,
    describe_tree,
)

from introspect.errors import IntrospectError


def describe_mlx(module, *, name: str | None = None) -> ModuleDescription:
    """Describe an MLX module: exact parameter count (tied once), the ModelSpec its
    structure implies, each tensor's role, and every assumption made."""
    import mlx.nn as nn
    from mlx.utils import tree_flatten

    if not isinstance(module, nn.Module):
        raise IntrospectError(
            f"expected an mlx.nn.Module, got {type(module).__name__}; pass the model object"
        )
    modules = dict(module.named_modules())
    params = []
    quantized: dict[int, int] = {}  # bits -> layers
    for qname, array in tree_flatten(module.parameters()):
        owner = qname.rpartition(".")[0]
        # A parameter kept in a list or dict inside a module: its owner is the nearest
        # enclosing module.
        while owner and owner not in modules:
            owner = owner.rpartition(".")[0]
        shape = tuple(int(s) for s in array.shape)
        bits = _quantized_bits(modules.get(owner))
        if bits:
            leaf = qname.rpartition(".")[2]
            if leaf != "weight" and leaf != "bias":
                continue  # scales and biases of the quantization, not model parameters
            if leaf == "weight":
                quantized[bits] = quantized.get(bits, 0) + 1
                shape = shape[:-1] + (shape[-1] * 32 // bits,)
        params.append(ParamEntry(qname, shape, id(array), owner))
    notes = tuple(
        f"{layers} quantized layers at {bits} bits: counted at their full (unpacked) shapes; "
        "quantization scales and biases are not counted as parameters"
        for bits, layers in sorted(quantized.items())
    )
    return describe_tree(ModuleTree("mlx", tuple(params), modules, notes), name=name)


def _quantized_bits(owner) -> int | None:
    """Bits per weight of an MLX quantized layer (QuantizedLinear, QuantizedEmbedding,
    mlx-lm's QuantizedSwitchLinear), whose weight packs 32/bits values per uint32 along
    the last axis; None for an ordinary layer."""
    bits = getattr(owner, "bits", None)
    if "quantized" in type(owner).__name__.lower() and isinstance(bits, int) and bits > 0:
        return bits
    return None
