"""transformers as a source of facts: its configuration classes' defaults, and the model
it builds from a config on the meta device (shapes only, no weights).

* :func:`filled` — ``AutoConfig.for_model(model_type, **config).to_dict()``: every key
  with the class default applied and what ``__post_init__`` derives (``layer_types``…).
* :func:`spec_from_build` — a model_type no family reader covers: the causal-LM class
  built under ``with torch.device("meta")`` and read by
  :func:`introspect.adapters.torch_module.describe_torch`; its count is exact.

Imports of transformers and torch stay inside these functions.
"""

from __future__ import annotations

import importlib.util
from functools import cache

from introspect.errors import ConfigError, IntrospectError
from introspect.spec import ModelSpec

TYPE_CHECKING = False  # typing's flag without importing typing (see introspect._record)
if TYPE_CHECKING:
    from typing import Any


@cache
def available() -> bool:
    """Whether transformers can be imported (found, not imported)."""
    return importlib.util.find_spec("transformers") is not None


def _quiet():
    from transformers.utils import logging

    logging.set_verbosity_error()


@cache
def knows(model_type: str) -> bool:
    """Whether transformers has a configuration class for ``model_type``."""
    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    except ImportError:
        return False
    return model_type in CONFIG_MAPPING


def hf_config(config: dict[str, Any], model_type: str):
    """The transformers configuration object for ``config``."""
    import warnings

    from transformers import AutoConfig

    _quiet()
    keys = {k: v for k, v in config.items() if k != "model_type"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated keys in published configs
        return AutoConfig.for_model(model_type, **keys)


def filled(config: dict[str, Any], model_type: str, where: str) -> tuple[dict[str, Any], str, str]:
    """The config with transformers' class defaults applied, the class name, and why it
    is empty when the class rejects the config (the family reader's hand-written
    defaults and its own checks, which name the key, then apply)."""
    try:
        cfg = hf_config(config, model_type)
        return cfg.to_dict(), type(cfg).__name__, ""
    except Exception as e:  # noqa: BLE001 - any rejection falls back to the hand-written reader
        text = " ".join(str(e).split())[:160] or type(e).__name__
        return {}, "", f"transformers rejects this config ({text}); hand-written defaults used"


def _torch():
    try:
        import torch
    except ImportError as e:
        raise IntrospectError(
            "reading this model_type needs torch (to build it on the meta device); "
            "install torch or point at a checkpoint folder with safetensors"
        ) from e
    return torch


def build_on_meta(config: dict[str, Any], model_type: str, where: str, *, auto: str = ""):
    """The transformers model for ``config`` on the meta device (``auto`` names the
    ``AutoModelFor…`` class; default causal LM)."""
    torch = _torch()
    import transformers

    try:
        cfg = hf_config(config, model_type)
        cls = getattr(transformers, auto or "AutoModelForCausalLM")
        with torch.device("meta"):
            return cls.from_config(cfg)
    except Exception as e:  # noqa: BLE001 - transformers raises many kinds; one line
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(
            f"{where}: transformers cannot build model_type {model_type!r} from it ({first})"
        ) from e


def unique_parameters(model) -> int:
    """Parameters of a torch module, a tied weight once."""
    return sum(p.numel() for p in model.parameters())


def spec_from_build(
    config: dict[str, Any], model_type: str, *, where: str, source: str
) -> ModelSpec:
    """The spec of a model_type only transformers knows: its meta-device build read by
    ``describe_torch`` (exact count); when the modules cannot be read as one repeated
    block, the config's generic keys with the build's exact count."""
    from .torch_module import describe_torch

    model = build_on_meta(config, model_type, where)
    built = f"read from transformers' {type(model).__name__} built on the meta device"
    exact = unique_parameters(model)
    try:
        desc = describe_torch(model, name=source)
        spec = desc.spec
    except (IntrospectError, ValueError) as e:
        spec = _generic(config, model_type, where, source, exact, str(e))
    return spec.replace(
        model_type=model_type,
        source=source,
        num_parameters=exact,
        assumptions=(built, *spec.assumptions),
    )


def _generic(config, model_type, where, source, exact, why) -> ModelSpec:
    """The generic keys every transformers config has, for a stack the walker cannot
    read (``why``): sizes and heads; the count is the build's."""
    cfg = hf_config(config, model_type)
    text = getattr(cfg, "get_text_config", lambda: cfg)()

    def get(*names, default=None):
        for name in names:
            value = getattr(text, name, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return default

    try:
        return ModelSpec(
            hidden_size=get("hidden_size", "n_embd", "d_model"),
            num_hidden_layers=get("num_hidden_layers", "n_layer", "num_layers"),
            num_attention_heads=get("num_attention_heads", "n_head", "num_heads"),
            vocab_size=get("vocab_size"),
            num_key_value_heads=get("num_key_value_heads"),
            head_dim=get("head_dim"),
            intermediate_size=get("intermediate_size", "ffn_dim", "n_inner"),
            tie_word_embeddings=bool(getattr(text, "tie_word_embeddings", False)),
            num_parameters=exact,
            model_type=model_type,
            source=source,
            assumptions=(f"structure from the config's generic keys ({why})",),
        )
    except (TypeError, ValueError) as e:
        raise ConfigError(
            f"{where}: model_type {model_type!r}: the config's generic keys do not give a "
            f"decoder ({e}); a checkpoint's safetensors headers still give the exact count"
        ) from e
