"""Hugging Face transformers' own class for any ``model_type`` it knows, built from the
model's raw ``config.json``.

    config = AutoConfig.for_model(model_type, **config_json)
    model = AutoModelForCausalLM.from_config(config, attn_implementation=..., dtype=...)

(``transformers/models/auto/configuration_auto.py`` ``for_model``;
``transformers/models/auto/auto_factory.py`` ``_BaseAutoModelClass.from_config``). A
model_type with no causal-LM class but an image-text-to-text one (Gemma 3, Llava, …) is
built through ``AutoModelForImageTextToText`` and fed text only. ``trust_remote_code`` is
never set: a config whose class lives in the model's repository (``auto_map``) is refused
with the reason. The source is the raw config — never our ModelSpec — so the class sees
every key the publisher wrote; shape flags (``--layers`` …) are set on the config object
afterwards through its ``attribute_map`` (``n_layer`` for GPT-2 and so on).

Nominal sizes and shape-flag models have no config.json; they are written as a Llama
config (:func:`introspect.measure.implementations.llama_config`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from introspect.errors import IntrospectError
from introspect.spec import ModelSpec

#: ``TrainingSetup.attention`` → transformers' ``attn_implementation``
#: (``transformers/integrations/sdpa_attention.py`` is the memory-efficient kernel).
ATTN_IMPLEMENTATION = {"eager": "eager", "memory_efficient": "sdpa"}

#: ModelSpec field names that shape flags set; they are Hugging Face config names too.
SHAPE_KEYS = (
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "vocab_size",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
)


def _transformers():
    try:
        import transformers
    except ImportError as err:
        raise IntrospectError(
            "--impl transformers needs Hugging Face transformers: pip install 'introspect[compare]'"
        ) from err
    return transformers


def source_config(source: str | None, spec: ModelSpec) -> tuple[dict[str, Any], str]:
    """The raw config dict for ``source`` and where it came from: the bundled copy, the
    config.json file, the checkpoint's config.json, the Hub cache — or, for a nominal
    size or shape flags, a Llama config written from ``spec``."""
    from introspect.measure.implementations import llama_config
    from introspect.measure.shapes import nominal_spec

    if not source or nominal_spec(source) is not None:
        return {"model_type": "llama", **llama_config(spec)}, "Llama config from the shape"
    from introspect.adapters import bundled, resolve
    from introspect.adapters.hf_config import load_config

    resolved = resolve(source)
    if resolved.origin == "bundled":
        return bundled.lookup(resolved.location).config(), resolved.location
    path = resolved.extra.get("config_path")
    if resolved.origin in ("cache", "hub"):
        from introspect.adapters.hub import fetch

        return dict(fetch(resolved.location, revision=resolved.revision).config), str(path)
    if not path:
        raise IntrospectError(
            f"{source}: no config.json beside the checkpoint; --impl transformers builds "
            "the class from a config.json (put one next to the safetensors)"
        )
    return load_config(path), str(path)


def precheck(source: str | None) -> None:
    """For a local config.json (or a folder holding one): the one-line refusal of a
    model_type transformers does not know or a remote-code class, before the estimates
    read the config (which name their own supported families)."""
    import os

    if not source or not os.path.exists(source):
        return
    path = os.path.join(source, "config.json") if os.path.isdir(source) else source
    if not path.endswith(".json") or not os.path.isfile(path):
        return
    from introspect.adapters.hf_config import load_config

    raw = load_config(path)
    if isinstance(raw.get("model_type"), str):
        model_class(raw["model_type"], raw, path)


def model_class(model_type: str, config: dict[str, Any], where: str):
    """The transformers auto class that builds ``model_type``: causal LM, else
    image-text-to-text; a remote-code or unknown model_type is one line."""
    _transformers()
    from transformers.models.auto import modeling_auto
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    if model_type not in CONFIG_MAPPING_NAMES:
        if "auto_map" in config:
            raise IntrospectError(
                f"{where}: model_type {model_type!r} is defined by code in the model's own "
                "repository (auto_map); introspect never runs remote code "
                "(trust_remote_code), so this class cannot be measured"
            )
        raise IntrospectError(
            f"{where}: transformers {_version()} does not know model_type {model_type!r}; "
            "upgrade transformers or use --impl reference"
        )
    from introspect.adapters.multimodal import is_wrapper

    # A config with a vision_config (Qwen3.5, Llama 4) is its wrapper, tower included, as
    # it is counted (the hand-read Llama 4 reader counts the tower too); without one, the
    # text-only causal-LM class.
    wrapper = is_wrapper(config, model_type)
    if model_type in modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and not wrapper:
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM
    if model_type in modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:
        from transformers import AutoModelForImageTextToText

        return AutoModelForImageTextToText
    raise IntrospectError(
        f"{where}: model_type {model_type!r} has no causal-LM class in transformers "
        f"{_version()}; only text-generating models are measured"
    )


def _version() -> str:
    return _transformers().__version__


def build_config(raw: dict[str, Any], where: str, overrides: dict[str, Any] | None = None):
    """``AutoConfig.for_model(model_type, **raw)`` with ``overrides`` (shape flags) set on
    the text config; a config the class rejects is one line."""
    raw = dict(raw)
    model_type = raw.pop("model_type", None)
    if not isinstance(model_type, str):
        raise IntrospectError(f"{where}: no model_type; --impl transformers needs one")
    model_class(model_type, raw, where)
    raw.pop("auto_map", None)
    from introspect.adapters.hf_transformers import hf_config

    try:
        config = hf_config(raw, model_type)
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        for key, value in (overrides or {}).items():
            setattr(text, key, value)
    except (ValueError, TypeError, KeyError, AttributeError) as err:
        raise IntrospectError(
            f"{where}: transformers' {model_type} config rejects it: {_first_line(err)}"
        ) from err
    return config


def build(
    raw: dict[str, Any],
    where: str,
    *,
    attention: str | None,
    dtype,
    checkpointing: bool = False,
    overrides: dict[str, Any] | None = None,
):
    """The transformers class for ``raw`` with random weights in ``dtype``, in train mode
    (dropout as the config sets it), with ``attn_implementation`` eager or sdpa and, when
    asked, ``gradient_checkpointing_enable()`` (non-reentrant, transformers' default in
    ``modeling_utils.py``). Call it inside FakeTensorMode for a dry run."""
    import torch
    from transformers.utils import logging

    logging.set_verbosity_error()  # "use_cache=True is incompatible with checkpointing" …
    config = build_config(raw, where, overrides)
    cls = model_class(config.model_type, raw, where)
    if hasattr(config.get_text_config(), "use_cache"):
        config.get_text_config().use_cache = False  # training keeps no KV cache
    from introspect.measure.fake import class_init

    torch.manual_seed(0)
    try:
        with class_init():  # a no-op outside FakeTensorMode
            model = cls.from_config(
                config,
                # None: the class's own default (SDPA where it has one), as from_config does
                attn_implementation=ATTN_IMPLEMENTATION.get(attention),
                dtype=dtype,
            )
    # AssertionError: torch's own checks while building (an nn.Embedding's padding_idx
    # beyond vocab_size).
    except (ValueError, TypeError, KeyError, RuntimeError, AttributeError, AssertionError) as err:
        raise IntrospectError(
            f"{where}: transformers' {type(config).__name__} class rejects this config: "
            f"{_first_line(err)}"
        ) from err
    model.train()
    if checkpointing:
        enable = getattr(model, "activation_checkpointing_enable", None)
        try:
            (enable or model.gradient_checkpointing_enable)()
        except ValueError as err:
            raise IntrospectError(f"--checkpointing: {_first_line(err)}") from err
    return model


@contextmanager
def unpacked_rows(device: str) -> Iterator[None]:
    """In a dry run, tell transformers' masks what the real step finds: one sequence per
    row. ``masking_utils.find_packed_sequence_indices`` reads the position ids to see
    whether several sequences are packed in a row; it cannot read a fake tensor
    (``is_tracing`` counts fake tensors as tracing), so it returns the packing unread and
    the model builds a B×T×T mask that the real step skips (its SDPA runs
    ``is_causal=True`` without a mask). The step never passes position ids, so they are
    the model's own ``arange`` per row, which is never packed: ``None``, the real answer."""
    if device != "fake":
        yield
        return
    from transformers import masking_utils

    original = masking_utils.find_packed_sequence_indices
    masking_utils.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        masking_utils.find_packed_sequence_indices = original


