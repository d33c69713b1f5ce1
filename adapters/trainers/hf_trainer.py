"""The HF Trainer's ``TrainingArguments`` (as ``to_dict()`` writes it, JSON or YAML), and
TRL's ``SFTConfig`` / ``DPOConfig``, which subclass it with defaults of their own.

Read from transformers 5.24.0 ``src/transformers/training_args.py`` and TRL 1.16.0
``trl/trainer/{base,sft,dpo}_config.py`` and ``sft_trainer.py``:

* ``per_device_train_batch_size`` → batch (default 8, training_args.py:777);
* ``optim`` → optimizer (default ``adamw_torch_fused`` on torch ≥ 2.8, else
  ``adamw_torch``: training_args.py:806-813); see :data:`OPTIM`;
* ``bf16`` / ``fp16`` → ``amp`` (the Trainer autocasts over FP32 weights); TRL sets
  ``bf16 = not fp16`` when unset (base_config.py:108);
* ``gradient_checkpointing`` / ``activation_checkpointing`` → checkpointing (off,
  training_args.py:908/926; on in TRL, base_config.py:62);
* no sequence length in TrainingArguments; TRL's ``max_length`` (1024, sft_config.py:202,
  dpo_config.py:195);
* the loss: the model's own from ``labels=`` under the Trainer; ``use_liger_kernel`` →
  Liger's; SFTTrainer always adds its fused LM head (sft_trainer.py:1144) → ``trl``;
* attention: not a TrainingArguments key; transformers picks ``sdpa`` when the model does
  not say (modeling_utils.py:1856) → memory-efficient, unless TRL's
  ``model_init_kwargs.attn_implementation`` says otherwise.
"""

from __future__ import annotations

from introspect.adapters.trainers import _keys
from introspect.adapters.trainers._base import Keys, Resolved

TYPE_CHECKING = False
if TYPE_CHECKING:
    pass

TRANSFORMERS = "transformers 5.24.0"
TRL = "TRL 1.16.0"
_TA = "training_args.py"

#: HF ``optim`` names the closed form prices → (optimizer, optimizer_impl).
#: adamw_torch: ``torch.optim.AdamW`` with torch's own implementation choice;
#: adamw_torch_fused: ``fused=True`` (trainer.py ``get_optimizer_cls_and_kwargs``);
#: adamw_bnb_8bit / adamw_8bit: bitsandbytes' ``AdamW(optim_bits=8)``
#: (trainer_optimizer.py:246-292), with the Trainer's 32-bit state for every
#: ``nn.Embedding`` (trainer.py:1328-1340), priced under ``--trainer hf|trl``
#: (introspect/refined/trainers.py).
OPTIM: dict[str, tuple[str, str]] = {
    "adamw_torch": ("adamw", "auto"),
    "adamw_torch_fused": ("adamw", "fused"),
    "adamw_hf": ("adamw", "auto"),  # 4.x's own AdamW, the same two FP32 moments
    "adamw_bnb_8bit": ("adam8bit", "auto"),
    "adamw_8bit": ("adam8bit", "auto"),
    "sgd": ("sgd", "auto"),
}
#: Trainer names the setup models under the same name (``setup.OPTIMIZERS``):
#: transformers' Adafactor; bitsandbytes' paged AdamW (``AdamW(optim_bits=8|32,
#: is_paged=True)``, state outside torch's allocator; the 8-bit one with the Trainer's
#: embedding override too).
OWN_STATE_MODEL = ("adafactor", "paged_adamw_8bit", "paged_adamw_32bit")
#: Every other name of transformers 5.24.0 ``OptimizerNames`` (training_args.py:113-160):
#: the Trainer takes them, the closed form has no state model for them.
OTHER_OPTIM = frozenset(
    "adamw_torch_xla adamw_torch_npu_fused adafactor adamw_anyprecision adamw_torch_4bit "
    "adamw_torch_8bit ademamix adagrad ademamix_8bit lion_8bit lion_32bit paged_ademamix_32bit "
    "paged_ademamix_8bit paged_lion_32bit paged_lion_8bit rmsprop rmsprop_bnb rmsprop_bnb_8bit "
    "rmsprop_bnb_32bit galore_adamw galore_adamw_8bit galore_adafactor galore_adamw_layerwise "
    "galore_adamw_8bit_layerwise galore_adafactor_layerwise lomo adalomo grokadamw "
    "schedule_free_radam schedule_free_adamw schedule_free_sgd apollo_adamw "
    "apollo_adamw_layerwise stable_adamw".split()
)
#: Keys that bear on memory and are not modelled, with their neutral value.
NOT_MODELLED = {
    "torch_compile": False,
    "gradient_checkpointing_kwargs": None,
    "activation_checkpointing_kwargs": None,
    "torch_empty_cache_steps": None,
    "auto_find_batch_size": False,
    "neftune_noise_alpha": None,
    "optim_target_modules": None,
    "optim_args": None,
    "ddp_bucket_cap_mb": None,
    "liger_kernel_config": None,
    "label_smoothing_factor": 0.0,
    "half_precision_backend": "auto",
    "fp16_opt_level": "O1",
    "parallelism_config": None,
    "eval_accumulation_steps": None,
}


