"""Trainers' configs read by content (``--config FILE [FILE …]``): the HF Trainer's
``TrainingArguments``, TRL's ``SFTConfig`` / ``DPOConfig``, axolotl, LLaMA-Factory,
torchtune recipes, mlx-lm's ``lora`` YAML, DeepSpeed JSON and accelerate's config, one
module each. :func:`read` gives a :class:`~._base.Resolved`: the setup fields with the
origin of each value, the model the config names, and the notes.

Several files combine as the launchers combine them: one trainer config, at most one
accelerate config (the launcher: devices, DDP/FSDP/DeepSpeed plugin) and DeepSpeed JSONs,
whose ``"auto"`` values the trainer config resolves; a trainer config's ``deepspeed:``
key names its JSON (read relative to that file, then to the working folder).
"""

from __future__ import annotations

from introspect.adapters.trainers._base import ConfigFileError, Keys, Resolved, load

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

#: Names shown for each kind.
NAMES = {
    "hf": "transformers TrainingArguments",
    "sft": "TRL SFTConfig",
    "dpo": "TRL DPOConfig",
    "axolotl": "axolotl",
    "llama_factory": "LLaMA-Factory",
    "torchtune": "torchtune recipe",
    "mlx_lm": "mlx-lm lora",
    "deepspeed": "DeepSpeed",
    "accelerate": "accelerate",
}
MAIN = ("hf", "sft", "dpo", "axolotl", "llama_factory", "torchtune", "mlx_lm")


