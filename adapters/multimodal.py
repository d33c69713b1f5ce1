"""Vision-language wrappers transformers builds through its image-text auto class: the
language model read as any causal LM, the vision tower and projector counted apart.

``AutoModelForImageTextToText`` (``transformers/models/auto/modeling_auto.py``,
``MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES``) builds the wrapper from its config on the
meta device (no weights). The wrapper holds a language model (``model.language_model``
in transformers 5: Qwen2.5-VL, Qwen3-VL, Qwen3-VL-MoE, Qwen3.5, Mistral 3, Llava …), the
``lm_head`` beside it, and the rest — the vision tower (``model.visual``,
``model.vision_tower``) and the projector (``model.multi_modal_projector``; Qwen's merger
sits inside ``visual``). The module walker reads the language model and the head as it
reads a causal LM (:func:`~introspect.adapters.hf_transformers.spec_from_build`'s rules:
parts no layer kind models are named, not guessed); the tower is every other parameter,
``ModelSpec.tower_parameters``; N is the wrapper's exact count.

A config whose model_type has a text-only causal-LM class as well (Qwen3.5's
``Qwen3_5ForCausalLM``, which drops the tower) is built as the wrapper when it carries a
``vision_config``, so the published total counts the tower. Where the walker cannot
model the language model's blocks but a family reader models its ``text_config``'s type
(Qwen3.5's Gated DeltaNet layers: ``qwen3_5_text``, ``qwen3_5_moe_text``), the reader's
spec is the language model, held to the build's count of it.

The language model's keys may sit in ``text_config`` (Qwen3-VL, Mistral 3) or at the top
level (the flat layout of Qwen2-VL and Qwen2.5-VL, whose configuration class builds its
``text_config`` from them, ``configuration_qwen2_5_vl.py``). A wrapper with neither is
refused: the class would build its default language model, not the one meant.
"""

from __future__ import annotations

from introspect.errors import ConfigError, IntrospectError, UnsupportedArchitecture
from introspect.spec import ModelSpec

from .composite import describe_tower, kept_prefixes

TYPE_CHECKING = False  # typing's flag without importing typing (see introspect._record)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

#: Keys a flat wrapper config gives its language model at the top level.
FLAT_TEXT_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads")


def is_wrapper(config: dict[str, Any], model_type: str) -> bool:
    """Whether transformers builds ``model_type`` through its image-text auto class: it
    has no causal-LM class, its causal-LM class is that class too (GOT-OCR2, Fuyu), or
    its causal-LM class is text-only while the config has a ``vision_config``
    (Qwen3.5)."""
    try:
        from transformers.models.auto import modeling_auto
    except ImportError:
        return False
    if model_type not in modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:
        return False
    if model_type not in modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return True
    causal = modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]
    wrapper = modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES[model_type]
    # One class for both (GOT-OCR2, Fuyu, Gemma 4): the wrapper, its tower read apart.
    return causal == wrapper or isinstance(config.get("vision_config"), dict)


def check_layout(config: dict[str, Any], model_type: str, where: str) -> None:
    """One line for a wrapper with neither a ``text_config`` object nor the flat layout's
    language-model keys (:data:`FLAT_TEXT_KEYS`) at the top level."""
    text = config.get("text_config")
    if text is not None and not isinstance(text, dict):
        raise ConfigError(
            f"{where}: text_config must be a JSON object (the language model's config), "
            f"got {type(text).__name__}"
        )
    if isinstance(text, dict):
        return
    missing = [k for k in FLAT_TEXT_KEYS if k not in config]
    if missing:
        raise ConfigError(
            f"{where}: model_type {model_type!r} is a vision-language wrapper, but it has no "
            f"text_config and no {', '.join(missing)} at the top level (the flat layout); "
            "add the language model's config as text_config"
        )