def read(keys: Keys, resolved: Resolved, flavour: str = "hf") -> None:
    """Map one TrainingArguments-like file (``flavour``: ``hf``, ``sft`` or ``dpo``) onto
    ``resolved``."""
    trl = flavour in ("sft", "dpo")
    trl_where = f"{TRL} default (trl/trainer/base_config.py"
    batch = keys.positive("per_device_train_batch_size")
    if batch is not None:
        resolved.set("batch_size", batch, keys.origin("per_device_train_batch_size"))
    else:
        resolved.set("batch_size", 8, f"{TRANSFORMERS} default ({_TA}:777)")
    keys.get("per_gpu_train_batch_size", (int,))
    if flavour == "hf":
        resolved.note(
            "TrainingArguments has no sequence length: T is introspect's default unless "
            "--seq says (the collator's max_length decides it)"
        )
    else:
        length = keys.positive("max_length")
        old = keys.positive("max_seq_length") if flavour == "sft" else None
        line = "sft_config.py:202" if flavour == "sft" else "dpo_config.py:195"
        if length is not None:
            resolved.set("seq_len", length, keys.origin("max_length"))
        elif old is not None:  # TRL < 0.16's name for max_length
            resolved.set("seq_len", old, keys.origin("max_seq_length"))
        elif "max_length" not in keys.data:
            resolved.set("seq_len", 1024, f"{TRL} default (trl/trainer/{line})")
        else:  # max_length: null — no truncation, the longest example decides
            resolved.note("`max_length: null` — no truncation; give --seq for the longest row")
    _optimizer(keys, resolved)
    _precision(keys, resolved, trl)
    checkpointing = None
    for key in ("activation_checkpointing", "gradient_checkpointing"):
        value = keys.get(key, (bool,))
        if value is not None and checkpointing is None:
            checkpointing = value
            resolved.set("activation_checkpointing", value, keys.origin(key))
    if checkpointing is None:
        if trl:
            resolved.set("activation_checkpointing", True, f"{trl_where}:62)")
        else:
            resolved.set("activation_checkpointing", False, f"{TRANSFORMERS} default ({_TA}:926)")
    from introspect.adapters.trainers._base import accumulation

    accumulation(keys, resolved)
    liger = keys.get("use_liger_kernel", (bool,), False)
    if trl:
        where = "SFTTrainer's" if flavour == "sft" else "DPOTrainer's"
        line = "sft_trainer.py:1144" if flavour == "sft" else "dpo_trainer.py:960"
        resolved.set("cross_entropy", "trl", f"{TRL} {where} fused LM head (trl/trainer/{line})")
        if liger:
            resolved.note(
                "`use_liger_kernel: true` — under TRL only Liger's layer kernels apply (its fused "
                "cross-entropy is turned off, sft_trainer.py:1140); those kernels are not modelled"
            )
    elif liger:
        resolved.set("cross_entropy", "liger", keys.origin("use_liger_kernel"))
    else:
        resolved.set(
            "cross_entropy", "standard", f"{TRANSFORMERS} Trainer: the model's loss from labels"
        )
    resolved.set(
        "implementation", "transformers", f"{TRANSFORMERS} Trainer: transformers' own class"
    )
    if flavour == "hf":
        resolved.set("trainer", "hf", f"{TRANSFORMERS} Trainer ({keys.shown})")
    elif flavour == "sft":
        resolved.set("trainer", "trl", f"{TRL} SFTTrainer ({keys.shown})")
    else:
        resolved.set("trainer", "dpo", f"{TRL} DPOTrainer ({keys.shown})")
    _attention(keys, resolved, trl)
    if keys.get("use_cpu", (bool,), False) or keys.get("no_cuda", (bool,), False):
        resolved.set("device", "cpu", keys.origin("use_cpu" if keys.has("use_cpu") else "no_cuda"))
    clip = keys.get("max_grad_norm", (float,))
    if clip:
        resolved.note(
            f"`max_grad_norm: {clip:g}` ({keys.shown}) — gradient "
            "clipping's temporaries not modelled"
        )
    for key, neutral in NOT_MODELLED.items():
        keys.not_modelled(resolved, key, unless=neutral)
    _fsdp(keys, resolved)
    if flavour == "sft":
        _sft(keys, resolved)
    if flavour == "dpo":
        _dpo(keys, resolved)
    known = set(_keys.HF_TRAINING_ARGUMENTS)
    if trl and "model_name_or_path" in keys.data:
        _model_config(keys, resolved, flavour)
        known |= _keys.TRL_SCRIPT
    if flavour == "sft":
        known |= _keys.TRL_SFT | _keys.TRL_SFT_LEGACY
    if flavour == "dpo":
        known |= _keys.TRL_DPO
        _dpo_dropout(keys, resolved)
    keys.taken.add("deepspeed")  # read by the caller (introspect.adapters.trainers.deepspeed)
    keys.finish(known, resolved)


