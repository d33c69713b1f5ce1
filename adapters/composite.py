"""The language model inside a composite class: which modules are the text model and
head (kept), and what the rest — a vision or audio tower, a projector — holds.

Read by :mod:`introspect.adapters.multimodal` (image-text wrappers) and by
:mod:`introspect.adapters.hf_transformers` (causal-LM classes that wrap a
``language_model`` beside an encoder); a module of its own so neither imports the other.
"""

from __future__ import annotations


def kept_prefixes(model) -> list[str]:
    """Qualified names of the wrapper's language model and output head: the module
    ``language_model`` (the wrapper's property, else the shallowest submodule of that
    name: GOT-OCR2 and Fuyu keep it at ``model.language_model`` with the property
    unset), else ``get_decoder()``; the head is ``get_output_embeddings()``."""
    names = {id(m): n for n, m in model.named_modules()}
    language = getattr(model, "language_model", None)
    if language is None or id(language) not in names:
        found = sorted(
            (n for n in names.values() if n.rpartition(".")[2] == "language_model"),
            key=lambda n: n.count("."),
        )
        language = model.get_submodule(found[0]) if found else model.get_decoder()
    head = model.get_output_embeddings()
    return [names[id(language)]] + ([names[id(head)]] if id(head) in names else [])


def describe_tower(model, names: dict[int, str], keep: list[str]) -> str:
    """The tower's top modules with their counts: ``Qwen3VLVisionModel (576,388,336)``."""
    parts = []
    for name, module in model.named_modules():
        if not name or any(name == k or name.startswith(k + ".") for k in keep):
            continue
        if any(k.startswith(name + ".") for k in keep):
            continue  # an ancestor of the language model (model.model)
        parent = name.rpartition(".")[0]
        if (
            parent
            and not any(k.startswith(parent + ".") for k in keep)
            and parent in {n for n in names.values()}
        ):
            continue  # inside a tower module already listed
        n = sum(p.numel() for p in module.parameters())
        if n:
            parts.append(f"{type(module).__name__} ({n:,})")
    if len(parts) == 1:
        return parts[0].rpartition(" (")[0]
    return ", ".join(parts)
