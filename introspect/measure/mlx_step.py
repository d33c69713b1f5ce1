"""One MLX training step with Adam, compiled as the seed's (mlx-lm style) or not, and its
measured memory.

    loss_and_grad = nn.value_and_grad(model, loss_fn)
    state = [model.state, optimizer.state]

    @partial(mx.compile, inputs=state, outputs=state)     # only when compiled
    def step(x, y):
        loss, grads = loss_and_grad(model, x, y)
        optimizer.update(model, grads)
        return loss

    mx.eval(step(x, y), state)

The peak is ``mx.get_peak_memory()``: read after a warm-up step (so Adam's m and v exist
and the compiled graph is built), with ``mx.reset_peak_memory()`` just before each
measured step, the largest of ``MLX_STEPS`` steps by default. ``mx.get_active_memory()``
and ``mx.get_cache_memory()`` are read after them. MLX cannot say which buffers are
gradients or activations, so the split is parameters and optimizer state (counted from
their trees) and the step's working memory (gradients, activations and temporaries
together) as ``other``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
from mlx.utils import tree_flatten

from introspect.bounds import MAX_REPEATS
from introspect.measure.record import Measurement, versions
from introspect.measure.supported import MLX_STEPS, measured_dtype
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

MLX_DTYPES = {"fp32": mx.float32, "bf16": mx.bfloat16, "fp16": mx.float16}


def check_setup(setup: TrainingSetup):
    """The MLX dtype of a measured step (see :func:`measured_dtype`)."""
    return MLX_DTYPES[measured_dtype(setup, "MLX")]


def make_optimizer(setup: TrainingSetup) -> optim.Optimizer:
    if setup.optimizer == "adam":
        return optim.Adam(learning_rate=1e-4)
    if setup.optimizer == "adamw":
        return optim.AdamW(learning_rate=1e-4)
    return optim.SGD(learning_rate=1e-4, momentum=0.9 if setup.optimizer != "sgd" else 0.0)


def loss_fn(model: nn.Module, input_ids: mx.array, targets: mx.array) -> mx.array:
    """Causal-LM cross-entropy, mean over tokens (mlx-lm's ``default_loss`` without the
    padding mask)."""
    logits = model(input_ids)
    return nn.losses.cross_entropy(logits, targets).astype(mx.float32).mean()


def tree_bytes(tree) -> int:
    return sum(v.nbytes for _, v in tree_flatten(tree) if isinstance(v, mx.array))


def make_step(
    model: nn.Module,
    optimizer: optim.Optimizer,
    compiled: bool,
    loss=loss_fn,
    random_state: bool = False,
):
    """The step; compiled, its state is the model's and the optimizer's, and with
    ``random_state`` MLX's random state too (mlx-lm's trainer, ``mlx_lm/tuner/trainer.py``,
    compiles ``[model.state, optimizer.state, mx.random.state]``: LoRA's dropout draws
    inside the graph)."""
    loss_and_grad = nn.value_and_grad(model, loss)

    def step(input_ids, targets):
        value, grads = loss_and_grad(model, input_ids, targets)
        optimizer.update(model, grads)
        return value

    if compiled:
        state = [model.state, optimizer.state] + ([mx.random.state] if random_state else [])
        return partial(mx.compile, inputs=state, outputs=state)(step)
    return step


def batch(vocab: int, setup: TrainingSetup) -> tuple[mx.array, mx.array]:
    tokens = mx.random.randint(
        0, vocab, (setup.batch_size, setup.seq_len + 1), key=mx.random.key(0)
    )
    return tokens[:, :-1], tokens[:, 1:]


def measure_step(
    model: nn.Module,
    setup: TrainingSetup,
    *,
    vocab: int,
    compiled: bool,
    implementation: str = "reference",
    loss: Callable = loss_fn,
    repeats: int = MLX_STEPS,
    phases: bool = False,
    inputs: tuple | None = None,
    random_state: bool = False,
) -> Measurement:
    """Warm up, then measure ``repeats`` steps of ``model``, each with its own peak
    reset, reporting the largest peak (a run's peak is its largest step's; MLX's moves
    by a few percent from step to step, see :data:`MLX_STEPS`) and the fastest time.

    With ``phases``, the loss and gradients are also evaluated alone (compiled likewise)
    to place the peak: a step peak above that one means the optimizer update raised it.
    ``inputs`` replaces the (input_ids, targets) pair ``loss`` is called with (mlx-lm's
    ``default_loss`` takes the whole batch and its lengths). ``random_state``: see
    :func:`make_step`. The optimizer holds state for the trainable parameters only (a
    LoRA model's adapters): ``trainable_params`` counts those, ``n_params`` all."""
    check_setup(setup)
    if not 1 <= repeats <= MAX_REPEATS:  # --repeats' bound, for callers past the CLI too
        raise ValueError(f"repeats={repeats}: measure 1 to {MAX_REPEATS} steps")
    optimizer = make_optimizer(setup)
    optimizer.init(model.trainable_parameters())
    step = make_step(model, optimizer, compiled, loss, random_state)
    input_ids, targets = inputs or batch(vocab, setup)
    mx.eval(input_ids, targets)
    state = [model.state, optimizer.state]
    mx.eval(step(input_ids, targets), state)  # warm-up: Adam state exists, graph compiled
    mx.synchronize()
    samples, times = [], []
    for _ in range(repeats):
        mx.reset_peak_memory()
        start = time.perf_counter()
        mx.eval(step(input_ids, targets), state)
        mx.synchronize()
        times.append(time.perf_counter() - start)
        samples.append(mx.get_peak_memory())
    peak, seconds = max(samples), min(times)
    params = tree_bytes(model.parameters())
    opt_state = tree_bytes(optimizer.state)
    n_params = sum(v.size for _, v in tree_flatten(model.parameters()))
    trainable = sum(v.size for _, v in tree_flatten(model.trainable_parameters()))
    categories = {
        "parameters": params,
        "optimizer_state": opt_state,
        "other": peak - params - opt_state,
    }
    active, cache = mx.get_active_memory(), mx.get_cache_memory()
    phase, phase_peaks = None, {}
    if phases:
        grads_peak = gradient_peak(model, loss, input_ids, targets, compiled, random_state)
        phase_peaks = {"loss_and_gradients": grads_peak, "step": peak}
        phase = "optimizer" if peak > grads_peak * (1 + PHASE_MARGIN) else "forward/backward"
    # Freed buffers stay in MLX's cache; give them back before the next measurement.
    mx.clear_cache()
    return Measurement(
        peak_bytes=peak,
        categories=categories,
        active_bytes=active,
        cache_bytes=cache,
        peak_phase=phase,
        phase_peaks=phase_peaks,
        step_seconds=seconds,
        tokens_per_second=setup.tokens / seconds,
        backend="mlx",
        device=str(mx.default_device()).replace("Device(", "").rstrip(")").split(",")[0],
        compiled=compiled,
        implementation=implementation,
        n_params=n_params,
        trainable_params=trainable,
        versions=versions("mlx", "mlx-lm"),
        setup=setup.to_dict(),
        peak_samples=tuple(samples),
        notes=("peak from mx.get_peak_memory(); other = gradients + activations + temporaries",),
    )


#: How far the step's peak must exceed the gradients-only peak to be put on the update:
#: MLX's peaks move by about a percent from one evaluation to the next.
PHASE_MARGIN = 0.01


def gradient_peak(
    model: nn.Module,
    loss: Callable,
    input_ids,
    targets,
    compiled: bool,
    random_state: bool = False,
) -> int:
    """Peak of evaluating the loss and all gradients without the update (the gradients
    stay alive, as they are when the update begins)."""
    loss_and_grad = nn.value_and_grad(model, loss)

    def grads(x, y):
        return loss_and_grad(model, x, y)

    if compiled:
        # value_and_grad swaps the parameters in and out: the state is an output too.
        state = [model.state] + ([mx.random.state] if random_state else [])
        grads = partial(mx.compile, inputs=state, outputs=state)(grads)
    mx.eval(grads(input_ids, targets))  # warm-up (and compilation)
    mx.synchronize()
    mx.reset_peak_memory()
    out = grads(input_ids, targets)
    mx.eval(out)
    mx.synchronize()
    peak = mx.get_peak_memory()
    del out
    return peak


def measure_reference(
    spec: ModelSpec,
    setup: TrainingSetup,
    *,
    compiled: bool,
    repeats: int = MLX_STEPS,
    phases: bool = False,
) -> Measurement:
    """Build the MLX reference model for ``spec`` and measure ``repeats`` steps.
    Full fine-tuning only: mlx-lm's classes carry mlx-lm's LoRA (``--impl mlx-lm``)."""
    from introspect.errors import IntrospectError
    from introspect.measure.mlx_model import build

    if setup.finetune != "full":
        raise IntrospectError(
            f"--finetune {setup.finetune} on MLX is measured on mlx-lm's classes with "
            "mlx-lm's LoRA: add --impl mlx-lm"
        )

    model = build(spec, setup.attention, check_setup(setup))
    return measure_step(
        model, setup, vocab=spec.vocab_size, compiled=compiled, repeats=repeats, phases=phases
    )
