"""Small mappings several trainers share: attention implementation names, LoRA target
names, and torch dtype names onto the setup's vocabulary."""

from __future__ import annotations

from introspect.adapters.trainers._base import Keys

#: transformers' ``attn_implementation`` names → the setup's attention
#: (``modeling_utils.py``: eager keeps the T×T scores; sdpa and flash keep a log-sum-exp).
ATTENTION = {
    "eager": "eager",
    "sdpa": "memory_efficient",
    "flash_attention_2": "memory_efficient",
    "flash_attention_3": "memory_efficient",
    "flex_attention": "memory_efficient",
    "kernels-community/flash-attn": "memory_efficient",
    "kernels-community/vllm-flash-attn3": "memory_efficient",
}


def attention(keys: Keys, key: str, name: object) -> str:
    """The setup's attention for an ``attn_implementation`` value; an unknown name is
    refused as transformers refuses it."""
    if not isinstance(name, str) or name not in ATTENTION:
        raise keys.error(
            key,
            f"is {name!r}, not an attention implementation transformers knows",
            "use eager, sdpa, flash_attention_2 or flex_attention",
        )
    return ATTENTION[name]


#: LoRA target names of other trainers → peft's Hugging Face names.
TARGET_ALIASES = {
    "all": "all-linear",
    "all-linear": "all-linear",
    "output_proj": "o_proj",  # torchtune's attention output
    "w1": "gate_proj",
    "w3": "up_proj",
    "w2": "down_proj",
}


def lora_targets(keys: Keys, key: str, value: object) -> tuple[tuple[str, ...], list[str]]:
    """A list (or comma-separated string) of module names as the setup's LoRA targets,
    and the names introspect's LoRA model has no linear for (the caller notes them)."""
    from introspect import setup

    # The head and the embedding where the setup models LoRA on them (HEAD_LORA_MODULES).
    LORA_MODULES = setup.LORA_MODULES + getattr(setup, "HEAD_LORA_MODULES", ())

    names = value.split(",") if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names) or not names:
        raise keys.error(key, f"is {value!r}, not a list of module names")
    out, other = [], []
    for raw in names:
        name = TARGET_ALIASES.get(raw.strip(), raw.strip())
        if name != "all-linear" and name not in LORA_MODULES:
            other.append(raw)
            continue
        out.append(name)
    if "all-linear" in out:
        return ("all-linear",), other
    if not out:
        raise keys.error(
            key,
            f"names no module introspect's LoRA model has ({', '.join(map(str, other))})",
            f"use {', '.join(LORA_MODULES)} or all-linear, or --lora-targets",
        )
    return tuple(dict.fromkeys(out)), other
