"""``--config FILE [FILE …]`` for profile and fit: a trainer's config read
(:mod:`introspect.adapters.trainers`), its values put where the flags would put them —
a flag given on the command line wins over the file — and the resolved setup printed
first, every value with its origin."""

from __future__ import annotations

import argparse

from introspect.errors import IntrospectError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from introspect.adapters.trainers._base import Resolved
    from introspect.setup import TrainingSetup

#: Setup field → the flags that set it (any one given overrides the file's value).
FLAGS: dict[str, tuple[str, ...]] = {
    "batch_size": ("--batch",),
    "seq_len": ("--seq",),
    "precision": ("--precision",),
    "optimizer": ("--optimizer",),
    "optimizer_impl": ("--optimizer-impl",),
    "attention": ("--attention",),
    "activation_checkpointing": ("--checkpointing",),
    "cross_entropy": ("--cross-entropy",),
    "devices": ("--devices",),
    "zero_stage": ("--zero", "--ddp", "--fsdp"),
    "sharding": ("--zero", "--ddp", "--fsdp"),
    "reshard_after_forward": ("--no-reshard",),
    "framework": ("--framework",),
    "device": ("--device",),
    "implementation": ("--impl",),
    "num_layers": ("--num-layers",),  # before finetune: a refusal naming it is its own
    "finetune": ("--finetune", "--lora-rank", "--lora-targets", "--num-layers"),
    "lora_rank": ("--lora-rank",),
    "lora_targets": ("--lora-targets",),
    "lora_dropout": ("--lora-dropout",),
    "base_quant": ("--base-quant",),
    "group_size": ("--group-size",),
    "double_quant": ("--no-double-quant",),
    "offload": ("--offload",),
    "optimizer_in_backward": ("--optimizer-in-backward",),
    "grad_accum": ("--grad-accum",),
    "offload_activations": ("--offload-activations",),
    "adapter_dtype": ("--adapter-dtype",),
    "trainer": ("--trainer",),
    "dpo_reference": ("--dpo-reference",),
    "packed_sequences": ("--packed-sequences",),
}
#: The fields the resolved setup prints, in order (LoRA's only under LoRA).
SHOWN = (
    "batch_size", "seq_len", "precision", "optimizer", "optimizer_impl", "attention",
    "activation_checkpointing", "cross_entropy", "trainer", "implementation", "framework",
    "device",
    "devices", "sharding", "zero_stage", "offload", "optimizer_in_backward", "finetune",
    "grad_accum", "offload_activations",
)  # fmt: skip
LORA = ("lora_rank", "lora_targets", "lora_dropout", "num_layers", "base_quant", "double_quant")
LORA += ("adapter_dtype", "group_size")


def _set(args: argparse.Namespace, field: str, value: Any) -> None:
    """Put a file's value where its flag would have put it."""
    if field == "batch_size":
        args.batch = [value] if isinstance(args.batch, list) else value
    elif field == "seq_len":
        args.seq = [value] if isinstance(args.seq, list) else value
    elif field == "activation_checkpointing":
        args.checkpointing = value
    elif field == "zero_stage":
        if not getattr(args, "fsdp", False):
            args.zero = value
    elif field == "sharding":
        args.ddp = value == "ddp"
        args.fsdp = value == "fsdp"
        if value in ("ddp", "fsdp"):
            args.zero = 0
    elif field == "reshard_after_forward":
        args.no_reshard = not value
    elif field == "implementation":
        args.impl = value
    elif field == "double_quant":
        args.no_double_quant = not value
    elif field == "lora_targets":
        args.lora_targets = list(value)
    else:
        setattr(args, field, value)


def _dest(field: str) -> str:
    return {"batch_size": "batch", "seq_len": "seq", "implementation": "impl"}.get(field, field)


