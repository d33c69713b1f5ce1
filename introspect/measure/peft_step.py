"""A real LoRA / QLoRA training step: Hugging Face's ``LlamaForCausalLM`` wrapped by
peft's ``get_peft_model``, measured like every other torch step
(:func:`introspect.measure.torch_step.measure_step`).

QLoRA's base is built as transformers' bitsandbytes integration builds it for
``BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4")``: each block linear
becomes a ``bitsandbytes.nn.Linear4bit`` whose ``Params4bit`` weight is quantized when it
is moved to its device; the output head and the embeddings stay as they are. The quant
state (absmax, codes) lives in plain tensors that are neither parameters nor buffers, so
the tracker does not see them: :func:`quant_state_bytes` counts them and the
measurement's ``other`` carries them.

The same code builds the dry run's model: :func:`wrap` called inside FakeTensorMode on a
model built there (``hf_models.measure`` with ``device="fake"``) runs peft and
bitsandbytes over fake storage, equal to the real CPU step to the byte
(``tests/test_fake_peft.py``). bitsandbytes 0.50.2's ``MatMul4Bit.forward``
(``bitsandbytes/autograd/_functions.py``) saves ``ctx.tensors = (None, B)``: the packed
weight, a parameter, and not its input, so a QLoRA step saves what the same LoRA step
over a 16-bit base saves (its census is the LoRA step's, byte for byte).
"""

from __future__ import annotations

from torch import nn

from introspect.errors import IntrospectError
from introspect.measure.record import Measurement
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec


def lora_config(spec: ModelSpec, setup: TrainingSetup, fan_in_fan_out: bool = False, model=None):
    """peft's LoraConfig for ``setup`` (the refined estimate's targets, rank, dropout;
    trainable embeddings as ``modules_to_save``; ``--num-layers K`` as
    ``layers_to_transform`` = the top K block indices, which peft matches against the
    first number in each module's name, ``peft/tuners/tuners_utils.py``
    ``check_target_module_exists``); ``fan_in_fan_out`` for a model whose linears are
    transformers' ``Conv1D`` (GPT-2: weights stored d_in × d_out). peft refuses
    ``layers_to_transform`` beside ``target_modules="all-linear"`` (``LoraConfig.__post_init__``:
    a str), so under ``--num-layers`` all-linear is the names of ``model``'s own
    linears, as a user writes them (:func:`block_linear_names`)."""
    from peft import LoraConfig

    from introspect.refined.lora import adapted_layers, head_targets, targets

    chosen = targets(spec, setup)  # checks the names and the rank
    heads = list(head_targets(setup))  # lm_head / embed_tokens, never in all-linear
    L = spec.num_hidden_layers
    top = None if setup.num_layers is None else list(range(L - adapted_layers(spec, setup), L))
    if "all-linear" in setup.lora_targets and not heads:
        # peft's own "all-linear" (every nn.Linear/Conv1D but the output head), as users
        # write it: the model's names, whatever its family calls them.
        wanted = "all-linear" if top is None or model is None else block_linear_names(model)
    else:
        wanted = list(chosen) + heads
    return LoraConfig(
        layers_to_transform=top,
        r=setup.lora_rank,
        lora_alpha=2 * setup.lora_rank,
        target_modules=wanted,
        lora_dropout=setup.lora_dropout,
        fan_in_fan_out=fan_in_fan_out,
        modules_to_save=["embed_tokens", "lm_head"] if setup.train_embeddings else None,
        # LoRA on the language model only, as users adapt a vision-language wrapper: the
        # tower's and projector's linears are left out of all-linear.
        exclude_modules=TOWER_MODULES if spec.tower_parameters else None,
    )


#: peft ``exclude_modules`` (a regex matched against each module's full name): a
#: wrapper's vision tower and projector (Qwen's ``visual``, Llava's and Mistral 3's
#: ``vision_tower`` and ``multi_modal_projector``, Gemma 3's too).
TOWER_MODULES = r"(.*\.)?(visual|vision_tower|vision_model|multi_modal_projector)(\..*)?"


