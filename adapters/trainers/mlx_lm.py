"""mlx-lm's ``lora`` YAML (``mlx_lm.lora --config``; mlx-lm at d78bf58, ``mlx_lm/lora.py``
``CONFIG_DEFAULTS`` lines 45-82 in the venv's mlx-lm 0.32.2): ``model`` (default
Qwen/Qwen3-0.6b), ``fine_tune_type`` (lora), ``batch_size`` (4), ``max_seq_length`` (2048),
``grad_checkpoint`` (off), ``grad_accumulation_steps`` (1), ``optimizer`` (adam),
``learning_rate`` (1e-5), ``lora_parameters`` (rank 8, dropout 0, scale 20), ``num_layers``
(16: adapters on the last 16 blocks; ``model.layers[-max(num_layers, 0):]``, so -1 or 0 is every
block; above the model's layers ``train_model`` refuses it, lora.py:234)."""

from __future__ import annotations

from introspect.adapters.trainers._base import Keys, Resolved, Value, accumulation

MLX_LM = "mlx-lm 0.32.2"
_L = "mlx_lm/lora.py"

#: CONFIG_DEFAULTS' keys and build_parser's other options (lora.py:44-200).
KNOWN = frozenset(
    "model train fine_tune_type optimizer optimizer_config data seed num_layers batch_size "
    "iters val_batches learning_rate steps_per_report steps_per_eval resume_adapter_file "
    "adapter_path save_every test test_batches max_seq_length config grad_checkpoint "
    "grad_accumulation_steps clear_cache_threshold lr_schedule lora_parameters mask_prompt "
    "report_to project_name trust_remote_code hf_dataset wandb epochs".split()
)
OPTIMIZERS = {"adam": "adam", "adamw": "adamw", "sgd": "sgd"}


def looks_like(data: dict) -> bool:
    own = ("fine_tune_type", "lora_parameters", "grad_checkpoint", "iters", "num_layers")
    return any(k in data for k in own) and "_component_" not in str(data.get("model", ""))


