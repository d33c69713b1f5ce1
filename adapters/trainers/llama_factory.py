"""LLaMA-Factory's YAML (at ff6d4d1, ``src/llamafactory/hparams/``): its own keys beside
every ``Seq2SeqTrainingArguments`` name. ``model_name_or_path``; ``finetuning_type``
(default lora, finetuning_args.py:464) with ``lora_rank`` (8, :77), ``lora_target``
(``all``, :81), ``lora_dropout``; ``quantization_bit`` 4/8 (model_args.py:283);
``cutoff_len`` (2048, data_args.py:46); gradient checkpointing ON unless
``disable_gradient_checkpointing`` (model_args.py:145, applied in
model/model_utils/checkpointing.py:184); ``flash_attn`` (auto: transformers' own pick,
model_args.py:117); ``pure_bf16`` (pure BF16 weights); ``enable_liger_kernel``."""

from __future__ import annotations

from introspect.adapters.trainers import _keys, hf_trainer
from introspect.adapters.trainers._base import Keys, Resolved, Value, accumulation

LF = "LLaMA-Factory ff6d4d1"
_H = "src/llamafactory/hparams"

NOT_MODELLED = {
    "use_unsloth": False,
    "use_unsloth_gc": False,
    "use_galore": False,
    "use_apollo": False,
    "use_badam": False,
    "use_adam_mini": False,
    "use_muon": False,
    "use_dora": False,
    "use_llama_pro": False,
    "mixture_of_depths": None,
    "packing": None,
    "neat_packing": False,
    "upcast_layernorm": False,
    "upcast_lmhead_output": False,
    "shift_attn": False,
    "rope_scaling": None,
    "additional_target": None,
    "fp8": False,
    "use_kt": False,
    "use_mca": False,
    "use_megatron_bridge": False,
    "use_hyper_parallel": False,
    "train_from_scratch": False,
    "freeze_vision_tower": True,
    "resize_vocab": False,
}
#: ``flash_attn`` (model_args.py AttentionFunction) → the setup's attention; ``auto`` is
#: left to transformers (sdpa).
FLASH_ATTN = {"auto": "memory_efficient", "disabled": "eager", "sdpa": "memory_efficient"}
FLASH_ATTN.update({"fa2": "memory_efficient", "fa3": "memory_efficient"})


def looks_like(data: dict) -> bool:
    own = ("finetuning_type", "cutoff_len", "template", "stage")
    return "model_name_or_path" in data and any(k in data for k in own)


def read(keys: Keys, resolved: Resolved) -> None:
    model = keys.get("model_name_or_path", (str,))
    resolved.model = Value(model, keys.origin("model_name_or_path")) if model else None
    stage = keys.get("stage", (str,), "sft")
    if stage not in ("pt", "sft", "rm", "ppo", "dpo", "kto"):
        raise keys.error(
            "stage", f"is {stage!r}, not pt, sft, rm, ppo, dpo or kto", "LLaMA-Factory refuses it"
        )
    if stage in ("dpo", "kto", "ppo", "rm"):
        resolved.note(
            f"`stage: {stage}` — its reference/reward model and paired rows "
            "not modelled: the figure is one policy step"
        )
    batch = keys.positive("per_device_train_batch_size")
    resolved.set(
        "batch_size",
        batch or 8,
        keys.origin("per_device_train_batch_size")
        if batch
        else f"{hf_trainer.TRANSFORMERS} default (training_args.py:777)",
    )
    seq = keys.positive("cutoff_len")
    resolved.set(
        "seq_len",
        seq or 2048,
        keys.origin("cutoff_len") if seq else f"{LF} default ({_H}/data_args.py:46)",
    )
    accumulation(keys, resolved)
    hf_trainer._optimizer(keys, resolved)
    hf_trainer._precision(keys, resolved, trl=False)
    if keys.get("pure_bf16", (bool,), False):
        resolved.set("precision", "bf16", keys.origin("pure_bf16"))
    off = keys.get("disable_gradient_checkpointing", (bool,))
    if off is None:
        resolved.set(
            "activation_checkpointing",
            True,
            f"{LF} default: checkpointing unless "
            f"disable_gradient_checkpointing ({_H}/model_args.py:145)",
        )
    else:
        resolved.set(
            "activation_checkpointing", not off, keys.origin("disable_gradient_checkpointing")
        )
    keys.get("gradient_checkpointing", (bool,))  # LLaMA-Factory applies its own (above)
    flash = keys.get("flash_attn", (str,), "auto")
    if flash not in FLASH_ATTN:
        raise keys.error(
            "flash_attn",
            f"is {flash!r}, not auto, disabled, sdpa, fa2 or fa3",
            "LLaMA-Factory refuses it",
        )
    where = (
        keys.origin("flash_attn")
        if keys.has("flash_attn")
        else f"{LF} default flash_attn: auto → transformers' sdpa ({_H}/model_args.py:117)"
    )
    resolved.set("attention", FLASH_ATTN[flash], where)
    liger = keys.get("enable_liger_kernel", (bool,), False) or keys.get(
        "use_liger_kernel", (bool,), False
    )
    if liger:
        resolved.set("cross_entropy", "liger", keys.origin("enable_liger_kernel"))
    else:
        resolved.set(
            "cross_entropy",
            "standard",
            f"{LF}: transformers' Trainer, the model's loss from labels",
        )
    resolved.set("implementation", "transformers", f"{LF}: transformers' Trainer and class")
    resolved.set("trainer", "hf", f"{LF}: CustomSeq2SeqTrainer, a transformers Trainer")
    _finetune(keys, resolved)
    for key, neutral in {**hf_trainer.NOT_MODELLED, **NOT_MODELLED}.items():
        keys.not_modelled(resolved, key, unless=neutral)
    hf_trainer._fsdp(keys, resolved)
    keys.taken.add("deepspeed")
    keys.finish(_keys.LLAMA_FACTORY | _keys.HF_TRAINING_ARGUMENTS, resolved)