def _model_config(keys: Keys, resolved: Resolved, flavour: str = "sft") -> None:
    """TRL's CLI config also carries ``ModelConfig`` (trl/trainer/model_config.py): the
    model, its dtype (float32 by default, :90), attention and the peft/bitsandbytes
    settings (``use_peft``, ``lora_r`` 16, ``lora_dropout`` 0.05, ``load_in_4bit``)."""
    from introspect.adapters.trainers._base import Value
    from introspect.adapters.trainers.common import attention, lora_targets

    model = keys.get("model_name_or_path", (str,))
    resolved.model = Value(model, keys.origin("model_name_or_path"))
    resolved.note(
        "a TRL CLI config: read as `trl sft --config` (SFTConfig's defaults); DPO keys would "
        "make it `trl dpo`"
        if flavour == "sft"
        else "a TRL CLI config with DPO keys: read as `trl dpo --config` (DPOConfig's defaults)"
    )
    dtype = keys.get("dtype", (str,))
    if dtype in ("bfloat16", "bf16"):
        resolved.set("precision", "bf16", keys.origin("dtype") + " (BF16 weights under autocast)")
    impl = keys.get("attn_implementation", (str,))
    if impl:
        name = attention(keys, "attn_implementation", impl)
        resolved.set("attention", name, keys.origin("attn_implementation"))
    if not keys.get("use_peft", (bool,), False):
        resolved.set("finetune", "full", f"{TRL} default use_peft: false (model_config.py:103)")
        return
    four, eight = keys.get("load_in_4bit", (bool,), False), keys.get("load_in_8bit", (bool,), False)
    resolved.set("finetune", "qlora" if four else "lora", keys.origin("use_peft"))
    if eight and not four:
        resolved.set("base_quant", "int8", keys.origin("load_in_8bit"))
    nested = keys.get("use_bnb_nested_quant", (bool,), False)
    if four:
        resolved.set("double_quant", nested, keys.origin("use_bnb_nested_quant"))
        resolved.note(
            "`load_in_4bit: true` — SFTTrainer casts a quantized model's adapters to BF16 "
            "(sft_trainer.py:904-911): not modelled (the adapters priced at FP32, peft's)"
        )
    rank = keys.positive("lora_r")
    resolved.set(
        "lora_rank",
        rank or 16,
        keys.origin("lora_r") if rank else f"{TRL} default (model_config.py:107)",
    )
    dropout = keys.get("lora_dropout", (float,))
    where = (
        keys.origin("lora_dropout")
        if dropout is not None
        else f"{TRL} default (model_config.py:115)"
    )
    resolved.set("lora_dropout", 0.05 if dropout is None else float(dropout), where)
    targets = keys.get("lora_target_modules", (list, str))
    if targets:
        names, other = lora_targets(keys, "lora_target_modules", targets)
        resolved.set("lora_targets", names, keys.origin("lora_target_modules"))
        if other:
            resolved.note(f"`lora_target_modules: {', '.join(other)}` — not modelled")
    for key in ("use_dora", "use_rslora", "lora_modules_to_save"):
        keys.not_modelled(resolved, key, unless=False)
    keys.taken.update(_keys.TRL_MODEL_CONFIG & set(keys.data))


