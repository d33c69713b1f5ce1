"""Walk a live ``mlx.nn.Module`` into a ModuleDescription without evaluating it.

MLX arrays are lazy: a freshly built model's weights are unevaluated graph nodes until
something calls ``mx.eval``. This walker reads ``.shape`` only, so a 7B-shaped model is
described without allocating its weights. Parameters come from
``mlx.utils.tree_flatten(module.parameters())``; the same array object under two names
(a weight assigned to two modules) is counted once. mlx-lm's tied models have no
``lm_head`` at all and call ``embed_tokens.as_linear``: the walker reads that as tied.
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
    for qname, array in tree_flatten(module.parameters()):
        owner = qname.rpartition(".")[0]
        # A parameter kept in a list or dict inside a module: its owner is the nearest
        # enclosing module.
        while owner and owner not in modules:
            owner = owner.rpartition(".")[0]
        params.append(ParamEntry(qname, tuple(int(s) for s in array.shape), id(array), owner))
    return describe_tree(ModuleTree("mlx", tuple(params), modules), name=name)
