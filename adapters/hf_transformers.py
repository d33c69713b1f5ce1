"""transformers as a source of facts: its configuration classes' defaults, and the model
it builds from a config on the meta device (shapes only, no weights).

* :func:`filled` — ``AutoConfig.for_model(model_type, **config).to_dict()``: every key
  with the class default applied and what ``__post_init__`` derives (``layer_types``…).
* :func:`spec_from_build` — a model_type no family reader covers: the causal-LM class
  built under ``with torch.device("meta")`` and read by the module walker; its count is
  exact. Blocks with a part no layer kind models are named, not guessed (``unmodelled``).
* :func:`class_refusal` — a setup the class itself refuses (no SDPA path, no
  gradient checkpointing).

Imports of transformers and torch stay inside these functions.
"""

from __future__ import annotations

import importlib.util
import sys
from functools import cache

from introspect._record import replace
from introspect.errors import ConfigError, IntrospectError, UnsupportedArchitecture
from introspect.layers import runs_from_list
from introspect.spec import ModelSpec

from .softcap import softcap_facts

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
    """The transformers configuration object for ``config``, its JSON special floats
    (``{"__float__": "Infinity"}``, as ``save_pretrained`` writes Falcon-H1's and
    Nemotron-H's ``time_step_limit``) decoded by transformers' own reader
    (``PretrainedConfig._decode_special_floats``, configuration_utils.py)."""
    import warnings

    from transformers import AutoConfig, PretrainedConfig

    _quiet()
    decoded = PretrainedConfig._decode_special_floats(config)
    keys = {k: v for k, v in decoded.items() if k != "model_type"}
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
            "reading this model_type needs torch (to build it on the meta device): "
            "pip install 'introspect[torch,compare]', or point at a checkpoint folder with "
            "safetensors"
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
        raise ConfigError(
            f"{where}: transformers cannot build model_type {model_type!r} from it "
            f"({_first_line(e)})"
        ) from e