def _optimizer(keys: Keys, resolved: Resolved) -> None:
    """``optim`` → the setup's optimizer (:data:`OPTIM`, :data:`OWN_STATE_MODEL`), the
    Trainer's own default when absent; a name without a state model is refused."""
    name = keys.get("optim", (str,))
    origin = keys.origin("optim")
    if keys.get("adafactor", (bool,), False):  # 4.x's flag for optim="adafactor"
        name, origin = "adafactor", keys.origin("adafactor")
    if name is None:
        name = "adamw_torch_fused"
        origin = f"{TRANSFORMERS} default on torch >= 2.8 ({_TA}:806-813)"
    from introspect.setup import OPTIMIZERS

    if name in OWN_STATE_MODEL and name in OPTIMIZERS:  # modelled under the Trainer's name
        resolved.set("optimizer", name, origin)
        return
    if name in OPTIM:
        optimizer, impl = OPTIM[name]
        resolved.set("optimizer", optimizer, origin)
        resolved.set("optimizer_impl", impl, origin)
        return
    if name in OTHER_OPTIM or name in OWN_STATE_MODEL:
        resolved.refuse(
            "optimizer",
            f"{origin} is {name!r}, an optimizer the closed form has no state model for; "
            "give --optimizer (adamw, adam8bit, sgd …) to price another",
        )
        return
    raise keys.error(
        "optim",
        f"is {name!r}, not one of transformers' OptimizerNames (training_args.py:113)",
        "the Trainer itself refuses it; use adamw_torch_fused, adamw_torch, adamw_bnb_8bit …",
    )


def _precision(keys: Keys, resolved: Resolved, trl: bool) -> None:
    bf16 = keys.get("bf16", (bool,))
    fp16 = keys.get("fp16", (bool,), False)
    if bf16 and fp16:
        raise keys.error("bf16", "and fp16 are both true", "the Trainer refuses both; keep one")
    if bf16 is None and trl:
        bf16 = not fp16
        where = f"{TRL} default: bf16 = not fp16 (trl/trainer/base_config.py:108)"
    else:
        where = keys.origin("bf16")
    if bf16:
        resolved.set("precision", "amp", where)
    elif fp16:
        resolved.set("precision", "amp", keys.origin("fp16"))
        resolved.note(
            "`fp16: true` — priced as autocast (amp, 2-byte activations); GradScaler not modelled"
        )
    else:
        resolved.set(
            "precision",
            "fp32",
            where if bf16 is not None else f"{TRANSFORMERS} default ({_TA}:874)",
        )
    keys.get("tf32", (bool,))  # matmul precision only: no memory


