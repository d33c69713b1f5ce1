"""mlx-lm's own class for any ``model_type`` it supports, at the config's shape, trained
with mlx-lm's trainer loss.

    Model, ModelArgs = mlx_lm.utils._get_classes(config)     # mlx_lm/utils.py
    model = Model(ModelArgs.from_dict(config))                # mlx_lm/models/base.py
    loss = mlx_lm.tuner.trainer.default_loss                  # mlx_lm/tuner/trainer.py

``default_loss(model, batch, lengths)`` takes the (B, T+1) token batch, runs the model on
``batch[:, :-1]``, masks the cross-entropy by ``lengths`` and averages over the unmasked
tokens; the step is ``nn.value_and_grad(model, loss)`` and ``optimizer.update``, compiled
or not (:mod:`introspect.measure.mlx_step`). ``--checkpointing`` is the trainer's
``grad_checkpoint(model.layers[0])``, which wraps the layer class's ``__call__`` in
``mx.checkpoint``; it patches the class, so the original ``__call__`` is put back after
the measurement. mlx-lm's attention is always ``mx.fast.scaled_dot_product_attention``.

``--finetune lora`` is ``mlx_lm.lora``'s flow (``train_model`` in ``mlx_lm/lora.py``)::

    model.freeze()
    linear_to_lora_layers(model, num_layers, {"rank": r, "scale": 20.0,
                                              "dropout": p, "keys": keys})

with ``num_layers`` = ``--num-layers K`` (the top K blocks: ``model.layers[-max(num_layers,
0):]``), -1 without it (every block). Each
targeted ``nn.Linear`` becomes ``LoRALinear`` (``mlx_lm/tuner/lora.py``): the frozen
linear, ``lora_a`` (d_in × r, uniform) and ``lora_b`` (r × d_out, zeros), both FP32
whatever the base's dtype, and ``y + (scale · (dropout(x) @ lora_a) @ lora_b).astype(x.dtype)``.
``value_and_grad`` differentiates the trainable parameters only and the optimizer is
initialised on them, so gradients and Adam's state exist for the adapters alone.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

from introspect import _record
from introspect.errors import IntrospectError
from introspect.measure.supported import MLX_STEPS
from introspect.spec import ModelSpec


def source_config(source: str | None, spec: ModelSpec) -> tuple[dict[str, Any], str]:
    """The raw config for ``source`` (as for transformers' classes)."""
    from introspect.measure.hf_models import source_config as raw

    return raw(source, spec)


def llama_source(spec: ModelSpec) -> tuple[dict[str, Any], str]:
    return source_config(None, spec)


def _mlx_lm():
    try:
        import mlx_lm.utils
    except ImportError as err:
        raise IntrospectError(
            "--impl mlx-lm needs mlx-lm: pip install 'introspect[compare]'"
        ) from err
    return mlx_lm


def build(
    raw: dict[str, Any],
    where: str,
    dtype=None,
    overrides: dict | None = None,
    *,
    evaluate: bool = True,
):
    """mlx-lm's Model for ``raw`` with random weights in ``dtype``, evaluated (left lazy,
    nothing allocated, for a dry run with ``evaluate=False``)."""
    import mlx.core as mx

    mlx_lm = _mlx_lm()
    config = dict(raw) | dict(overrides or {})
    if not isinstance(config.get("model_type"), str):
        raise IntrospectError(f"{where}: no model_type; --impl mlx-lm needs one")
    try:
        model_cls, args_cls = mlx_lm.utils._get_classes(config)
    except ValueError as err:
        raise IntrospectError(
            f"{where}: mlx-lm {_version()} does not support model_type "
            f"{config['model_type']!r}; use --impl reference"
        ) from err
    try:
        model = model_cls(args_cls.from_dict(config))
    except (TypeError, ValueError, KeyError, AttributeError) as err:
        raise IntrospectError(
            f"{where}: mlx-lm's {config['model_type']} model rejects this config: "
            f"{str(err).splitlines()[0] if str(err) else type(err).__name__}"
        ) from err
    mx.random.seed(0)
    if dtype is not None and dtype != mx.float32:
        model.set_dtype(dtype)
    if evaluate:
        mx.eval(model.parameters())
    model.train()
    return model


def _version() -> str:
    import importlib.metadata

    return importlib.metadata.version("mlx-lm")


def trainer_loss(model, batch, lengths):
    """mlx-lm's ``default_loss``, its value alone (the trainer discards ``ntoks`` from the
    gradient; ``value_and_grad`` differentiates the first output either way)."""
    from mlx_lm.tuner.trainer import default_loss

    return default_loss(model, batch, lengths)[0]


def trainer_batch(vocab: int, setup):
    """A (B, T+1) token batch and its (offset, length) rows, as ``iterate_batches`` makes
    them: every token counts."""
    import mlx.core as mx

    tokens = mx.random.randint(
        0, vocab, (setup.batch_size, setup.seq_len + 1), key=mx.random.key(0)
    )
    lengths = mx.array([[0, setup.seq_len]] * setup.batch_size)
    return tokens, lengths


@contextmanager
def checkpointed(model, enabled: bool):
    """The trainer's ``grad_checkpoint(model.layers[0])`` for the block, undone on exit."""
    if not enabled:
        yield
        return
    from mlx_lm.tuner.trainer import grad_checkpoint

    layers = getattr(model, "layers", None) or getattr(
        getattr(model, "model", None), "layers", None
    )
    if not layers:
        raise IntrospectError("--checkpointing: this mlx-lm model has no .layers to checkpoint")
    cls = type(layers[0])
    original = cls.__call__
    grad_checkpoint(layers[0])
    try:
        yield
    finally:
        cls.__call__ = original


#: ``lora_parameters`` of ``mlx_lm/lora.py``'s ``CONFIG_DEFAULTS``; the scale multiplies
#: the adapter's output and changes no buffer.
LORA_SCALE = 20.0


def lora_keys(model, targets: tuple[str, ...]) -> tuple[str, ...] | None:
    """mlx-lm's ``keys`` for our ``lora_targets``: ``all-linear`` is mlx-lm's default
    (``keys`` unset: every ``nn.Linear``, ``SwitchLinear`` and ``nn.Embedding`` inside each
    block, ``linear_to_lora_layers`` in ``mlx_lm/tuner/utils.py``), which is peft's
    all-linear for a transformer block; a named target is every path in the first block
    whose last name it is (``self_attn.q_proj`` for ``q_proj``). A name the block lacks
    is an IntrospectError naming the block's linears."""
    import mlx.nn as nn

    if "all-linear" in targets:
        return None
    paths = [p for p, m in _layers(model)[0].named_modules() if isinstance(m, nn.Linear)]
    leaves = {p.rsplit(".", 1)[-1] for p in paths}
    missing = [t for t in targets if t not in leaves]
    if missing:
        raise IntrospectError(
            f"--lora-targets: mlx-lm's {type(model).__module__.rsplit('.', 1)[-1]} block has "
            f"no {', '.join(missing)}; its linears are {', '.join(sorted(leaves))} "
            "(or all-linear)"
        )
    return tuple(p for p in paths if p.rsplit(".", 1)[-1] in targets)


def _layers(model):
    layers = getattr(model, "layers", None)
    if not layers:
        raise IntrospectError("--finetune lora: this mlx-lm model has no .layers")
    return layers


def to_lora(model, setup) -> str:
    """``mlx_lm.lora``'s LoRA conversion of ``model`` for ``setup`` (module docstring),
    in place; the note saying which keys were converted."""
    from mlx_lm.tuner.utils import linear_to_lora_layers

    if setup.finetune == "qlora":
        raise IntrospectError(
            "--finetune qlora is not measured on MLX (mlx-lm's QLoRA is LoRA over a model "
            "quantized with mlx_lm.convert); use --finetune lora"
        )
    if setup.train_embeddings:
        raise IntrospectError(
            "--train-embeddings is not part of mlx-lm's LoRA; leave it out on MLX"
        )
    keys = lora_keys(model, setup.lora_targets)
    config = {"rank": setup.lora_rank, "scale": LORA_SCALE, "dropout": setup.lora_dropout}
    if keys is not None:
        config["keys"] = keys
    model.freeze()
    num_layers = -1 if setup.num_layers is None else setup.num_layers
    dora = setup.finetune == "dora"  # fine_tune_type dora: DoRALinear (mlx_lm/tuner/dora.py)
    try:
        linear_to_lora_layers(model, num_layers, config, use_dora=dora)
    except ValueError as err:  # mlx-lm's own refusal (SwitchLinear under DoRA)
        raise IntrospectError(f"--finetune {setup.finetune}: mlx-lm refuses it: {err}") from err
    which = (
        "mlx-lm's default keys (every nn.Linear of each block)"
        if keys is None
        else "keys " + ", ".join(keys)
    )
    blocks = len(_layers(model))
    where = (
        f"all {blocks} blocks (num_layers -1)"
        if num_layers < 0 or num_layers >= blocks
        else f"the top {num_layers} of {blocks} blocks (num_layers {num_layers})"
    )
    return (
        f"{'DoRA' if dora else 'LoRA'}: mlx_lm.tuner.utils.linear_to_lora_layers on {where}, "
        f"rank {setup.lora_rank}, dropout {setup.lora_dropout}, {which}"
        + (", use_dora=True" if dora else "")
        + "; base frozen, FP32 adapters"
    )


def tie_as_checkpoint(model, model_type: str, tied: bool) -> None:
    """Tie the output head as loading the published checkpoint would: mlx-lm's Gemma 3
    (``mlx_lm/models/gemma3_text.py``) builds an ``lm_head`` and drops it in
    ``sanitize`` when the checkpoint has none, which a tied one does not; a model built
    from its config alone keeps it."""
    if tied and model_type == "gemma3_text" and "lm_head" in model:
        model.sanitize({})


def measure(
    raw: dict[str, Any],
    where: str,
    spec: ModelSpec,
    setup,
    *,
    compiled: bool,
    repeats: int = MLX_STEPS,
    phases: bool = False,
    overrides: dict | None = None,
):
    """Build mlx-lm's class for ``raw`` and measure its trainer's step (with mlx-lm's
    LoRA under ``--finetune lora``)."""
    import mlx.core as mx

    from introspect.measure import mlx_step

    model = build(raw, where, mlx_step.check_setup(setup), overrides)
    tie_as_checkpoint(model, spec.model_type, spec.tie_word_embeddings)  # the estimate's model
    lora = (to_lora(model, setup),) if setup.finetune != "full" else ()
    mx.eval(model.parameters())
    vocab = getattr(model.args, "vocab_size", None) or spec.vocab_size
    with checkpointed(model, setup.activation_checkpointing):
        m = mlx_step.measure_step(
            model,
            setup,
            vocab=vocab,
            compiled=compiled,
            implementation="mlx_lm",
            loss=trainer_loss,
            repeats=repeats,
            phases=phases,
            inputs=trainer_batch(vocab, setup),
            random_state=bool(lora),
        )
    notes = (
        (
            f"mlx-lm {type(model).__module__.rsplit('.', 1)[-1]}.Model from {where}",
            "loss: mlx_lm.tuner.trainer.default_loss (logits loop, masked mean)",
        )
        + lora
        + (
            ("checkpointing: mlx-lm's grad_checkpoint (mx.checkpoint per layer)",)
            if setup.activation_checkpointing
            else ()
        )
    )
    return _record.replace(m, notes=notes + m.notes)