def _first_line(error: BaseException) -> str:
    """The error's first line, with the line after it when it only introduces it
    (huggingface_hub's strict dataclasses: "Class validation error for validator
    'validate_architecture':" above the ValueError that names the keys)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    if lines[0].endswith(":") and len(lines) > 1:
        return f"{lines[0]} {lines[1]}"
    return lines[0]


def unique_parameters(model) -> int:
    """Parameters of a torch module, a tied weight once."""
    return sum(p.numel() for p in model.parameters())


def spec_from_build(
    config: dict[str, Any], model_type: str, *, where: str, source: str
) -> ModelSpec:
    """The spec of a model_type only transformers knows: its meta-device build read by
    the module walker (exact count).

    A build whose blocks hold a part no layer kind models
    (:func:`~introspect.adapters.module_walk.unmodelled_parts`: a Mamba mixer, an RG-LRU,
    an attention with unknown projections …), or whose blocks the walker cannot read,
    is never given another stack's structure: the spec says what is not modelled
    (``ModelSpec.unmodelled``) and carries only what the build states (d, L, V, tying,
    the exact count), its per-layer fields placeholders no estimator reads
    (:mod:`introspect.unmodelled`). An encoder (every attention ``is_causal`` False:
    BERT built as ``BertLMHeadModel``) is refused: the tool covers decoder-only causal LMs.
    """
    from .module_walk import describe_tree, unmodelled_parts
    from .state_space_sizes import check as check_state_space_sizes
    from .torch_module import torch_tree

    refuse_not_causal(model_type, where)
    check_state_space_sizes(config, where)
    model = build_on_meta(config, model_type, where)
    refuse_encoder(model, model_type, where)
    built = f"read from transformers' {type(model).__name__} built on the meta device"
    exact = unique_parameters(model)
    tree, keep = _language_tree(model, torch_tree(model))
    parts = unmodelled_parts(tree)
    from .families import NOT_MODELLED

    if model_type in NOT_MODELLED and not parts:  # a structure no block shows (HRM's cycles)
        parts = (NOT_MODELLED[model_type],)
    spec = None
    if not parts:
        try:
            spec = describe_tree(tree, name=source).spec
        except (IntrospectError, ValueError) as e:
            parts = (f"{type(model).__name__}'s blocks, which the module walker cannot read ({e})",)
    if not parts:
        from .dropout import dropout_facts

        # The class's own probabilities (its defaults applied): its dropouts run in
        # the training step, so the execution layer keeps their masks.
        spec = spec.replace(
            **dropout_facts(model.config.to_dict()), **_class_facts(model), **_buffers(model)
        )
        spec = _clamped_glu(spec, model)
        spec = sliding_windows(spec, model)
        spec = _composite_tower(spec, model, exact, keep)
    if parts:
        why = NOT_MODELLED.get(model_type)
        parts = (why, *parts) if why and why not in parts else parts
        spec = frame_spec(model, tree, parts, exact=exact, source=source)
    return spec.replace(
        model_type=model_type,
        source=source,
        num_parameters=exact,
        assumptions=(built, *spec.assumptions),
    )


def sliding_windows(spec: ModelSpec, model) -> ModelSpec:
    """The walked stack with its sliding-window layers marked, as the class's forward picks
    each layer's mask: ``causal_mask_mapping[self.config.layer_types[i]]``, the
    ``"sliding_attention"`` entry built by ``create_sliding_window_causal_mask`` with the
    config's ``sliding_window`` (ModernBERT-decoder, ``models/modernbert_decoder/
    modeling_modernbert_decoder.py`` l. 481-494; EXAONE 4, AFMoE, Flint, Granite-SWA the
    same). The module walker reads parameters, which a window does not have; unmarked,
    such layers read as full attention and SDPA's explicit mask for them
    (``hf_saved.short_window``) is missed. An attention module's own ``sliding_window``
    attribute is not the rule: EXAONE 4 sets it on every layer and keeps ``is_sliding``
    apart (``models/exaone4/modeling_exaone4.py`` l. 199-202). Unchanged when the config
    lists no sliding layer or its ``layer_types`` does not match the L blocks."""
    from .module_walk import _positive_int

    cfg = model.config
    get = getattr(cfg, "get_text_config", None)
    cfg = get() if callable(get) else cfg
    types = getattr(cfg, "layer_types", None)
    window = getattr(cfg, "sliding_window", None)
    L = spec.num_hidden_layers
    if (
        not isinstance(types, (list, tuple))
        or len(types) != L
        or "sliding_attention" not in types
        or not _positive_int(window)
    ):
        return spec
    kinds = [run.kind for run in spec.runs for _ in range(run.count)]
    marked = [
        replace(k, attention=replace(k.attention, kind="sliding", window=window))
        if t == "sliding_attention" and k.attention.kind == "full"
        else k
        for k, t in zip(kinds, types, strict=True)
    ]
    return spec.replace(layers=runs_from_list(marked))


def _buffers(model) -> dict[str, int]:
    """The built model's buffers, each storage once (a buffer shared by the blocks is one
    tensor): boolean and integer ones in bytes (GPT-Neo's and GPT-BigCode's causal-mask
    ``bias``, OpenAI GPT's ``position_ids``), floating ones in elements (OpenAI GPT's
    FP32 ``bias`` mask, rotary ``inv_freq`` tables), whose dtype the step's build decides
    (:func:`introspect.refined.buffers.buffer_terms`)."""
    fixed = floating = 0
    for buf in model.buffers():  # torch yields a shared buffer once (remove_duplicate)
        if buf.is_floating_point():
            floating += buf.numel()
        else:
            fixed += buf.numel() * buf.element_size()
    return {"buffer_bytes": fixed, "float_buffer_elements": floating}


def _class_facts(model) -> dict[str, Any]:
    """Execution facts of the built class its config decides: Falcon's original block
    (``new_decoder_architecture`` False) hands SDPA K and V at ``num_kv_heads`` — one
    head under ``multi_query`` — without ``enable_gqa`` (``models/falcon/
    modeling_falcon.py`` l. 313-346); the new one broadcasts them to every head first
    (``_split_heads``, l. 255-263). A ``final_logit_softcapping`` the config sets (Beam:
    ``tanh(logits / cap) * cap`` in ``BeamForCausalLM.forward``, whose tanh keeps its
    output) is read as the family readers read it (``hf_config.execution_facts``), and so
    is an ``attn_logit_softcapping`` the attention modules hand eager attention
    (VaultGemma: ``softcap=self.attn_logit_softcapping``, ``models/vaultgemma/
    modeling_vaultgemma.py`` l. 188, 226; ``eager_attention_forward``'s tanh keeps a
    T×T output, l. 146-149)."""
    cfg = model.config
    if cfg.model_type == "falcon":
        return {"sdpa_kv_heads_broadcast": not cfg.new_decoder_architecture}
    attn = next(
        (m.attn_logit_softcapping for m in model.modules() if hasattr(m, "attn_logit_softcapping")),
        None,
    )
    return softcap_facts(getattr(cfg, "final_logit_softcapping", None), attn)


def _language_tree(model, tree):
    """The tree the module walker reads and the kept prefixes: for a causal-LM class that
    wraps a language model beside an encoder tower (a submodule named ``language_model``:
    MOSS-Transcribe-Diarize's ``model.language_model`` beside ``model.audio_tower`` and
    ``model.multi_modal_projector``), the language model and head only, as
    :func:`~introspect.adapters.multimodal.spec_from_wrapper` reads an image-text
    wrapper — the whole tree would read the audio tower's ``embed_positions`` as a
    learned position table; else the whole tree and ``None``."""
    from .composite import kept_prefixes
    from .module_walk import ModuleTree

    if not any(n.rpartition(".")[2] == "language_model" for n in tree.modules):
        return tree, None
    keep = kept_prefixes(model)

    def kept(name: str) -> bool:
        return any(name == k or name.startswith(k + ".") for k in keep)

    def ancestor(name: str) -> bool:
        return any(k == name or k.startswith(name + ".") for k in keep) or name == ""

    text = ModuleTree(
        tree.framework,
        tuple(p for p in tree.params if kept(p.name)),
        {n: m for n, m in tree.modules.items() if kept(n) or ancestor(n)},
    )
    return text, keep


def _composite_tower(spec: ModelSpec, model, exact: int, keep: list[str] | None) -> ModelSpec:
    """``spec`` with ``tower_parameters``: every parameter outside the language model and
    head of a composite class (:func:`_language_tree`). MOSS-Transcribe-Diarize's audio
    tower and projector run only when ``input_features`` are given
    (``MossTranscribeDiarizeModel.forward``, ``models/moss_transcribe_diarize/
    modeling_moss_transcribe_diarize.py`` l. 485-498), so a text-only step gives them no
    gradient (:func:`introspect.refined.execution._with_grads`). The tower's parameters
    its class freezes (``audio_tower.embed_positions.requires_grad_(False)``, l. 287)
    are ``tower_frozen_parameters``: no optimizer state either."""
    if keep is None:
        return spec
    from .composite import describe_tower

    names = {id(m): n for n, m in model.named_modules()}
    text, frozen = 0, 0
    for name, p in model.named_parameters():  # a tied weight once
        if any(name == k or name.startswith(k + ".") for k in keep):
            text += p.numel()
        elif not p.requires_grad:
            frozen += p.numel()
    tower = exact - text
    if tower <= 0:
        return spec
    return spec.replace(
        tower_parameters=tower,
        tower_frozen_parameters=frozen,
        tower=describe_tower(model, names, keep),
    )


def _clamped_glu(spec: ModelSpec, model) -> ModelSpec:
    """``spec`` with every feed-forward's ``clamped_glu`` set when the build's MLPs clamp
    their SwiGLU as gpt-oss's experts do: a module holding ``swiglu_limit`` and
    ``swiglu_alpha`` (MiniMax-M3's ``MiniMaxM3VLDenseMLP``, its shared experts, and
    ``MiniMaxM3VLExperts._apply_gate``: ``gate.clamp(max=limit)``, ``up.clamp(-limit,
    limit)``, ``gate * sigmoid(gate * alpha)``, ``(up + 1) * glu``, ``models/minimax_m3_vl/
    modeling_minimax_m3_vl.py`` l. 184-190, 221-227), which keeps three more tensors per
    row than a plain SwiGLU (:func:`introspect.refined.saved_feed_forward.feed_forward`)."""
    if not any(hasattr(m, "swiglu_limit") and hasattr(m, "swiglu_alpha") for m in model.modules()):
        return spec
    from introspect._record import replace
    from introspect.layers import LayerRun

    def clamped(kind):
        return replace(kind, feed_forward=replace(kind.feed_forward, clamped_glu=True))

    return spec.replace(layers=tuple(LayerRun(clamped(r.kind), r.count) for r in spec.runs))


def refuse_not_causal(model_type: str, where: str) -> None:
    """One line for a model_type with no causal-LM class in transformers (T5, an
    encoder-decoder; a bare vision or audio encoder): nothing decoder-only to build."""
    try:
        from transformers.models.auto import modeling_auto
    except ImportError:  # the build itself then says what to install
        return
    if model_type not in modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        from introspect.adapters.families import covered

        raise UnsupportedArchitecture(
            f"{where}: model_type {model_type!r} has no causal-LM class in transformers "
            f"(an encoder-decoder or an encoder), so it is not a decoder-only transformer; "
            f"{covered()}"
        )


def refuse_encoder(model, model_type: str, where: str) -> None:
    """One line for an encoder: a build whose attention modules all say ``is_causal``
    False (transformers 5 sets it per attention module; BERT's follows ``is_decoder``)."""
    flags = [
        getattr(m, "is_causal", None)
        for m in model.modules()
        if "attention" in type(m).__name__.lower()
    ]
    flags = [f for f in flags if isinstance(f, bool)]
    if flags and not any(flags):
        from introspect.adapters.families import covered

        raise UnsupportedArchitecture(
            f"{where}: model_type {model_type!r} is not a decoder-only causal LM: "
            f"{type(model).__name__}'s attention is not causal (an encoder such as BERT, "
            f"or a decoder whose mask comes from outside); {covered()}"
        )


def frame_spec(model, tree, parts: tuple[str, ...], *, exact: int, source: str) -> ModelSpec:
    """The spec of a stack the closed form does not model: d and V from the token
    embedding, L from the block list, tying from the output projection, the exact count;
    one placeholder head of width d (no attention is described) and no feed-forward
    claim, with ``unmodelled`` naming the parts."""
    from .module_walk import block_list

    embed = model.get_input_embeddings()
    shape = tuple(getattr(getattr(embed, "weight", None), "shape", ()))
    if len(shape) != 2:
        raise ConfigError(
            f"{source}: {type(model).__name__} has no token embedding table to read d and V "
            f"from, and its blocks are not modelled ({'; '.join(parts)})"
        )
    V, d = (int(n) for n in shape)
    found = block_list(tree)
    L = found[1] if found else 1
    head = model.get_output_embeddings()
    tied = head is None or getattr(head, "weight", None) is embed.weight
    return ModelSpec(
        hidden_size=d,
        num_hidden_layers=L,
        num_attention_heads=1,
        vocab_size=V,
        tie_word_embeddings=tied,
        position_embedding="none",
        num_parameters=exact,
        source=source,
        unmodelled=parts,
        assumptions=(
            "not modelled by the closed form: only d, L, V, tying and the exact count are "
            "read; the per-layer fields are placeholders",
        ),
    )


def model_class(model_type: str, *, wrapper: bool = False):
    """transformers' causal-LM class for ``model_type`` (else its image-text-to-text
    class), as ``AutoModelForCausalLM`` picks it; ``None`` when it has neither.
    ``wrapper``: the image-text class first (a vision-language wrapper built with its
    tower, :mod:`introspect.adapters.multimodal`)."""
    import transformers
    from transformers.models.auto import modeling_auto

    order = [
        modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
    ]
    for names in order[::-1] if wrapper else order:
        name = names.get(model_type)
        if isinstance(name, str):
            try:
                return getattr(transformers, name)
            except (AttributeError, ImportError):
                return None
    return None


def _hand_read_no_sdpa() -> dict[str, str]:
    """The hand-read families whose causal-LM class has ``_supports_sdpa = False``, by
    class name, from the bundled table (:func:`introspect.adapters.hf_table.causal_lm`):
    Gemma 2 ("sdpa does not support softcapping", ``modeling_gemma2.py``) and gpt-oss
    (its sinks, ``modeling_gpt_oss.py``). transformers' default for them is eager."""
    from .families import ALIASES, REGISTRY
    from .hf_table import causal_lm

    rows = {t: causal_lm(ALIASES.get(t, t)) for t in [*REGISTRY, *ALIASES]}
    return {ALIASES.get(t, t): row[0] for t, row in rows.items() if row and not row[1]}


def __getattr__(name: str):
    if name == "NO_SDPA":  # read when asked: the table is one JSON file
        return _hand_read_no_sdpa()
    raise AttributeError(name)


def default_attention(model_type: str) -> tuple[str, str]:
    """transformers' own attention for ``model_type``'s causal-LM class when the user
    names none, and the class's name: ``from_pretrained``/``from_config`` with no
    ``attn_implementation`` asks for SDPA and falls back to eager where the class has no
    SDPA path (``PreTrainedModel.get_correct_attn_implementation``,
    ``transformers/modeling_utils.py``: ``"sdpa" if requested_attention is None``, then
    ``_sdpa_can_dispatch`` raises on ``_supports_sdpa = False``). From the bundled table
    (:func:`introspect.adapters.hf_table.causal_lm`; a model_type newer than the table
    asks the installed class when transformers is already imported); a model_type neither
    has (a shape, a nominal size) runs the Llama class its config is written as
    (``introspect.measure.hf_models.source_config``). Returns ``("memory_efficient" |
    "eager", class name)``."""
    from .families import ALIASES
    from .hf_table import causal_lm

    row = causal_lm(ALIASES.get(model_type, model_type)) or causal_lm(model_type)
    if row is None and "transformers" in sys.modules and knows(model_type):
        # newer than the table, and already imported to read the model (its meta build):
        # a closed-form command imports nothing for a shape or a nominal size
        try:
            cls = model_class(model_type)
        except ImportError:  # transformers without torch
            cls = None
        if cls is not None:
            row = (cls.__name__, bool(getattr(cls, "_supports_sdpa", False)))
    if row is None:
        row = causal_lm("llama")
    name, sdpa = row
    return ("memory_efficient" if sdpa else "eager"), name


def _no_sdpa(class_name: str) -> str:
    return (
        f"transformers' {class_name} has no SDPA path (_supports_sdpa is False), so "
        "the step refuses --attention memory-efficient; use --attention eager"
    )


def class_refusal(model_type: str, setup) -> str | None:
    """Why transformers' own class refuses ``setup``, or ``None``: SDPA (``--attention
    memory-efficient``) on a class whose ``_supports_sdpa`` is False (Bloom:
    ``PreTrainedModel._sdpa_can_dispatch`` raises), gradient checkpointing on one whose
    ``supports_gradient_checkpointing`` is False (JetMoE: ``gradient_checkpointing_enable``
    raises). Asked only when the setup runs transformers' class and needs one of them,
    so a default profile imports nothing (``transformers/modeling_utils.py``). The
    families read by hand (:data:`introspect.adapters.families.REGISTRY`) are answered from
    :data:`NO_SDPA` (the bundled table) without importing transformers, which costs seconds
    (``tests/test_unmodelled.py`` holds the table to their classes)."""
    from introspect.adapters.families import ALIASES, REGISTRY

    sdpa = setup.attention == "memory_efficient"
    checkpointing = setup.activation_checkpointing
    if setup.implementation != "transformers" or not (sdpa or checkpointing):
        return None
    if model_type in REGISTRY or model_type in ALIASES:
        name = _hand_read_no_sdpa().get(ALIASES.get(model_type, model_type))
        return _no_sdpa(name) if sdpa and name else None
    if not available() or not knows(model_type):
        return None
    try:
        cls = model_class(model_type)
    except ImportError:  # transformers without torch: the class cannot be asked
        return None
    if cls is None:
        return None
    if sdpa and not getattr(cls, "_supports_sdpa", False):
        return _no_sdpa(cls.__name__)
    if checkpointing and not getattr(cls, "supports_gradient_checkpointing", False):
        return (
            f"transformers' {cls.__name__} cannot checkpoint (supports_gradient_checkpointing "
            "is False), so the step refuses --checkpointing; drop it"
        )
    return None