def apply(
    args: argparse.Namespace, shape_model: bool = False, mlx_defaults: bool = True
) -> Resolved | None:
    """Read ``args.config`` (when given) into ``args``: each field the file sets and no
    flag overrides; the model as SOURCE when none is given (``shape_model``: measure's
    shape flags describe it, when neither SOURCE nor the file names one). Returns the
    resolved config (None without --config). With ``mlx_defaults``, ``--framework mlx
    --finetune lora`` and neither --config nor --trainer reads as ``mlx_lm.lora`` run with
    nothing set (:func:`mlx_lora`)."""
    paths = getattr(args, "config", None)
    trainer = getattr(args, "trainer", "loop")
    mlx = not paths and trainer == "loop" and mlx_defaults and mlx_lora(args)
    if not paths and trainer == "loop" and not mlx:
        return None
    from introspect.adapters import trainers
    from introspect.commands._args import given_setup_flags

    if mlx:
        resolved = trainers.mlx_lora_defaults(args.finetune)
    else:
        # --trainer hf|trl alone: the trainer's own defaults, as an empty config of it reads
        resolved = trainers.read(paths) if paths else trainers.defaults(trainer)
    given = set(given_setup_flags(args))
    resolved.overridden = {
        field: f"flag {hit[0]}"
        for field, flags in FLAGS.items()
        if (hit := [f for f in flags if f in given])
    }
    for field, value in resolved.fields.items():
        flags = FLAGS.get(field, ())
        if any(f in given for f in flags):
            continue
        if field == "optimizer_impl" and "--optimizer" in given:
            # one key (the Trainer's optim name) set both; the flag replaced the optimizer
            resolved.note(
                f"`optimizer_impl` {value.value} from {value.origin} went with the optimizer "
                "--optimizer replaced: torch's own choice for it instead"
            )
            resolved.overridden[field] = "with flag --optimizer"
            continue
        if field in ("sharding", "zero_stage", "reshard_after_forward") and not hasattr(
            args, "ddp"
        ):
            continue
        if not hasattr(args, _dest(field)) and field not in (
            "activation_checkpointing", "zero_stage", "sharding", "reshard_after_forward",
            "double_quant",
        ):  # fmt: skip
            resolved.note(
                f"`{field}` from {value.origin} — no flag here to carry it: not modelled yet"
            )
            continue
        _set(args, field, value.value)
    for field, line in resolved.unsupported.items():
        if not any(f in given for f in FLAGS.get(field, ())):
            raise IntrospectError(
                line if line.startswith(resolved.flag) else f"{resolved.flag} {line}"
            )
    sharded = resolved.fields.get("sharding")
    if (
        sharded
        and sharded.value != "none"
        and "devices" not in resolved.fields
        and "--devices" not in given
        and not any(f in given for f in FLAGS["sharding"])
    ):
        stage = resolved.fields.get("zero_stage")
        if sharded.value == "zero" and stage and _one_device_deepspeed(stage.value):
            resolved.note(
                f"{sharded.origin}: the config does not count the processes; priced on one "
                "device, as DeepSpeed runs it (give --devices D for D)"
            )
            return _model(args, resolved, shape_model)
        raise IntrospectError(
            f"--config: {sharded.origin} shards over devices the config does not count; "
            "give --devices D (the processes the launcher starts)"
        )
    return _model(args, resolved, shape_model)


def mlx_lora(args: argparse.Namespace) -> bool:
    """Whether the flags ask for mlx-lm's LoRA (``--framework mlx`` or ``mlx-compiled``
    with ``--finetune lora``): Apple-silicon users run it as ``mlx_lm.lora``, so its
    defaults (rank 8, the top 16 blocks, batch 4, 2048 tokens) are the setup's, each flag
    given winning as over a config file."""
    framework = getattr(args, "framework", None) or ""
    return framework.startswith("mlx") and getattr(args, "finetune", None) == "lora"


def _one_device_deepspeed(stage: int) -> bool:
    """Whether the setup prices DeepSpeed ZeRO ``stage`` on one device (its flags allow
    ``--zero 2``/``3`` with ``--devices 1``)."""
    from introspect import applies

    try:
        applies.contradictions(
            precision="fp32", weights_dtype=None, zero_stage=stage, devices=1, sharding="none"
        )
    except (ValueError, IntrospectError):
        return False
    return True


def _model(args: argparse.Namespace, resolved: Resolved, shape_model: bool = False) -> Resolved:
    """SOURCE, or the model the config names (or measure's shape flags)."""
    if not args.source and resolved.model is None and shape_model:
        from introspect.adapters.trainers._base import Value

        resolved.model_used = Value("shape flags", "--layers, --d-emb, --heads, --vocab")
        return resolved
    if not args.source:
        if resolved.model is None and not getattr(args, "config", None):
            raise IntrospectError(
                f"SOURCE is missing: {resolved.flag} names no model; give the model "
                "as SOURCE (a Hub id, a local folder or config.json)"
            )
        if resolved.model is None:
            raise IntrospectError(
                f"--config {', '.join(resolved.files)} names no model ({resolved.trainer} "
                "carries none); give the model as SOURCE"
            )
        args.source = resolved.model.value
        resolved.model_used = resolved.model
    else:
        from introspect.adapters.trainers._base import Value

        if resolved.model is not None:
            resolved.note(
                f"model {resolved.model.value} ({resolved.model.origin}) — SOURCE given instead"
            )
        resolved.model_used = Value(args.source, "SOURCE")
    return resolved


def origin_of(resolved: Resolved, field: str) -> str:
    if field in resolved.overridden:
        return resolved.overridden[field]
    if field in resolved.fields:
        return resolved.fields[field].origin
    if field == "zero_stage" and "sharding" in resolved.fields:
        return f"with the sharding ({resolved.fields['sharding'].origin})"
    return "introspect default"