def spec_from_wrapper(
    config: dict[str, Any],
    model_type: str,
    *,
    where: str,
    source: str,
    read_text: Callable[..., ModelSpec] | None = None,
) -> ModelSpec:
    """The spec of a vision-language wrapper: the language model and head walked from the
    meta-device build, the tower counted apart, N the wrapper's exact count.
    ``read_text`` (:func:`~introspect.adapters.hf_config.spec_from_config`, handed in by
    its caller) reads a text config a family reader models where the walker cannot
    (:func:`_text_reader_spec`)."""
    from .hf_transformers import build_on_meta, frame_spec, refuse_encoder, unique_parameters
    from .module_walk import ModuleTree, describe_tree, unmodelled_parts
    from .torch_module import torch_tree

    check_layout(config, model_type, where)
    model = build_on_meta(config, model_type, where, auto="AutoModelForImageTextToText")
    exact = unique_parameters(model)
    tree = torch_tree(model)
    names = {id(m): n for n, m in model.named_modules()}
    keep = kept_prefixes(model)
    language = model.get_submodule(keep[0])
    if _causal_class(model_type):  # GIT's text model attends both ways; PaliGemma's
        refuse_encoder(language, model_type, where)  # prefix is bidirectional by design

    def kept(name: str) -> bool:
        return any(name == k or name.startswith(k + ".") for k in keep)

    def ancestor(name: str) -> bool:
        return any(k == name or k.startswith(name + ".") for k in keep) or name == ""

    text_tree = ModuleTree(
        tree.framework,
        tuple(p for p in tree.params if kept(p.name)),
        {n: m for n, m in tree.modules.items() if kept(n) or ancestor(n)},
    )
    seen: set = set()
    text_params = 0
    for p in text_tree.params:
        if p.tie_key not in seen:
            seen.add(p.tie_key)
            text_params += p.numel
    tower = exact - text_params
    built = f"read from transformers' {type(model).__name__} built on the meta device"
    parts = unmodelled_parts(text_tree)
    if parts:
        # The text model's own reason first (its model_type's NOT_MODELLED line, as
        # spec_from_build puts it: Dots3-Note's MLA variant)
        from .families import NOT_MODELLED

        text_type = getattr(model.config.get_text_config(), "model_type", None)
        why = NOT_MODELLED.get(text_type) if text_type != model_type else None
        parts = (why, *parts) if why and why not in parts else parts
    spec = None
    if not parts:
        try:
            spec = describe_tree(text_tree, name=source).spec
        except (IntrospectError, ValueError) as e:
            cls = type(language).__name__
            parts = (f"{cls}'s blocks, which the module walker cannot read ({e})",)
        else:
            from .hf_transformers import sliding_windows  # imports this module

            spec = sliding_windows(spec, model)
    if parts and read_text is not None:
        spec = _text_reader_spec(config, model, text_params, read_text, where=where, source=source)
    if parts and spec is None:
        try:
            spec = frame_spec(model, text_tree, parts, exact=exact, source=source)
        except (NotImplementedError, AttributeError, TypeError) as e:
            raise UnsupportedArchitecture(
                f"{where}: {type(model).__name__}'s language model cannot be read (no token "
                f"embedding to take d and V from: {' '.join(str(e).split())[:120]}), and its "
                f"blocks are not modelled ({'; '.join(parts)})"
            ) from e
    from introspect.vision import tower_facts

    return spec.replace(
        **explicit_mask_facts(model_type, model),
        model_type=model_type,
        source=source,
        num_parameters=exact,
        tower_parameters=tower,
        tower=describe_tower(model, names, keep),
        vision=tower_facts(model_type, config),
        assumptions=(built, *spec.assumptions),
    )


def explicit_mask_facts(model_type: str, model) -> dict[str, bool]:
    """``sdpa_mask_every_layer`` for a wrapper whose forward builds its masks with a
    blockwise overlay even for text: ``Gemma4UnifiedModel.forward`` passes
    ``block_sequence_ids`` (``torch.full(..., -1)`` without ``mm_token_type_ids``) to
    ``create_masks_for_generate`` whenever the text config's
    ``use_bidirectional_attention == "vision"`` (``models/gemma4_unified/
    modeling_gemma4_unified.py`` l. 1170-1182), and ``create_causal_mask`` /
    ``create_sliding_window_causal_mask`` then refuse the ``is_causal`` skip
    (``masking_utils.py`` l. 997-1000, 1231-1234). Gemma 4's wrapper does so only with
    ``mm_token_type_ids`` (``models/gemma4/modeling_gemma4.py`` l. 2476-2487), so a
    text step keeps the causal shortcut; the text-only class builds plain masks."""
    if model_type != "gemma4_unified":
        return {}
    text = model.config.get_text_config()
    return {"sdpa_mask_every_layer": getattr(text, "use_bidirectional_attention", None) == "vision"}


def _text_reader_spec(
    config: dict[str, Any],
    model,
    text_params: int,
    read_text: Callable[..., ModelSpec],
    *,
    where: str,
    source: str,
) -> ModelSpec | None:
    """The language model's spec from its family reader, where the walker cannot model
    its blocks but a reader does (Qwen3.5's ``qwen3_5_text`` and ``qwen3_5_moe_text``:
    the Gated DeltaNet layers, :func:`introspect.adapters.families.hybrid.qwen3_5_text`)
    — read from the config's ``text_config`` (else the build's own text config), its
    ``model_type`` the build's text config's; ``None`` without such a reader, where the
    reader refuses what the class built, or where the reader's count is not the build's
    language model and head (``text_params``), so the walker's unmodelled answer
    stands."""
    from .families import REGISTRY

    built = model.config.get_text_config()
    text_type = getattr(built, "model_type", None)
    if text_type not in REGISTRY:
        return None
    text = config.get("text_config")
    text = dict(text) if isinstance(text, dict) else built.to_dict()
    text["model_type"] = text_type
    try:
        spec = read_text(text, source=source, path=f"{where} (text_config)")
    except (IntrospectError, ValueError):  # the class built it: its dry run still answers
        return None
    if spec.unmodelled or spec.n_params != text_params:
        return None
    return spec


def _causal_class(model_type: str) -> bool:
    """Whether transformers also lists ``model_type`` as a causal LM."""
    from transformers.models.auto import modeling_auto

    return model_type in modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
