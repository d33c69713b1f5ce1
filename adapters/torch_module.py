"""Walk a live ``torch.nn.Module`` (meta device included) into a ModuleDescription.

Only names, shapes and object identities are read, never tensor data, so a model built
under ``with torch.device("meta"):`` is described without allocating a byte of weights.
Tied weights are the same ``Parameter`` object reached under two names
(``named_parameters(remove_duplicate=False)`` lists both); they count once.
"""

from __future__ import annotations

from introspect.adapters.module_walk import (
    ModuleDescription,
    ModuleTree,
    ParamEntry,
    describe_tree,
)

from introspect.errors import IntrospectError


def describe_torch(module, *, name: str | None = None) -> ModuleDescription:
    """Describe a torch module: exact parameter count (tied once), the ModelSpec its
    structure implies, each tensor's role, and every assumption made."""
    return describe_tree(torch_tree(module), name=name)


def torch_tree(module) -> ModuleTree:
    """The module's parameters (tied ones repeated) and modules, as the walker reads them."""
    import torch

    if not isinstance(module, torch.nn.Module):
        raise IntrospectError(
            f"expected a torch.nn.Module, got {type(module).__name__}; pass the model object"
        )
    modules = dict(module.named_modules(remove_duplicate=False))
    params = []
    for qname, p in module.named_parameters(remove_duplicate=False):
        if isinstance(p, torch.nn.parameter.UninitializedParameter):
            raise IntrospectError(
                f"{type(module).__name__}.{qname} is an uninitialized (lazy) parameter; "
                "run one forward pass or build the model with explicit sizes first"
            )
        owner = qname.rpartition(".")[0]
        params.append(ParamEntry(qname, tuple(int(s) for s in p.shape), id(p), owner))
    return ModuleTree("torch", tuple(params), modules)