def setup_fields(resolved: Resolved, setup: TrainingSetup) -> list[tuple[str, Any, str]]:
    """(field, value, origin) for each field the resolved setup shows."""
    from introspect import _record

    names = set(_record.field_names(setup))
    shown = list(SHOWN) + (list(LORA) if setup.finetune != "full" else [])
    shown += ["dpo_reference"] if setup.trainer == "dpo" else []
    shown += ["packed_sequences"] if setup.packed_sequences else []
    if setup.finetune != "qlora":
        shown = [f for f in shown if f != "double_quant"]
    if not setup.base_quant.startswith("affine"):
        shown = [f for f in shown if f != "group_size"]
    out = []
    for field in shown:
        if field not in names:
            continue
        value = getattr(setup, field)
        if field == "optimizer_impl":
            value = setup.resolved_optimizer_impl if value == "auto" else value
        if field == "device":
            value = setup.resolved_device
        origin = origin_of(resolved, field)
        if origin == "introspect default" and getattr(setup, f"{field}_origin", ""):
            origin = f"introspect default: {getattr(setup, f'{field}_origin')}"
        out.append((field, value, origin))
    return out


def render(resolved: Resolved, setup: TrainingSetup) -> str:
    """The resolved setup first: the trainer and files, the model, each value and its
    origin, then the notes (memory-relevant keys not modelled)."""
    lines = [f"config: {resolved.trainer} ({', '.join(resolved.files)})"]
    lines.append(f"  {'model':<26} {resolved.model_used.value:<24} ← {resolved.model_used.origin}")
    for field, value, origin in setup_fields(resolved, setup):
        text = ",".join(value) if isinstance(value, tuple) else str(value)
        if field == "num_layers" and value is None:
            text = "all"  # every block
        lines.append(f"  {field:<26} {text:<24} ← {origin}")
    if resolved.ignored:
        lines.append(
            f"  ({resolved.ignored} more keys read: paths, logging, schedules — no memory)"
        )
    lines += [f"  note: {n}" for n in resolved.notes]
    return "\n".join(lines)


def to_json(resolved: Resolved, setup: TrainingSetup) -> dict[str, Any]:
    """``config``: the trainer, files, model and ``setup`` {field: {value, origin}}."""
    return {
        "trainer": resolved.trainer,
        "files": list(resolved.files),
        "model": resolved.model_used.to_json(),
        "setup": {
            field: {"value": list(v) if isinstance(v, tuple) else v, "origin": origin}
            for field, v, origin in setup_fields(resolved, setup)
        },
        "notes": list(resolved.notes),
        "keys_without_memory": resolved.ignored,
    }


#: Fields a config may set that the rest of its setup can make inapplicable (accumulation
#: under a sharding, …): the file's value becomes a note and the setup is priced without
#: it, rather than the whole config refused for a key the user did not type. Their
#: neutral values.
SOFT = {
    "grad_accum": 1,
    "offload_activations": False,
    "lora_dropout": 0.0,
    "adapter_dtype": "fp32",
    "optimizer_in_backward": False,
    "num_layers": None,
}


def check_model(resolved: Resolved | None, spec, setup: TrainingSetup) -> TrainingSetup:
    """Checks of the file's values that need the model: ``--num-layers`` above its
    layers (mlx-lm refuses it too, ``mlx_lm/lora.py:234``), and peft's
    ``layers_to_transform`` indices that are not the model's top blocks (only those are
    modelled), each naming the key that set it. Returns the setup, with mlx_lm.lora's
    *default* ``num_layers`` 16 above a shallower model's L read as every block (a note
    says mlx_lm.lora itself would refuse it)."""
    if resolved is None:
        return setup
    L = spec.num_hidden_layers
    k = setup.num_layers
    if k is not None and k > L and "num_layers" not in resolved.overridden:
        value = resolved.fields.get("num_layers")
        if value is not None and resolved.flag.startswith("--framework"):
            # mlx_lm.lora's default 16 on a shallower model: it would refuse it too
            resolved.note(
                f"num_layers {k} ({value.origin}) is above {spec.source or spec.model_type}'s "
                f"{L} layers, which mlx_lm.lora refuses (mlx_lm/lora.py:234): priced with "
                f"adapters on all {L} blocks, as --num-layers {L} runs"
            )
            resolved.overridden["num_layers"] = f"every block: the default {k} is above {L}"
            return setup.replace(num_layers=None)
        if value is not None:
            raise IntrospectError(
                f"--num-layers {k}: {spec.source or spec.model_type} has {L} layers "
                f"(set by {resolved.flag} {value.origin}; mlx-lm refuses it too); give "
                f"--num-layers {L} or less"
            )
    if resolved.layer_indices is None or "num_layers" in resolved.overridden:
        return setup
    indices, where = resolved.layer_indices
    top = list(range(L - len(indices), L))
    if indices != top:
        raise IntrospectError(
            f"--config {where}: {indices} are not the top {len(indices)} blocks of "
            f"{spec.source or spec.model_type} ({L} layers: {top[0]}..{L - 1}); only "
            "adapters on the top blocks are modelled: give --num-layers K"
        )
    return setup