def block_linear_names(model: nn.Module) -> list[str]:
    """The last name of every ``nn.Linear``/``Conv1D`` (and bitsandbytes' 4-bit linear)
    but the output head: the module names peft's all-linear would adapt
    (``peft/tuners/tuners_utils.py`` ``_maybe_include_all_linear_layers``), as a list of
    suffixes ``layers_to_transform`` can filter."""
    head = model.get_output_embeddings()
    names = []
    for name, module in model.named_modules():
        linear = isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D"
        if linear and module is not head and name.rsplit(".", 1)[-1] not in names:
            names.append(name.rsplit(".", 1)[-1])
    return names


def quantize_blocks_nf4(model: nn.Module, setup: TrainingSetup, dtype) -> None:
    """Replace every linear but the output head with an NF4 ``Linear4bit`` holding the
    same weight, quantized (on CPU) as transformers' loader quantizes it
    (``transformers/integrations/bitsandbytes.py``: ``Params4bit(value, requires_grad=False,
    ...).to(value.device)``, bitsandbytes' ``Params4bit._quantize``): the modules
    transformers' ``replace_with_bnb_linear`` converts (``type(module) is nn.Linear``
    and ``Conv1D``, whose d_in × d_out weight is transposed; an MoE class's expert
    parameters are not linears and stay as they are).

    Inside FakeTensorMode (a dry run, within :func:`introspect.measure.fake.module_surgery`)
    the same code runs over fake storage: bitsandbytes registers fake kernels for its
    ops (``bitsandbytes/_ops.py``: ``quantize_4bit``, ``quantize_blockwise``,
    ``gemm_4bit``, ``dequantize_4bit``). Its 256-value dynamic map, which double
    quantization reads and ``create_dynamic_map`` builds with ``.tolist()`` (values a
    fake tensor has not), is first made on the CPU, as bitsandbytes' first real call makes
    it (``bitsandbytes/functional.py`` ``quantize_blockwise``: ``name2qmap["dynamic"]``)."""
    import bitsandbytes as bnb

    if setup.double_quant and "dynamic" not in bnb.functional.name2qmap:
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily():
            bnb.functional.name2qmap["dynamic"] = bnb.functional.create_dynamic_map()

    head = model.get_output_embeddings()
    for parent in list(model.modules()):
        for name, old in list(parent.named_children()):
            conv1d = type(old).__name__ == "Conv1D"
            if old is head or not (type(old) is nn.Linear or conv1d):
                continue
            weight = old.weight.data.t().contiguous() if conv1d else old.weight.data
            d_out, d_in = weight.shape
            new = bnb.nn.Linear4bit(
                d_in,
                d_out,
                bias=old.bias is not None,
                compute_dtype=dtype,
                compress_statistics=setup.double_quant,
                quant_type="nf4",
            )
            # transformers' loader: Params4bit(value, ...).to(value.device) quantizes it.
            new.weight = bnb.nn.Params4bit(
                weight,
                requires_grad=False,
                compress_statistics=setup.double_quant,
                quant_type="nf4",
                module=new,
            ).to(weight.device)
            if old.bias is not None:
                new.bias = old.bias
            setattr(parent, name, new)


def quant_state_bytes(model: nn.Module) -> int:
    """Bytes of every 4-bit weight's quant state (absmax, codes, offset, second level)."""
    seen: dict[tuple[int, int], int] = {}
    for p in model.parameters():
        state = getattr(p, "quant_state", None)
        if state is None:
            continue
        tensors = [state.absmax, state.code]
        if state.nested:
            tensors += [state.offset, state.state2.absmax, state.state2.code]
        for t in tensors:
            # A tensor shared by several weights counts once; keyed by its storage and
            # offset (a fake tensor has no data pointer).
            seen[(t.untyped_storage()._cdata, t.storage_offset())] = t.numel() * t.element_size()
    return sum(seen.values())


def build(spec: ModelSpec, setup: TrainingSetup) -> nn.Module:
    """transformers' Llama for ``spec`` wrapped for ``setup`` (finetune lora or qlora)."""
    from introspect.measure.implementations import transformers_llama
    from introspect.measure.torch_step import check_setup

    dtype = check_setup(setup)
    return wrap(transformers_llama(spec, setup.attention, dtype), spec, setup, dtype)


