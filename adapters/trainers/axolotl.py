"""axolotl's YAML (axolotl at 067b021, ``src/axolotl/utils/schemas/``): ``base_model``
(model.py:17), ``micro_batch_size`` (default 1, training.py:77), ``sequence_len``
(default 512, config.py:665), ``optimizer`` (HF ``optim`` names, default
``adamw_torch_fused``, training.py:122), ``bf16`` (default ``auto``: on where the GPU has
BF16, config.py:559; the Trainer's autocast), ``gradient_checkpointing`` (default off,
config.py:600), ``adapter: lora|qlora`` with ``lora_r``, ``lora_dropout``,
``lora_target_modules`` / ``lora_target_linear`` and ``load_in_4bit`` / ``load_in_8bit``
(peft.py), ``flash_attention`` / ``sdp_attention`` / ``attn_implementation``."""

from __future__ import annotations

from introspect.adapters.trainers import _keys, hf_trainer
from introspect.adapters.trainers._base import Keys, Resolved, accumulation

AXOLOTL = "axolotl 067b021"
_S = "src/axolotl/utils/schemas"

#: Memory-relevant keys not modelled, with axolotl's neutral value.
NOT_MODELLED = {
    "sample_packing": False,
    "torch_compile": False,
    "unsloth_cross_entropy_loss": False,
    "unsloth_lora_mlp": False,
    "unsloth_lora_qkv": False,
    "unsloth_lora_o": False,
    "unsloth_rms_norm": False,
    "unsloth_rope": False,
    "cut_cross_entropy": None,
    "lora_modules_to_save": None,
    "peft_use_dora": False,
    "rl": None,
    "activation_offloading": False,
    "sequence_parallel_degree": 1,
    "context_parallel_size": 1,
    "tensor_parallel_size": 1,
    "gradient_checkpointing_kwargs": None,
    "relora": None,
    "max_grad_norm": None,
    "neftune_noise_alpha": None,
    "eval_sample_packing": None,
    "pad_to_sequence_len": None,
    "float16": False,
    "bfloat16": False,
}


def looks_like(data: dict) -> bool:
    return "base_model" in data and any(
        k in data for k in ("micro_batch_size", "sequence_len", "datasets", "adapter")
    )


def read(keys: Keys, resolved: Resolved) -> None:
    resolved.model = _model(keys)
    batch = keys.positive("micro_batch_size")
    origin = (
        keys.origin("micro_batch_size") if batch else f"{AXOLOTL} default ({_S}/training.py:77)"
    )
    resolved.set("batch_size", batch or 1, origin)
    seq = keys.positive("sequence_len")
    origin = keys.origin("sequence_len") if seq else f"{AXOLOTL} default ({_S}/config.py:665)"
    resolved.set("seq_len", seq or 512, origin)
    accumulation(keys, resolved)
    _optimizer(keys, resolved)
    bf16 = keys.get("bf16", (bool, str), "auto")
    fp16 = keys.get("fp16", (bool,), False)
    keys.get("tf32", (bool, str))
    if bf16 == "auto" and not fp16:
        resolved.set(
            "precision",
            "amp",
            f"{AXOLOTL} default bf16: auto, on where the GPU has BF16 ({_S}/config.py:559)",
        )
    elif bf16 is True or fp16:
        resolved.set("precision", "amp", keys.origin("bf16" if bf16 is True else "fp16"))
    elif bf16 not in (False, "auto"):
        raise keys.error("bf16", f"is {bf16!r}, not true, false or auto", "axolotl refuses it")
    else:
        resolved.set("precision", "fp32", keys.origin("bf16"))
    ckpt = keys.get("gradient_checkpointing", (bool, str), False)
    if ckpt not in (True, False, "offload", "offload_disk"):
        raise keys.error(
            "gradient_checkpointing", f"is {ckpt!r}, not true, false, offload or offload_disk"
        )
    origin = (
        keys.origin("gradient_checkpointing")
        if keys.has("gradient_checkpointing")
        else f"{AXOLOTL} default ({_S}/config.py:600)"
    )
    resolved.set("activation_checkpointing", bool(ckpt), origin)
    if isinstance(ckpt, str):
        resolved.note(
            f"`gradient_checkpointing: {ckpt}` — the checkpoints' host offload not modelled"
        )
    _attention(keys, resolved)
    _lora(keys, resolved)
    _loss(keys, resolved)
    resolved.set("implementation", "transformers", f"{AXOLOTL}: transformers' Trainer and class")
    resolved.set("trainer", "hf", f"{AXOLOTL}: AxolotlTrainer, a transformers Trainer")
    fsdp = keys.get("fsdp_config", (dict,))
    keys.get("fsdp", (list, str, bool))
    keys.get("fsdp_version", (int,))
    if fsdp:
        resolved.set("sharding", "fsdp", keys.origin("fsdp_config"))
        if (
            fsdp.get("reshard_after_forward") is False
            or fsdp.get("fsdp_reshard_after_forward") is False
        ):
            resolved.set(
                "reshard_after_forward", False, keys.origin("fsdp_config.reshard_after_forward")
            )
        if fsdp.get("offload_params") or fsdp.get("fsdp_offload_params"):
            resolved.set("offload", "parameters", keys.origin("fsdp_config.offload_params"))
        if fsdp.get("activation_checkpointing") or fsdp.get("fsdp_activation_checkpointing"):
            resolved.set(
                "activation_checkpointing",
                True,
                keys.origin("fsdp_config.activation_checkpointing"),
            )
    for key, neutral in NOT_MODELLED.items():
        keys.not_modelled(resolved, key, unless=neutral)
    keys.taken.add("deepspeed")
    keys.finish(_keys.AXOLOTL, resolved)


