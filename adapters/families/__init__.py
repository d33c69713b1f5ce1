"""The hand-written config readers, one small function per family, keyed by Hugging
Face's ``model_type``. Each takes a :class:`~introspect.adapters.config_reader.Reader`
and returns the :class:`~introspect.spec.ModelSpec` fields that family implies. They are
the fallback when transformers is absent and the exact structure when it is present
(its configuration classes then only supply the defaults)."""

from __future__ import annotations

from collections.abc import Callable

from introspect.adapters.config_reader import Reader

from . import classic, deepseek, gemma, hybrid, llama, mamba, moe

#: model_type → the function that reads that family's config.
REGISTRY: dict[str, Callable[[Reader], dict]] = {
    "llama": llama.llama,
    "mistral": llama.mistral,
    "qwen2": llama.qwen2,
    "qwen3": llama.qwen3,
    "olmo2": llama.olmo2,
    "qwen": classic.qwen,
    "phi": classic.phi,
    "phi3": classic.phi3,
    "gpt2": classic.gpt2,
    "gemma": gemma.gemma,
    "gemma2": gemma.gemma2,
    "gemma3_text": gemma.gemma3_text,
    "gemma3": gemma.gemma3,
    "mixtral": moe.mixtral,
    "qwen2_moe": moe.qwen2_moe,
    "qwen3_moe": moe.qwen3_moe,
    "gpt_oss": moe.gpt_oss,
    "deepseek_v3": deepseek.deepseek_v3,
    "llama4_text": deepseek.llama4_text,
    "llama4": deepseek.llama4,
    "qwen3_next": hybrid.qwen3_next,
    "granitemoehybrid": hybrid.granitemoehybrid,
    "bamba": hybrid.bamba,
    "nemotron_h": hybrid.nemotron_h,
    "mamba": mamba.mamba,
    "falcon_mamba": mamba.falcon_mamba,
    "jamba": mamba.jamba,
}


class BuildInstead(Exception):
    """A reader's config holds a part no layer kind models (Nemotron-H's routed-expert
    blocks): read it from transformers' build instead, which names the part
    (``ModelSpec.unmodelled``: the dry run answers)."""


#: Other model_types with the same parameters as a registered family (same tensors, same
#: config defaults): Ministral is Mistral with per-layer sliding windows.
ALIASES: dict[str, str] = {
    "ministral": "mistral",
}


def covered() -> str:
    """What the closed form covers, in one clause (:mod:`introspect.unmodelled`'s
    refusals): the hand-written readers and the causal LMs whose blocks are theirs."""
    return (
        "introspect's closed form covers decoder-only transformers (attention and "
        f"feed-forward blocks): the readers {', '.join(sorted({*REGISTRY, *ALIASES}))}, and "
        "transformers' causal LMs whose blocks are those"
    )