def wrap(model: nn.Module, spec: ModelSpec, setup: TrainingSetup, dtype) -> nn.Module:
    """``get_peft_model(model, lora_config(spec, setup))`` in train mode, the block
    linears first quantized to NF4 under QLoRA (see the module docstring).

    Works on a real model and, called inside FakeTensorMode on a model built there, on a
    fake one (a dry run): peft's and bitsandbytes' own code either way, the steps of it
    that torch refuses on fake parameters (moving, copying, subclassing one) made to do
    what they do for real by :func:`introspect.measure.fake.module_surgery` (a no-op
    outside FakeTensorMode)."""
    from introspect.measure.fake import module_surgery

    with module_surgery():
        return _wrap(model, spec, setup, dtype)


def _wrap(model: nn.Module, spec: ModelSpec, setup: TrainingSetup, dtype) -> nn.Module:
    import logging
    import warnings

    # peft imports bitsandbytes where installed, whose CPU backend logs a warning when an
    # optional kernels package is missing: not the user's concern for a measured step.
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
    try:
        from peft import get_peft_model
    except ImportError as err:
        raise IntrospectError("LoRA steps need peft: pip install peft") from err
    if setup.resolved_base_quant == "nf4":
        try:
            quantize_blocks_nf4(model, setup, dtype)
        except ImportError as err:
            raise IntrospectError("QLoRA steps need bitsandbytes: pip install bitsandbytes") from (
                err
            )
    elif setup.resolved_base_quant not in ("fp32", "bf16", "fp16"):
        raise IntrospectError(f"a {setup.resolved_base_quant} base is not measured; use nf4")
    try:
        with warnings.catch_warnings():
            # peft reads transformers' deprecated ``is_gradient_checkpointing``.
            warnings.filterwarnings("ignore", "`is_gradient_checkpointing`", FutureWarning)
            # peft's own MoE conversion sets a rank and alpha pattern for gate_up_proj,
            # a parameter (not a module) name, and then warns that no module matched.
            warnings.filterwarnings("ignore", "The following (rank|alpha)_pattern keys")
            conv1d = any(type(m).__name__ == "Conv1D" for m in model.modules())
            config = lora_config(spec, setup, fan_in_fan_out=conv1d, model=model)
            # --adapter-dtype bf16: the adapters stay at the base layer's dtype.
            autocast = setup.adapter_dtype == "fp32"
            model = get_peft_model(model, config, autocast_adapter_dtype=autocast)
    except ValueError as err:  # peft: "Target modules {...} not found in the base model"
        raise IntrospectError(
            f"peft cannot put LoRA on {type(model).__name__}: {str(err).splitlines()[0]}; "
            "name the layers it has with --lora-targets"
        ) from err
    model.train()
    return model


def measure(spec: ModelSpec, setup: TrainingSetup) -> Measurement:
    """One measured LoRA/QLoRA step on CPU (after a warm-up step), the quant state that
    the tracker cannot see added to the peak as ``other``."""
    from introspect.measure.torch_step import hf_forward, measure_step

    model = build(spec, setup)
    m = measure_step(
        model,
        setup,
        vocab=spec.vocab_size,
        device="cpu",
        forward=hf_forward,
        implementation="transformers+peft",
        loop=setup.loop,
    )
    return with_quant_state(m, model)


def with_quant_state(m: Measurement, model: nn.Module) -> Measurement:
    """``m`` with the NF4 quant state the tracker cannot see added to its peak as
    ``other`` (``m`` itself without a 4-bit weight)."""
    from introspect import _record

    extra = quant_state_bytes(model)
    if not extra:
        return m
    categories = dict(m.categories)
    categories["other"] = categories.get("other", 0) + extra
    return _record.replace(
        m,
        peak_bytes=m.peak_bytes + extra,
        categories=categories,
        notes=(*m.notes, f"other = {extra:,} bytes of NF4 quant state (outside the tracker)"),
    )