def experts_implementation(model) -> str | None:
    """The experts kernel transformers picked for a mixture-of-experts model
    (``grouped_mm`` by default, ``modeling_utils.get_correct_experts_implementation``)."""
    return getattr(model.config, "_experts_implementation", None) if _has_experts(model) else None


def _has_experts(model) -> bool:
    return any(type(m).__name__.endswith("Experts") for m in model.modules())


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def measure(
    raw: dict[str, Any],
    where: str,
    spec: ModelSpec,
    setup,
    *,
    device: str,
    census: bool = True,
    overrides: dict[str, Any] | None = None,
):
    """Build the transformers class for ``raw`` (inside FakeTensorMode for ``fake``) and
    measure one step of the setup's loop, precision and optimizer; the census (when
    asked) is taken on the same model. Returns the Measurement (census included)."""
    import contextlib

    from introspect import _record
    from introspect.measure import torch_step
    from introspect.measure.fake import GROUPED_MM_NOTE, fake_mode
    from introspect.refined.implementations import resolve_attention

    setup = resolve_attention(spec, setup)  # --attention left out: the class's own
    dtype = torch_step.check_setup(setup)
    lora = setup.finetune != "full"
    if lora and setup.resolved_base_quant == "nf4" and device == "cuda":
        raise IntrospectError(
            "--finetune qlora: the NF4 base is quantized by bitsandbytes on CPU and "
            "measured there; use --device cpu, or --device fake for a dry run (not cuda)"
        )
    if device == "fake":
        from introspect.errors import DryRunCannot
        from introspect.measure.fake import cannot

        why = cannot(raw.get("model_type"))
        if why:
            raise DryRunCannot(f"{where}: {why}")
    vocab = spec.vocab_size
    images = bool(setup.images)
    if images:
        from introspect.measure import vision_batch
    with (
        fake_mode() if device == "fake" else contextlib.nullcontext(),
        unpacked_rows(device),
        vision_batch.constant_inputs(device) if images else contextlib.nullcontext(),
    ):
        model = build(
            raw,
            where,
            attention=setup.attention,
            dtype=dtype,
            checkpointing=setup.activation_checkpointing,
            overrides=overrides,
        )
        built = type(model).__name__
        if setup.freeze_tower:
            from introspect.measure import vision_batch

            vision_batch.freeze_tower(model)
        inputs = None
        if images:
            vocab = model.config.get_text_config().vocab_size
            *inputs, extra = vision_batch.make_batch(model, spec, setup, vocab, device)
            inputs = tuple(inputs)
        if lora:
            from introspect.measure import peft_step

            model = peft_step.wrap(model, spec, setup, dtype)
        if images:
            model = vision_batch.with_images(model, extra)
        if device == "cuda":
            model = model.to("cuda")
        vocab = model.config.get_text_config().vocab_size
        from introspect.measure.fake import answered_reads

        try:
            with answered_reads(model):  # a no-op but for JetMoE and XLM in a dry run
                m = torch_step.measure_step(
                    model,
                    setup,
                    vocab=vocab,
                    device=device,
                    forward=torch_step.hf_forward,
                    implementation="transformers+peft" if lora else "transformers",
                    loop=setup.loop,
                    inputs=inputs,
                )
        except AttributeError as err:
            if not lora:
                raise
            # peft wraps every nn.Linear subclass, also one whose forward returns a
            # tuple (Llama 4's router): its LoRA forward then fails.
            raise IntrospectError(
                f"{where}: peft's LoRA on transformers' {built} fails in the forward "
                f"({_first_line(err)}); name the layers to adapt with --lora-targets "
                "(e.g. q_proj k_proj v_proj o_proj)"
            ) from err
        saved = None
        if census:
            with answered_reads(model):
                saved = torch_step.run_census(
                    model,
                    setup,
                    spec,
                    device,
                    torch_step.hf_forward,
                    loop=setup.loop,
                    inputs=inputs,
                )
    notes = [f"transformers {built} from {where}"]
    if images:
        from introspect.vision import describe

        notes.append("images: " + describe(spec, setup))
        notes.append(
            "image-and-text batch: ids with the image tokens, pixel_values and image_grid_thw "
            "as the processor shapes them, M-RoPE position_ids from the model's get_rope_index"
            + (
                "; dry run: ids, grid and positions as value-keeping fake tensors "
                "(introspect.measure.vision_batch)"
                if device == "fake"
                else ""
            )
        )
    if setup.freeze_tower:
        notes.append("--freeze-tower: every weight outside the language model and head frozen")
    experts = experts_implementation(model)
    if experts is not None:
        notes.append(f"MoE experts implementation: {experts}")
        if device == "fake" and experts == "grouped_mm":
            notes.append(GROUPED_MM_NOTE)
    if device == "fake":
        from introspect.measure.fake import answered_notes

        notes += answered_notes(model)
    if device == "fake":
        notes.append(
            "dry run: FakeTensorMode, no memory allocated; transformers' packed-sequence "
            "check answered as the real step does (one sequence per row)"
        )
    if lora:
        from introspect.measure import peft_step
        from introspect.refined.lora import targets

        top = ""
        if setup.num_layers is not None:
            L = spec.num_hidden_layers
            top = f" of blocks {L - setup.num_layers}..{L - 1} (layers_to_transform: the top "
            top += f"{setup.num_layers} of {L})"
        notes.append(f"peft LoRA r={setup.lora_rank} on {', '.join(targets(spec, setup))}{top}")
        if device == "fake":
            quant = setup.resolved_base_quant == "nf4"
            notes.append(
                "dry run: peft's get_peft_model"
                + (" and bitsandbytes' Linear4bit/Params4bit/MatMul4Bit" if quant else "")
                + " run as they are over fake tensors (introspect.measure.fake.module_surgery)"
            )
        m = peft_step.with_quant_state(m, model)
    m = _record.replace(
        m, census=saved.terms if saved is not None else {}, notes=(*notes, *m.notes)
    )
    return m, saved