def build(args: argparse.Namespace, resolved: Resolved | None, make):
    """``make(args)`` (the command's setup); under --config a refusal of a :data:`SOFT`
    field the file set becomes a note and that field its neutral value; any other
    refusal names the key that set it (:func:`explain`)."""
    for _ in range(len(SOFT) + 1):
        try:
            return make(args)
        except (ValueError, IntrospectError) as err:
            if resolved is None:
                raise
            field = _field_named(str(err), resolved)
            if field not in SOFT or field in resolved.overridden:
                raise IntrospectError(explain(str(err), resolved)) from None
            value = resolved.fields[field]
            resolved.note(
                f"{value.origin} = {value.value} is not modelled with the rest of this setup, "
                f"so it is priced without it (as the flag would be refused: {err})"
            )
            resolved.overridden[field] = f"neutral: {value.origin} not modelled here (note)"
            _set(args, field, SOFT[field])
    raise AssertionError("unreachable: each SOFT field is dropped at most once")


def _field_named(message: str, resolved: Resolved) -> str | None:
    """The field the config set whose flag a refusal names first."""
    for field, flags in FLAGS.items():
        if field not in resolved.fields or field in resolved.overridden:
            continue
        if any(f" {flag} " in f" {message} " for flag in flags):
            return field
    return None


def explain(message: str, resolved: Resolved | None) -> str:
    """A refusal of the setup that names a flag the user did not type but the config set:
    the line says which key of which file set it."""
    field = _field_named(message, resolved) if resolved is not None else None
    if field is None:
        return message
    by = resolved.flag if resolved.flag == "--config" else f"{resolved.flag}:"
    return f"{message} (set by {by} {resolved.fields[field].origin})"


def checkpoint_quant(resolved: Resolved | None, model, setup: TrainingSetup) -> TrainingSetup:
    """An MLX LoRA setup over a checkpoint whose config.json carries mlx-lm's
    ``quantization`` block (``{"group_size": 64, "bits": 4}``, what ``mlx_lm.convert -q``
    writes and every mlx-community 4-/8-bit model holds): the base is priced as stored,
    ``--base-quant affine<bits> --group-size <group_size>``, unless ``--base-quant`` says
    otherwise. The block's values were checked when the config was read
    (:mod:`introspect.adapters.quantized`: bits and group size mx.quantize takes); widths
    other than 4 and 8, and the mx/nv FP modes, are not modelled — one line."""
    if not (setup.framework.startswith("mlx") and setup.finetune == "lora"):
        return setup
    if setup.base_quant != "auto":
        return setup
    config = _config_of(model)
    if not isinstance((config or {}).get("quantization"), dict):
        return setup
    from introspect.adapters.quantized import config_quant

    where = model.extra.get("config_path") or model.location
    quant = config_quant(config, str(where))
    bits, group, mode = quant.mlx[""]
    if mode != "affine" or bits not in (4, 8):
        raise IntrospectError(
            f"quantization in {where}: {mode} {bits}-bit is not modelled (affine 4- and "
            "8-bit are); give --base-quant affine4 or affine8 to price it as one of those"
        )
    others = sorted(p for p, v in quant.mlx.items() if p and v != (bits, group, mode))
    if resolved is not None:
        origin = f"{where}: quantization bits {bits}"
        resolved.set("base_quant", f"affine{bits}", origin)
        resolved.set("group_size", group, f"{where}: quantization group_size {group}")
        if others:
            resolved.note(
                f"quantization in {where} sets {len(others)} modules apart ({others[0]}, …): "
                f"not modelled, priced at affine {bits}-bit, groups of {group}"
            )
    return setup.replace(base_quant=f"affine{bits}", group_size=group)


def _config_of(model) -> dict | None:
    """The config.json a resolved model was read from (a file, a checkpoint folder or a
    bundled model's folder), or None."""
    import json
    from pathlib import Path

    # a config file or a checkpoint folder's (a Hub model's config_path is inside the repo)
    path = model.extra.get("config_path") if model.origin in ("config", "checkpoint") else None
    if not path and model.origin == "bundled" and model.extra.get("folder"):
        from introspect.adapters import bundled

        path = bundled._data() / model.extra["folder"] / "config.json"
    if not path or not Path(path).is_file():
        return None
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