def _finetune(keys: Keys, resolved: Resolved) -> None:
    from introspect.adapters.trainers.common import lora_targets

    kind = keys.get("finetuning_type", (str,))
    where = (
        keys.origin("finetuning_type") if kind else f"{LF} default ({_H}/finetuning_args.py:464)"
    )
    kind = kind or "lora"
    if kind == "full":
        resolved.set("finetune", "full", where)
        return
    if kind != "lora":
        if kind not in ("freeze", "oft"):
            raise keys.error(
                "finetuning_type",
                f"is {kind!r}, not lora, oft, freeze or full",
                "LLaMA-Factory refuses it",
            )
        resolved.refuse(
            "finetune",
            f"--config {keys.shown}: finetuning_type {kind!r} is not "
            "modelled (full and lora are); give --finetune",
        )
        return
    bits = keys.get("quantization_bit", (int,))
    if bits not in (None, 4, 8):
        resolved.refuse(
            "finetune",
            f"--config {keys.shown}: quantization_bit {bits} is not "
            "modelled (4 and 8 are); give --finetune",
        )
    resolved.set(
        "finetune",
        "qlora" if bits == 4 else "lora",
        keys.origin("quantization_bit") if bits == 4 else where,
    )
    if bits == 8:
        resolved.set("base_quant", "int8", keys.origin("quantization_bit"))
    if bits == 4:
        double = keys.get("double_quantization", (bool,))
        if double is not None:
            resolved.set("double_quant", double, keys.origin("double_quantization"))
        method = keys.get("quantization_method", (str,), "bnb")
        if method != "bnb":
            resolved.note(f"`quantization_method: {method}` — priced as bitsandbytes NF4")
    rank = keys.positive("lora_rank")
    resolved.set(
        "lora_rank",
        rank or 8,
        keys.origin("lora_rank") if rank else f"{LF} default ({_H}/finetuning_args.py:77)",
    )
    dropout = keys.get("lora_dropout", (float,))
    if dropout is not None:
        resolved.set("lora_dropout", float(dropout), keys.origin("lora_dropout"))
    target = keys.get("lora_target", (str, list))
    if target is None:
        resolved.set(
            "lora_targets",
            ("all-linear",),
            f"{LF} default lora_target: all ({_H}/finetuning_args.py:81)",
        )
    else:
        targets, other = lora_targets(keys, "lora_target", target)
        resolved.set("lora_targets", targets, keys.origin("lora_target"))
        if other:
            resolved.note(
                f"`lora_target: {', '.join(other)}` — no such block "
                "linear in the closed form: not modelled"
            )
