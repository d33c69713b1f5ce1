"""A DeepSpeed JSON, its ``"auto"`` values resolved from the Trainer's arguments given
beside it, as transformers does it (transformers 5.24.0
``integrations/deepspeed.py`` ``HfTrainerDeepSpeedConfig.trainer_config_process``:
``train_micro_batch_size_per_gpu`` ← ``per_device_train_batch_size``,
``gradient_accumulation_steps`` ← the same name, ``train_batch_size`` = world size ×
micro-batch × accumulation, ``bf16.enabled`` / ``fp16.enabled`` ← ``bf16`` / ``fp16``;
a set value that differs from the Trainer's is refused there, and here).

DeepSpeed's 16-bit training keeps 16-bit working weights and gradients with an FP32
master copy (DeepSpeed ``runtime/bf16_optimizer.py``, ``runtime/zero/stage_1_and_2.py``):
``precision: mixed``. ``zero_optimization.stage`` is the ZeRO stage;
``offload_optimizer.device`` / ``offload_param.device`` (cpu or nvme) the offload.
"""

from __future__ import annotations

from introspect.adapters.trainers._base import ConfigFileError, Keys, Resolved

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

#: DeepSpeed's top-level keys (``deepspeed/runtime/config.py`` at edaa722) that do not
#: bear on one step's memory, or whose part is read below.
KNOWN = frozenset(
    "train_batch_size train_micro_batch_size_per_gpu gradient_accumulation_steps "
    "gradient_clipping steps_per_print wall_clock_breakdown scheduler optimizer fp16 bf16 "
    "bfloat16 zero_optimization zero_allow_untested_optimizer prescale_gradients "
    "gradient_predivide_factor flops_profiler tensorboard wandb csv_monitor comms_logger "
    "checkpoint memory_breakdown dump_state timers monitor_config autotuning elasticity "
    "zero_force_ds_cpu_optimizer disable_allgather sparse_gradients aio nebula "
    "communication_data_type seq_parallel_communication_data_type data_types amp "
    "activation_checkpointing compile tensor_parallel sequence_parallel_size pipeline "
    "data_efficiency curriculum_learning compression_training torch_autocast "
    "graph_harvesting use_data_before_expert_parallelism weight_quantization "
    "hybrid_engine eigenvalue progressive_layer_drop quantize_training".split()
)
#: Memory-relevant top-level keys the closed form does not model, with a neutral value.
NOT_MODELLED = {
    "activation_checkpointing": None,
    "amp": None,
    "compile": None,
    "tensor_parallel": None,
    "sequence_parallel_size": 1,
    "data_types": None,
    "communication_data_type": None,
    "torch_autocast": None,
    "pipeline": None,
}
#: zero_optimization keys priced at DeepSpeed's defaults (buckets, prefetch, persistence).
ZERO_DEFAULTED = frozenset(
    "reduce_bucket_size allgather_bucket_size stage3_prefetch_bucket_size "
    "stage3_param_persistence_threshold stage3_max_live_parameters stage3_max_reuse_distance "
    "sub_group_size".split()
)


def looks_like(data: dict[str, Any]) -> bool:
    """A DeepSpeed config by content: its own batch or ZeRO keys, and no Trainer's."""
    own = ("zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size")
    return any(k in data for k in own) and "output_dir" not in data


def read(
    keys: Keys,
    resolved: Resolved,
    trainer: dict[str, Any] | None,
    trainer_shown: str | None,
) -> None:
    """Map the DeepSpeed config onto ``resolved``; ``trainer`` is the Trainer's arguments
    (a mapping) that resolve ``"auto"``, or None."""
    data = keys.data
    autos = _autos(data)
    if autos and trainer is None:
        raise ConfigFileError(
            f'--config {keys.shown}: {autos[0]} is "auto", which only the Trainer\'s '
            "arguments resolve; give the TrainingArguments (or axolotl/LLaMA-Factory) "
            "file beside it in --config, or set the value"
        )
    trainer = trainer or {}
    micro = _resolved(
        keys,
        "train_micro_batch_size_per_gpu",
        trainer,
        "per_device_train_batch_size",
        8,
        trainer_shown,
    )
    accum = _resolved(
        keys,
        "gradient_accumulation_steps",
        trainer,
        "gradient_accumulation_steps",
        1,
        trainer_shown,
    )
    if micro is not None:
        resolved.set("batch_size", micro[0], micro[1])
    if accum is not None:  # its own key, or "auto" filled from the Trainer's
        resolved.set("grad_accum", accum[0], accum[1])
    total = keys.get("train_batch_size", (int, str))
    if isinstance(total, int) and micro is not None:
        steps = accum[0] if accum else 1
        world, rest = divmod(total, micro[0] * steps)
        if rest or world < 1:
            raise keys.error(
                "train_batch_size",
                f"is {total}, not a multiple of micro-batch {micro[0]} × accumulation {steps}",
                "DeepSpeed refuses it; fix train_batch_size",
            )
        resolved.set(
            "devices", world, keys.origin("train_batch_size") + " ÷ (micro-batch × accumulation)"
        )
    _precision(keys, resolved, trainer, trainer_shown)
    zero = keys.get("zero_optimization", (dict,))
    if zero is not None:
        _zero(Keys(keys.path, zero, "DeepSpeed zero_optimization", "zero_optimization."), resolved)
    optimizer = keys.get("optimizer", (dict,))
    if optimizer is not None:
        kind = str(optimizer.get("type", "")).lower()
        if kind in ("adam", "adamw", "fusedadam", "cpuadam", "deepspeedcpuadam"):
            resolved.set("optimizer", "adamw", keys.origin("optimizer.type"))
            resolved.set(
                "optimizer_impl",
                "fused",
                keys.origin("optimizer.type") + " (DeepSpeed's FusedAdam)",
            )
        else:
            resolved.refuse(
                "optimizer",
                f"--config {keys.shown}: optimizer.type {optimizer.get('type')!r} has no state "
                "model in the closed form; give --optimizer to price another",
            )
    for key, neutral in NOT_MODELLED.items():
        keys.not_modelled(resolved, key, unless=neutral)
    keys.finish(KNOWN, resolved)


