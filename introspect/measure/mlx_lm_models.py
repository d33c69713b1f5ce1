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
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

from introspect import _record
from introspect.errors import IntrospectError
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


def build(raw: dict[str, Any], where: str, dtype=None, overrides: dict | None = None):
    """mlx-lm's Model for ``raw`` with random weights in ``dtype``, evaluated."""
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


def measure(
    raw: dict[str, Any],
    where: str,
    spec: ModelSpec,
    setup,
    *,
    compiled: bool,
    repeats: int = 1,
    phases: bool = False,
    overrides: dict | None = None,
):
    """Build mlx-lm's class for ``raw`` and measure its trainer's step."""
    from introspect.measure import mlx_step

    model = build(raw, where, mlx_step.check_setup(setup), overrides)
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
        )
    notes = (
        f"mlx-lm {type(model).__module__.rsplit('.', 1)[-1]}.Model from {where}",
        "loss: mlx_lm.tuner.trainer.default_loss (logits loop, masked mean)",
    ) + (
        ("checkpointing: mlx-lm's grad_checkpoint (mx.checkpoint per layer)",)
        if setup.activation_checkpointing
        else ()
    )
    return _record.replace(m, notes=notes + m.notes)