def _attention(keys: Keys, resolved: Resolved, trl: bool) -> None:
    init = keys.get("model_init_kwargs", (dict,)) if trl else None
    name = (init or {}).get("attn_implementation")
    if name is not None:
        from introspect.adapters.trainers.common import attention

        resolved.set(
            "attention",
            attention(keys, "model_init_kwargs.attn_implementation", name),
            keys.origin("model_init_kwargs.attn_implementation"),
        )
    else:
        resolved.set(
            "attention",
            "memory_efficient",
            f"{TRANSFORMERS} default attn_implementation sdpa (modeling_utils.py:1856)",
        )
    for key in init or {}:
        if key in ("dtype", "torch_dtype"):
            resolved.note(
                f"`model_init_kwargs.{key}: {init[key]}` — the loaded weights' "
                "dtype under autocast: not modelled (priced as amp)"
            )
        elif key == "quantization_config":
            resolved.note(
                "`model_init_kwargs.quantization_config` — a quantized base: give --finetune qlora"
            )


def _fsdp(keys: Keys, resolved: Resolved) -> None:
    fsdp = keys.get("fsdp", (str, list, bool))
    keys.get("fsdp_config", (dict, str))
    if not fsdp:
        return
    words = (
        fsdp.split()
        if isinstance(fsdp, str)
        else list(fsdp)
        if isinstance(fsdp, list)
        else ["full_shard"]
    )
    if "full_shard" in words or "shard_grad_op" in words or "hybrid_shard" in words:
        resolved.set("sharding", "fsdp", keys.origin("fsdp"))
        if "shard_grad_op" in words:
            resolved.set("reshard_after_forward", False, keys.origin("fsdp"))
    if "offload" in words:
        resolved.set("offload", "parameters", keys.origin("fsdp"))


#: SFTConfig ``packing_strategy`` choices (sft_config.py:229; ``bfd-requeue`` is the old
#: name of ``bfd_split``, :336).
PACKING_STRATEGIES = ("bfd", "bfd_split", "bfd-requeue", "wrapped")


def _sft(keys: Keys, resolved: Resolved) -> None:
    """SFTConfig's own keys that bear on the step: packing and padding-free decide the
    sequence the step sees (:func:`_padding_free`); the loss masks do not change memory
    off CUDA; activation offloading and DFT's loss are not modelled."""
    packing = keys.get("packing", (bool,), False)
    strategy = keys.get("packing_strategy", (str,), "bfd")
    if strategy not in PACKING_STRATEGIES:
        raise keys.error(
            "packing_strategy",
            f"is {strategy!r}, not one of SFTConfig's (sft_config.py:229)",
            "use bfd, bfd_split or wrapped",
        )
    # sft_trainer.py:916: bfd packing turns padding-free on, whatever padding_free says
    forced = packing and strategy != "wrapped"
    if keys.get("padding_free", (bool,), False) or forced:
        _padding_free(keys, resolved, "packing" if forced else "padding_free", packing)
    for key in ("completion_only_loss", "assistant_only_loss"):
        if keys.get(key, (bool,)):
            resolved.note(
                f"`{key}: true` — only the labels change (-100 on the prompt): off CUDA TRL's "
                "fused head scores every position anyway (utils.py:1642, no memory change); "
                "on CUDA it scores only the trained ones, which the estimate (every "
                "position) bounds from above"
            )
    keys.not_modelled(resolved, "activation_offloading", unless=False)
    keys.not_modelled(resolved, "loss_type", unless="nll")