def _model(keys: Keys):
    from introspect.adapters.trainers._base import Value

    model = keys.get("base_model", (str,))
    if not model:
        raise keys.error("base_model", "is empty", "name the Hub id or path of the model")
    return Value(model, keys.origin("base_model"))


def _optimizer(keys: Keys, resolved: Resolved) -> None:
    name = keys.get("optimizer", (str,))
    sub = Keys(keys.path, {"optim": name or "adamw_torch_fused"}, "axolotl")
    hf_trainer._optimizer(sub, resolved)
    for field in ("optimizer", "optimizer_impl"):
        if field in resolved.fields:
            origin = (
                keys.origin("optimizer") if name else f"{AXOLOTL} default ({_S}/training.py:122)"
            )
            resolved.fields[field].origin = origin
    if "optimizer" in resolved.unsupported:
        resolved.unsupported["optimizer"] = resolved.unsupported["optimizer"].replace(
            sub.origin("optim"), keys.origin("optimizer")
        )


def _attention(keys: Keys, resolved: Resolved) -> None:
    from introspect.adapters.trainers.common import attention

    impl = keys.get("attn_implementation", (str,))
    if impl:
        resolved.set(
            "attention",
            attention(keys, "attn_implementation", impl),
            keys.origin("attn_implementation"),
        )
        return
    for key in ("flash_attention", "sdp_attention", "xformers_attention", "flex_attention"):
        if keys.get(key, (bool,), False):
            resolved.set("attention", "memory_efficient", keys.origin(key))
            return
    keys.get("eager_attention", (bool,))
    resolved.set(
        "attention",
        "memory_efficient",
        f"{hf_trainer.TRANSFORMERS} default attn_implementation sdpa (modeling_utils.py:1856)",
    )


def _lora(keys: Keys, resolved: Resolved) -> None:
    from introspect.adapters.trainers.common import lora_targets

    adapter = keys.get("adapter", (str,))
    four = keys.get("load_in_4bit", (bool,), False)
    eight = keys.get("load_in_8bit", (bool,), False)
    if adapter is None:
        resolved.set("finetune", "full", keys.origin("adapter") + " absent: full fine-tune")
        return
    if adapter not in ("lora", "qlora"):
        resolved.refuse(
            "finetune",
            f"--config {keys.shown}: adapter {adapter!r} is not "
            "modelled (lora and qlora are); give --finetune",
        )
        return
    qlora = adapter == "qlora" or four
    resolved.set(
        "finetune",
        "qlora" if qlora else "lora",
        keys.origin("adapter" if adapter == "qlora" or not four else "load_in_4bit"),
    )
    if eight and not qlora:
        resolved.set("base_quant", "int8", keys.origin("load_in_8bit"))
    rank = keys.positive("lora_r")
    if rank:
        resolved.set("lora_rank", rank, keys.origin("lora_r"))
    dropout = keys.get("lora_dropout", (float,))
    if dropout is not None:
        resolved.set("lora_dropout", float(dropout), keys.origin("lora_dropout"))
    if keys.get("lora_target_linear", (bool,), False):
        resolved.set("lora_targets", ("all-linear",), keys.origin("lora_target_linear"))
    elif keys.has("lora_target_modules"):
        targets, other = lora_targets(
            keys, "lora_target_modules", keys.get("lora_target_modules", (list, str))
        )
        resolved.set("lora_targets", targets, keys.origin("lora_target_modules"))
        if other:
            resolved.note(
                f"`lora_target_modules: {', '.join(other)}` — no such block "
                "linear in the closed form: not modelled"
            )
    keys.get("lora_alpha", (int, float))
    _layers_to_transform(keys, resolved)


def _layers_to_transform(keys: Keys, resolved: Resolved) -> None:
    """``peft_layers_to_transform`` (``{_S}/peft.py``, passed to peft's
    ``LoraConfig(layers_to_transform=…)``): a block index or a list of them. Read onto
    ``--num-layers K`` as the top K blocks; whether the indices *are* the model's top
    ones is checked once the model is known (``resolved.layer_indices``, checked by
    :func:`introspect.commands._config.check_model`). ``peft_layers_pattern`` only
    names the blocks' module list."""
    key = "peft_layers_to_transform"
    value = keys.get(key, (int, list))
    keys.get("peft_layers_pattern", (str, list))
    if value is None:
        return
    indices = [value] if isinstance(value, int) else value
    if not indices or not all(isinstance(i, int) and not isinstance(i, bool) for i in indices):
        raise keys.error(key, f"is {value!r}, not a block index or a list of them")
    if min(indices) < 0:
        raise keys.error(key, f"is {value!r}, with a negative block index")
    resolved.layer_indices = (sorted(set(indices)), keys.origin(key))
    resolved.set("num_layers", len(set(indices)), keys.origin(key) + " (the top blocks)")


def _loss(keys: Keys, resolved: Resolved) -> None:
    plugins = keys.get("plugins", (list,), [])
    liger = any("liger" in str(p).lower() for p in plugins)
    fused = keys.get("liger_fused_linear_cross_entropy", (bool,), False)
    if liger and fused:
        resolved.set("cross_entropy", "liger", keys.origin("liger_fused_linear_cross_entropy"))
    else:
        resolved.set("cross_entropy", "standard", f"{AXOLOTL}: the model's loss from labels")
    if any("cut_cross_entropy" in str(p).lower() for p in plugins):
        resolved.note("`plugins: cut_cross_entropy` — Apple's cut cross-entropy not modelled")
    for key in (
        "liger_rope",
        "liger_rms_norm",
        "liger_glu_activation",
        "liger_layer_norm",
        "liger_cross_entropy",
    ):
        keys.not_modelled(resolved, key, unless=False)
