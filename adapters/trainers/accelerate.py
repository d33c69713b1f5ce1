"""accelerate's config (``accelerate config`` writes it; accelerate
``src/accelerate/commands/config/config_args.py`` ``ClusterConfig``): the launcher's
``distributed_type`` (MULTI_GPU → DDP, FSDP → FSDP2/FSDP, DEEPSPEED → its plugin),
``num_processes`` (the devices, all machines together), ``mixed_precision`` and the
plugin's own keys (``fsdp_config``, ``deepspeed_config``)."""

from __future__ import annotations

from introspect.adapters.trainers._base import Keys, Resolved

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

#: ClusterConfig / BaseConfig fields (accelerate config_args.py) that do not bear on memory.
KNOWN = frozenset(
    "compute_environment distributed_type mixed_precision use_cpu debug num_processes "
    "machine_rank num_machines gpu_ids main_process_ip main_process_port rdzv_backend "
    "same_network main_training_function enable_cpu_affinity fsdp_config deepspeed_config "
    "megatron_lm_config parallelism_config ipex_config mpirun_config tpu_name tpu_zone "
    "tpu_use_cluster tpu_use_sudo command_file commands tpu_env tpu_vm downcast_bf16 "
    "dynamo_config fp8_config dynamo_backend".split()
)


def looks_like(data: dict[str, Any]) -> bool:
    return "distributed_type" in data and ("compute_environment" in data or "num_processes" in data)


def read(keys: Keys, resolved: Resolved) -> None:
    kind = keys.get("distributed_type", (str,), "NO")
    processes = keys.positive("num_processes")
    if processes is not None:
        resolved.set("devices", processes, keys.origin("num_processes"))
    mixed = keys.get("mixed_precision", (str,), "no")
    if mixed not in ("no", "bf16", "fp16", "fp8"):
        raise keys.error(
            "mixed_precision", f"is {mixed!r}, not no, bf16, fp16 or fp8", "accelerate refuses it"
        )
    if mixed == "fp8":
        resolved.note(f"`mixed_precision: fp8` ({keys.shown}) — not modelled; priced as bf16")
    if kind == "MULTI_GPU":
        resolved.set("sharding", "ddp", keys.origin("distributed_type"))
    elif kind == "FSDP":
        resolved.set("sharding", "fsdp", keys.origin("distributed_type"))
        _fsdp(
            Keys(
                keys.path,
                keys.get("fsdp_config", (dict,), {}),
                "accelerate fsdp_config",
                "fsdp_config.",
            ),
            resolved,
        )
    elif kind == "DEEPSPEED":
        _deepspeed(
            Keys(
                keys.path,
                keys.get("deepspeed_config", (dict,), {}),
                "accelerate deepspeed_config",
                "deepspeed_config.",
            ),
            resolved,
        )
    elif kind not in ("NO", "MULTI_CPU"):
        keys.not_modelled(resolved, "distributed_type")
    if mixed != "no":
        precision = "mixed" if kind in ("FSDP", "DEEPSPEED") else "amp"
        resolved.set("precision", precision, keys.origin("mixed_precision"))
    if keys.get("use_cpu", (bool,), False):
        resolved.set("device", "cpu", keys.origin("use_cpu"))
    keys.not_modelled(resolved, "dynamo_config")
    keys.not_modelled(resolved, "parallelism_config")
    keys.finish(KNOWN, resolved)


def _fsdp(keys: Keys, resolved: Resolved) -> None:
    version = keys.get("fsdp_version", (int,), 1)
    if version != 2:
        resolved.note(
            f"`fsdp_config.fsdp_version: {version}` — FSDP1's flat parameters priced as FSDP2"
        )
    reshard = keys.get("fsdp_reshard_after_forward", (bool, str))
    strategy = keys.get("fsdp_sharding_strategy", (str, int))
    if reshard is False or reshard in ("SHARD_GRAD_OP", "2") or strategy in ("SHARD_GRAD_OP", 2):
        key = "fsdp_reshard_after_forward" if reshard is not None else "fsdp_sharding_strategy"
        resolved.set("reshard_after_forward", False, keys.origin(key))
    if keys.get("fsdp_offload_params", (bool,), False):
        resolved.set("offload", "parameters", keys.origin("fsdp_offload_params"))
    if keys.get("fsdp_activation_checkpointing", (bool,), False):
        resolved.set("activation_checkpointing", True, keys.origin("fsdp_activation_checkpointing"))
    keys.taken.update(keys.data)  # wrap policy, state-dict type, loading: not memory of a step


def _deepspeed(keys: Keys, resolved: Resolved) -> None:
    stage = keys.get("zero_stage", (int,))
    if stage:
        resolved.set("sharding", "zero", keys.origin("zero_stage"))
        resolved.set("zero_stage", stage, keys.origin("zero_stage"))
    for key, level in (
        ("offload_param_device", "parameters"),
        ("offload_optimizer_device", "optimizer"),
    ):
        if keys.get(key, (str,), "none") in ("cpu", "nvme"):
            resolved.set("offload", level, keys.origin(key))
            break
    from introspect.adapters.trainers._base import accumulation

    accumulation(keys, resolved)
    if keys.has("deepspeed_config_file"):
        resolved.note("`deepspeed_config.deepspeed_config_file` — give that JSON in --config too")
    keys.taken.update(keys.data)