def detect(data: dict[str, Any]) -> str | None:
    """The kind of a config by its keys (never by its file name), or None."""
    from introspect.adapters.trainers import (
        _keys,
        accelerate,
        axolotl,
        deepspeed,
        llama_factory,
        mlx_lm,
        torchtune,
    )

    if accelerate.looks_like(data):
        return "accelerate"
    if torchtune.looks_like(data):
        return "torchtune"
    if deepspeed.looks_like(data):
        return "deepspeed"
    if llama_factory.looks_like(data):
        return "llama_factory"
    if axolotl.looks_like(data):
        return "axolotl"
    if mlx_lm.looks_like(data):
        return "mlx_lm"
    keys = set(data)
    hf = _keys.HF_TRAINING_ARGUMENTS
    dpo_own = keys & (_keys.TRL_DPO - _keys.TRL_SFT - hf)
    sft_own = keys & ((_keys.TRL_SFT | _keys.TRL_SFT_LEGACY) - _keys.TRL_DPO - hf)
    if dpo_own and not sft_own:
        return "dpo"
    if sft_own and not dpo_own:
        return "sft"
    if "model_name_or_path" in keys and keys & (_keys.TRL_SCRIPT | _keys.TRL_MODEL_CONFIG):
        return "sft"  # TRL's CLI config (`trl sft --config`): ModelConfig + SFTConfig
    if len(keys & hf) >= max(1, len(keys) // 2) or "output_dir" in keys:
        return "hf"
    return None


def read(paths: list[str]) -> Resolved:
    """Read and combine ``paths`` (see the module docstring)."""
    from introspect import files

    loaded = []
    for path in paths:
        data, _ = load(path)
        kind = detect(data)
        if kind is None:
            sample = ", ".join(list(data)[:3])
            raise ConfigFileError(
                f"--config {files.display(path)}: not a config of a trainer introspect reads "
                f"(keys {sample} …); give a TrainingArguments, TRL, axolotl, LLaMA-Factory, "
                "torchtune, mlx-lm, DeepSpeed or accelerate config"
            )
        loaded.append((path, data, kind))
    mains = [x for x in loaded if x[2] in MAIN]
    if len(mains) > 1:
        raise ConfigFileError(
            f"--config {files.display(mains[1][0])} is a second trainer config (beside "
            f"{files.display(mains[0][0])}); give one trainer config, with its DeepSpeed "
            "or accelerate config"
        )
    for kind in ("accelerate",):
        these = [x for x in loaded if x[2] == kind]
        if len(these) > 1:
            raise ConfigFileError(
                f"--config {files.display(these[1][0])} is a second {kind} config; give one"
            )
    shown = " + ".join(NAMES[x[2]] for x in sorted(loaded, key=lambda x: _ORDER.index(x[2])))
    resolved = Resolved(shown, [files.display(p) for p in paths])
    trainer_args, trainer_shown = None, None
    main = mains[0] if mains else None
    if main:
        path, data, kind = main
        _read_main(path, data, kind, resolved)
        trainer_args, trainer_shown = _trainer_args(data, kind), files.display(path)
    for path, data, kind in loaded:
        if kind == "accelerate":
            from introspect.adapters.trainers import accelerate

            accelerate.read(Keys(path, data, "accelerate's config"), resolved)
    ds = [x for x in loaded if x[2] == "deepspeed"]
    if main and not ds:
        ds = _named_deepspeed(main, resolved)
    if len(ds) > 1:
        raise ConfigFileError(
            f"--config {files.display(ds[1][0])} is a second DeepSpeed config; give one"
        )
    for path, data, _ in ds:
        from introspect.adapters.trainers import deepspeed

        deepspeed.read(Keys(path, data, "DeepSpeed"), resolved, trainer_args, trainer_shown)
        if "DeepSpeed" not in resolved.trainer:
            resolved.trainer += " + DeepSpeed"
    return resolved


def defaults(trainer: str) -> Resolved:
    """The setup ``trainer`` (``hf`` or ``trl``) runs with nothing set — ``--trainer``
    without ``--config``: an empty ``TrainingArguments`` or ``SFTConfig`` read as a file
    would be, so every value carries the trainer's own default and its source line."""
    kind = {"hf": "hf", "trl": "sft", "dpo": "dpo"}[trainer]
    resolved = Resolved(f"{NAMES[kind]} defaults", [f"--trainer {trainer}, no file"])
    resolved.flag = f"--trainer {trainer}"
    _read_main(f"--trainer {trainer}", {}, kind, resolved)
    return resolved


def mlx_lora_defaults(finetune: str) -> Resolved:
    """The setup ``mlx_lm.lora`` runs with nothing set, for ``--framework mlx --finetune
    lora`` without ``--config``: an empty mlx-lm YAML read as a file would be (every value
    with ``CONFIG_DEFAULTS``' line), plus what ``lora_parameters`` defaults beyond the rank
    (:func:`introspect.adapters.trainers.mlx_lm.lora_defaults`). The config's default
    model (Qwen3-0.6B) is not taken: SOURCE names the model."""
    from introspect.adapters.trainers import mlx_lm

    where = f"--framework mlx --finetune {finetune}"
    resolved = Resolved("mlx_lm.lora defaults", [f"{where}, no file"])
    resolved.flag = where
    _read_main(where, {}, "mlx_lm", resolved)
    resolved.model = None
    mlx_lm.lora_defaults(resolved)
    return resolved


_ORDER = (
    "hf",
    "sft",
    "dpo",
    "axolotl",
    "llama_factory",
    "torchtune",
    "mlx_lm",
    "accelerate",
    "deepspeed",
)


def _read_main(path: str, data: dict[str, Any], kind: str, resolved: Resolved) -> None:
    keys = Keys(path, data, NAMES[kind])
    if kind in ("hf", "sft", "dpo"):
        from introspect.adapters.trainers import hf_trainer

        hf_trainer.read(keys, resolved, kind)
    else:
        import importlib

        importlib.import_module(f"introspect.adapters.trainers.{kind}").read(keys, resolved)


def _trainer_args(data: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """The TrainingArguments names a DeepSpeed ``"auto"`` is resolved from."""
    if kind == "axolotl":
        bf16 = data.get("bf16", "auto")
        return {
            "per_device_train_batch_size": data.get("micro_batch_size", 1),
            "gradient_accumulation_steps": data.get("gradient_accumulation_steps", 1),
            "bf16": bf16 is True or (bf16 == "auto" and not data.get("fp16")),
            "fp16": bool(data.get("fp16")),
        }
    if kind in ("hf", "sft", "dpo", "llama_factory"):
        out = {
            k: data[k]
            for k in ("per_device_train_batch_size", "gradient_accumulation_steps", "fp16")
            if k in data
        }
        bf16 = data.get("bf16")
        out["bf16"] = (
            (not data.get("fp16")) if bf16 is None and kind in ("sft", "dpo") else bool(bf16)
        )
        return out
    return None


def _named_deepspeed(main, resolved: Resolved) -> list:
    """The DeepSpeed config a trainer config names in its ``deepspeed`` key: inline, or a
    path read relative to that file's folder, then to the working folder."""
    import os

    from introspect import files

    path, data, kind = main
    value = data.get("deepspeed")
    if value is None:
        return []
    if isinstance(value, dict):
        return [(path, value, "deepspeed")]
    if not isinstance(value, str):
        raise ConfigFileError(
            f"--config {files.display(path)}: deepspeed is {value!r}, "
            "not a path or a mapping; fix the value"
        )
    for candidate in (os.path.join(os.path.dirname(path), value), value):
        if os.path.isfile(candidate):
            ds, _ = load(candidate)
            resolved.files.append(files.display(candidate))
            return [(candidate, ds, "deepspeed")]
    raise ConfigFileError(
        f"--config {files.display(path)}: deepspeed names {value!r}, which is not a file "
        "(beside the config or here); give the DeepSpeed JSON in --config too"
    )