def _padding_free(keys: Keys, resolved: Resolved, key: str, packing: bool) -> None:
    """Padding-free: ``DataCollatorForLanguageModeling(padding_free=True)``
    (sft_trainer.py:189-192) concatenates the batch's rows into ONE row, with
    ``position_ids`` restarting at each sequence and no ``attention_mask``; with packing,
    each row is a bin of sequences filled up to ``max_length`` (``pack_dataset``,
    trl/data_utils.py:837). The step sees B = 1 and T = B·max_length (full bins, the
    largest the step can be). transformers then finds the packed sequences in the
    ``position_ids`` (masking_utils.py:735, ``find_packed_sequence_indices``) and builds a
    block-diagonal T×T mask, which SDPA and eager take and flash-attention's varlen path
    (``cu_seq_lens``) does not."""
    batch = resolved.fields.get("batch_size")
    length = resolved.fields.get("seq_len")
    where = f"{keys.origin(key)}: the collator flattens the batch into one row"
    if length is None:  # max_length: null, the rows' own lengths
        resolved.note(
            f"`{key}: true` — the batch runs as one row of its rows' summed lengths; give "
            "--batch 1 --seq SUM (the tokens of one batch)"
        )
        return
    B, T = batch.value, length.value
    resolved.set("batch_size", 1, f"{where} (sft_trainer.py:189)")
    what = "bins packed to max_length" if packing else "rows of max_length"
    resolved.set("seq_len", B * T, f"{where}: {B} {what} × {T} (the most a step holds)")
    resolved.set(
        "packed_sequences", True, f"{where}: position_ids restart per sequence, no attention_mask"
    )
    resolved.note(
        f"`{key}: true` — one row of {B * T} tokens with transformers' block-diagonal mask "
        "(masking_utils.py:735: SDPA keeps a T×T mask per layer, eager's is T×T anyway); "
        "flash_attention_2's varlen path (cu_seq_lens, no mask) is not modelled"
    )


def _dpo_dropout(keys: Keys, resolved: Resolved) -> None:
    """DPOConfig's ``disable_dropout`` (True by default, dpo_config.py:185): every
    ``nn.Dropout`` of the policy gets ``p = 0`` (dpo_trainer.py:932,
    ``disable_dropout_in_model``), LoRA's ``lora_dropout`` among them."""
    if not keys.get("disable_dropout", (bool,), True):
        return
    where = (
        keys.origin("disable_dropout")
        if keys.has("disable_dropout")
        else f"{TRL} default disable_dropout: true (trl/trainer/dpo_config.py:185)"
    )
    dropout = resolved.fields.get("lora_dropout")
    if dropout is not None and dropout.value:
        resolved.set("lora_dropout", 0.0, f"{where}: dpo_trainer.py:932 sets every p = 0")
    resolved.note(
        f"`disable_dropout` ({where}) — the model's own dropout (attention, residual, "
        "embedding) is off in the step: priced with the config's, which adds its masks "
        "where the config has dropout"
    )


def _dpo(keys: Keys, resolved: Resolved) -> None:
    """DPOConfig: the batch is of pairs (the step runs 2 rows each, chosen and rejected:
    :mod:`introspect.refined.dpo`); ``precompute_ref_log_probs`` → no reference held in
    training (dpo_trainer.py:909); TRL 1.16 turns ``padding_free`` off itself."""
    pre = keys.get("precompute_ref_log_probs", (bool,))
    if pre is None:
        resolved.set(
            "dpo_reference", "model", f"{TRL} default precompute_ref_log_probs: false "
            "(trl/trainer/dpo_config.py:227): a reference model each step",
        )  # fmt: skip
    else:
        value = "precomputed" if pre else "model"
        resolved.set("dpo_reference", value, keys.origin("precompute_ref_log_probs"))
    if keys.get("padding_free", (bool,), False):
        resolved.note(
            "`padding_free: true` — DPOTrainer 1.16 falls back to padding "
            "(dpo_trainer.py:733-739): priced padded, as it runs"
        )
    keys.not_modelled(resolved, "activation_offloading", unless=False)
    keys.not_modelled(resolved, "sync_ref_model", unless=False)
    keys.not_modelled(resolved, "precompute_ref_batch_size", unless=None)
