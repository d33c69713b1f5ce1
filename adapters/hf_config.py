"""config.json → ModelSpec: transformers' configuration classes for the defaults, the
family readers (:mod:`introspect.adapters.families`) for the structure.

Keys that fix the size of the big matrices (``hidden_size``, ``num_hidden_layers``,
``num_attention_heads``, ``vocab_size``, ``intermediate_size``) are required: a config
without them is an error, never a guess. Every other key the count depends on falls back
to the default of the family's configuration class: with transformers importable, the
class itself (``AutoConfig.for_model(model_type, **config)``, which also derives what its
``__post_init__`` derives — ``layer_types``, ``head_dim`` …); without it, the default
copied by hand into the family reader. Each default applied is recorded in
``ModelSpec.assumptions``.

A ``model_type`` transformers knows but no family reader covers is read from the model
transformers builds from the config on the meta device (no weights;
:mod:`introspect.adapters.hf_transformers`): its exact count and the spec its modules
imply — or, where its blocks hold a part no layer kind models (a Mamba mixer, an RG-LRU,
an unknown attention), a spec that names those parts (``ModelSpec.unmodelled``) instead
of inventing a dense stack (:mod:`introspect.unmodelled`). An encoder or a model_type
with no causal-LM class is refused in one line. A ``model_type`` neither knows is one
line naming it and the file. An illegal ``quantization_config`` (or mlx-lm
``quantization`` block) is refused naming the key and the file, by the rules of
:mod:`introspect.adapters.quantized` that also apply when the weights are read.
"""

from __future__ import annotations

from introspect.errors import ConfigError, UnsupportedArchitecture
from introspect.spec import ModelSpec

from .config_file import MAX_CONFIG_BYTES as MAX_CONFIG_BYTES
from .config_file import load_config as load_config
from .config_reader import Reader
from .dropout import dropout_facts, number_at
from .families import ALIASES, REGISTRY, BuildInstead
from .softcap import softcap_facts

TYPE_CHECKING = False  # typing's flag without importing typing (see introspect._record)
if TYPE_CHECKING:
    from typing import Any


def supported_model_types() -> tuple[str, ...]:
    """Every ``model_type`` the hand-written readers cover, sorted (aliases included)."""
    return tuple(sorted({*REGISTRY, *ALIASES}))


def spec_from_config(
    config: dict[str, Any],
    *,
    source: str = "",
    path: str | None = None,
    use_transformers: bool | None = None,
) -> ModelSpec:
    """The ModelSpec a Hugging Face ``config.json`` describes.

    ``source`` is recorded in the spec (a Hub id, a path); ``path`` names the file in
    error messages. ``use_transformers`` (default: when importable) lets transformers'
    configuration classes supply the defaults; ``False`` uses the hand-written ones only.
    For a family reader's model_type ``num_parameters`` is left ``None`` (the count
    follows from the structure); for one only transformers knows it is the meta-device
    build's exact count.

    Raises :class:`UnsupportedArchitecture` for a ``model_type`` neither knows and
    :class:`ConfigError` for missing keys, wrong types or impossible values.
    """
    where = path or source or "config.json"
    if not isinstance(config, dict):
        raise ConfigError(f"{where}: expected a JSON object, found {type(config).__name__}")
    model_type = config.get("model_type")
    if model_type is None:
        raise ConfigError(
            f"{where}: no model_type; a Hugging Face config.json names its architecture "
            'there (e.g. "llama")'
        )
    if not isinstance(model_type, str):
        raise ConfigError(f"{where}: model_type must be a string, got {model_type!r}")
    if config.get("quantization_config") is not None or "quantization" in config:
        # A config.json read without its weights is held to the same quantization rules
        # as one read beside them (bits a legal integer, one bitsandbytes width …).
        from .quantized import config_quant

        config_quant(config, where)
    from . import hf_transformers as hft

    with_hf = hft.available() if use_transformers is None else use_transformers
    family = ALIASES.get(model_type, model_type)
    read = REGISTRY.get(family)
    if read is None:
        from . import multimodal

        if with_hf and hft.knows(model_type) and multimodal.is_wrapper(config, model_type):
            return multimodal.spec_from_wrapper(
                config, model_type, where=where, source=source or where, read_text=spec_from_config
            )
        if with_hf and hft.knows(model_type):
            return hft.spec_from_build(config, model_type, where=where, source=source or where)
        hint = (
            "transformers does not know it either"
            if with_hf
            else "install transformers to read the ~300 model types it knows"
        )
        raise UnsupportedArchitecture(
            f"{where}: model_type {model_type!r} is not supported ({hint}); a checkpoint "
            "folder's safetensors headers still give the exact count; readers cover: "
            f"{', '.join(supported_model_types())}"
        )

    def fill() -> tuple[dict[str, Any], str, str]:
        if not (with_hf and hft.knows(model_type)):
            return {}, "", ""
        return hft.filled(config, model_type, where)

    reader = Reader(config, model_type, where, defaults=fill)
    try:
        fields = read(reader)
    except BuildInstead as e:
        if with_hf:
            spec = hft.spec_from_build(config, model_type, where=where, source=source or where)
            named = {*e.modelled, str(e).partition(" (")[0]}  # the reader's line names its own
            walked = [p for p in spec.unmodelled if p.partition(" (")[0] not in named]
            return spec.replace(unmodelled=(str(e), *walked))
        raise UnsupportedArchitecture(
            f"{where}: model_type {model_type!r} holds parts no reader models; install "
            "transformers to read it from its build"
        ) from None
    except ValueError as e:  # a layer kind's own invariant (top-k, window, heads)
        raise ConfigError(f"{where}: {e}") from e
    for key, value in execution_facts(config, family).items():
        fields.setdefault(key, value)
    mtp = fields.pop("_mtp", None)
    try:
        spec = ModelSpec(
            **fields,
            model_type=model_type,
            source=source or (path or ""),
            assumptions=tuple(dict.fromkeys(reader.assumptions)),
        )
    except ValueError as e:
        raise ConfigError(f"{where}: {e}") from e
    if mtp:
        from .families.deepseek import mtp_parameters

        spec = spec.replace(unbuilt_parameters=mtp_parameters(spec, *mtp))
    return spec


#: Dropout defaults of the configuration classes that enable it (``GPT2Config``: 0.1
#: each); every other family's default is 0.0.
_DROPOUT_DEFAULTS = {"gpt2": 0.1}
#: Soft-capping defaults (``Gemma2Config``: 30.0 on the logits, 50.0 on the attention
#: scores); other families cap only where their config says so.
_SOFTCAP_DEFAULTS = {"gemma2": (30.0, 50.0)}


def execution_facts(config: dict[str, Any], family: str) -> dict[str, float]:
    """The dropout probabilities and Phi's rotary fraction the refined execution layer
    reads: :func:`dropout_facts`; ``partial_rotary_factor`` (Phi: 0.5 by default);
    Gemma 2's ``final_logit_softcapping`` and ``attn_logit_softcapping``."""
    default = _DROPOUT_DEFAULTS.get(family, 0.0)

    def number(*keys: str, fallback: float) -> float:
        return number_at(config, keys, fallback)

    facts = dropout_facts(config, default)
    if family == "phi":
        facts["partial_rotary_factor"] = number("partial_rotary_factor", fallback=0.5)
    final, attn = _SOFTCAP_DEFAULTS.get(family, (None, None))
    # An explicit null turns the default off, as the configuration class reads it.
    final = config.get("final_logit_softcapping", final)
    return facts | softcap_facts(final, config.get("attn_logit_softcapping", attn))