def read(keys: Keys, resolved: Resolved) -> None:
    model = keys.get("model", (str,))
    resolved.model = Value(
        model or "Qwen/Qwen3-0.6B", keys.origin("model") if model else f"{MLX_LM} default ({_L}:46)"
    )
    resolved.set("framework", "mlx", f"{MLX_LM}: an MLX step")
    # mlx-lm trains in the checkpoint's own dtype (mlx_lm/utils.py load_model: the weights
    # as stored); mlx-community names its BF16 conversions "-bf16".
    if (model or "").lower().endswith("-bf16"):
        resolved.set("precision", "bf16", keys.origin("model") + " (a -bf16 checkpoint: pure BF16)")
    else:
        resolved.note(
            "mlx-lm trains in the checkpoint's own dtype: give --precision bf16 for a BF16 one"
        )
    resolved.set("implementation", "mlx_lm", f"{MLX_LM}: mlx-lm's own class")
    batch = keys.positive("batch_size")
    resolved.set(
        "batch_size",
        batch or 4,
        keys.origin("batch_size") if batch else f"{MLX_LM} default ({_L}:60)",
    )
    seq = keys.positive("max_seq_length")
    resolved.set(
        "seq_len",
        seq or 2048,
        keys.origin("max_seq_length") if seq else f"{MLX_LM} default ({_L}:71)",
    )
    ckpt = keys.get("grad_checkpoint", (bool,))
    resolved.set(
        "activation_checkpointing",
        bool(ckpt),
        keys.origin("grad_checkpoint") if ckpt is not None else f"{MLX_LM} default ({_L}:73)",
    )
    accumulation(keys, resolved, "grad_accumulation_steps")
    name = keys.get("optimizer", (str,), "adam")
    if name in OPTIMIZERS:
        resolved.set(
            "optimizer",
            OPTIMIZERS[name],
            keys.origin("optimizer") if keys.has("optimizer") else f"{MLX_LM} default ({_L}:49)",
        )
    elif name in ("muon", "adafactor"):
        resolved.refuse(
            "optimizer",
            f"--config {keys.shown}: optimizer {name!r} has no state "
            "model in the closed form; give --optimizer",
        )
    else:
        raise keys.error(
            "optimizer",
            f"is {name!r}, not adam, adamw, muon, sgd or adafactor",
            "mlx-lm refuses it",
        )
    kind = keys.get("fine_tune_type", (str,), "lora")
    if kind not in ("lora", "dora", "full"):
        raise keys.error(
            "fine_tune_type", f"is {kind!r}, not lora, dora or full", "mlx-lm refuses it"
        )
    where = (
        keys.origin("fine_tune_type")
        if keys.has("fine_tune_type")
        else f"{MLX_LM} default ({_L}:48)"
    )
    resolved.set("finetune", kind, where)  # dora: introspect.refined.mlx_dora
    params = keys.get("lora_parameters", (dict,), {})
    sub = Keys(keys.path, params, "mlx-lm lora_parameters", "lora_parameters.")
    if kind != "full":
        rank = sub.positive("rank")
        where = sub.origin("rank") if rank else f"{MLX_LM} default ({_L}:77)"
        resolved.set("lora_rank", rank or 8, where)
        dropout = sub.get("dropout", (float,))
        if dropout:
            resolved.set("lora_dropout", float(dropout), sub.origin("dropout"))
        names = sub.get("keys", (list,))
        if names is not None:
            from introspect.adapters.trainers.common import lora_targets

            if not all(isinstance(n, str) for n in names):
                raise sub.error("keys", f"is {names!r}, not a list of module names")
            short = [n.rsplit(".", 1)[-1] for n in names]
            targets, other = lora_targets(sub, "keys", short)
            resolved.set("lora_targets", targets, sub.origin("keys"))
            if other:
                resolved.note(f"`lora_parameters.keys: {', '.join(other)}` — not modelled")
    layers = keys.get("num_layers", (int,), 16)
    if kind != "full":
        _num_layers(keys, resolved, layers)
    elif layers > 0:
        resolved.note(
            f"`num_layers: {layers}` with fine_tune_type full unfreezes the top {layers} "
            f"blocks only ({_L}:240): not modelled (priced with every block trained)"
        )
    keys.get("clear_cache_threshold", (int,))
    keys.finish(KNOWN, resolved)


def _num_layers(keys: Keys, resolved: Resolved, layers: int) -> None:
    """``num_layers`` onto ``--num-layers``: K > 0 the top K blocks; -1 (or any K ≤ 0,
    ``model.layers[-max(num_layers, 0):]`` in ``mlx_lm/tuner/utils.py``) every block."""
    given = keys.has("num_layers")
    where = keys.origin("num_layers") if given else f"{MLX_LM} default ({_L}:59)"
    if layers > 0:
        resolved.set("num_layers", layers, where)
    else:
        resolved.set("num_layers", None, f"{where}: {layers} is every block")


_T = "mlx_lm/tuner/utils.py"


def lora_defaults(resolved: Resolved) -> None:
    """What ``mlx_lm.lora`` adapts with no ``lora_parameters`` given, beyond the rank
    :func:`read` sets: dropout 0.0 (``CONFIG_DEFAULTS`` line 77), the default keys —
    ``linear_to_lora_layers`` collects every ``nn.Linear``/``nn.QuantizedLinear`` (and
    ``SwitchLinear``, ``nn.Embedding``) inside a block (``tuner/utils.py`` lines 95-111),
    which for a dense block is each of its linears: ``all-linear`` — and the two values
    that hold no memory: ``scale`` 20.0 (a multiplier in ``LoRALinear.__call__``) and
    ``learning_rate`` 1e-5 (line 63)."""
    resolved.set("lora_dropout", 0.0, f"{MLX_LM} default ({_L}:77)")
    resolved.set(
        "lora_targets",
        ("all-linear",),
        f"{MLX_LM} default keys: every nn.Linear of a block ({_T}:95-111)",
    )
    resolved.note(
        f"lora_parameters scale 20.0 ({_L}:77) and learning_rate 1e-5 ({_L}:63), "
        f"{MLX_LM}'s defaults, hold no memory"
    )