def _autos(data: Any, prefix: str = "") -> list[str]:
    if isinstance(data, dict):
        return [a for k, v in data.items() for a in _autos(v, f"{prefix}{k}.")]
    return [prefix.rstrip(".")] if data == "auto" else []


def _resolved(
    keys: Keys, key: str, trainer: dict[str, Any], name: str, default: int, shown: str | None
) -> tuple[int, str] | None:
    value = keys.get(key, (int, str))
    if value is None:
        return None
    if value == "auto":
        got = trainer.get(name)
        if got is None:
            return default, f'{keys.origin(key)} "auto" ← the Trainer\'s default {name}={default}'
        return got, f'{keys.origin(key)} "auto" ← {shown}: {name}'
    if not isinstance(value, int) or value <= 0:
        raise keys.error(key, f'is {value!r}, not a positive integer or "auto"')
    got = trainer.get(name)
    if got is not None and got != value:
        raise keys.error(
            key,
            f"is {value} but {shown} has {name}={got}",
            "transformers refuses the mismatch (integrations/deepspeed.py fill_match); "
            'make them equal or use "auto"',
        )
    return value, keys.origin(key)


def _precision(keys: Keys, resolved: Resolved, trainer: dict[str, Any], shown: str | None) -> None:
    for name in ("bf16", "fp16"):
        section = keys.get(name, (dict,))
        if section is None and name == "bf16":
            section = keys.get("bfloat16", (dict,))
        if not section:
            continue
        enabled = section.get("enabled", False)
        origin = keys.origin(f"{name}.enabled")
        if enabled == "auto":
            enabled = bool(trainer.get(name))
            origin += f' "auto" ← {shown}: {name}'
        if enabled is True:
            resolved.set("precision", "mixed", origin)
            return
        if enabled is not False:
            raise keys.error(f"{name}.enabled", f'is {enabled!r}, not true, false or "auto"')
    if resolved.fields.get("precision") and resolved.fields["precision"].value == "amp":
        resolved.set("precision", "fp32", keys.origin("bf16") + " absent: DeepSpeed trains in FP32")


def _zero(keys: Keys, resolved: Resolved) -> None:
    stage = keys.get("stage", (int,), 0)
    if stage not in (0, 1, 2, 3):
        raise keys.error("stage", f"is {stage}, not 0, 1, 2 or 3", "DeepSpeed refuses it")
    if stage:
        resolved.set("sharding", "zero", keys.origin("stage"))
        resolved.set("zero_stage", stage, keys.origin("stage"))
    for key, level in (("offload_param", "parameters"), ("offload_optimizer", "optimizer")):
        section = keys.get(key, (dict,))
        if section and section.get("device", "none") in ("cpu", "nvme"):
            resolved.set("offload", level, keys.origin(f"{key}.device"))
            if section["device"] == "nvme":
                resolved.note(f"`zero_optimization.{key}.device: nvme` — priced as CPU offload")
            break
    given = sorted(k for k in keys.data if k in ZERO_DEFAULTED and keys.data[k] != "auto")
    if given and stage == 3:
        resolved.note(
            "`zero_optimization."
            + ", ".join(given)
            + "` — ZeRO-3 buckets priced at DeepSpeed's defaults"
        )
    # Every other zero_optimization key (overlap_comm, contiguous_gradients, …) changes
    # communication, not what one step holds; the section is read as a whole.
    keys.taken.update(keys.data)
