"""A checkpointed mlx-lm step that ``mx.export_function`` can trace: ``mx.checkpoint``'s
graph built by hand.

mlx-lm's ``grad_checkpoint`` (``mlx_lm/tuner/trainer.py``) wraps each layer's
``__call__`` in ``mx.checkpoint(inner_fn)(layer.trainable_parameters(), x, mask,
cache=None)``. ``checkpoint`` (``mlx/transforms.cpp``) is a ``custom_vjp``: the forward
runs the layer and ``stop_gradient``s its output, and a ``CustomTransforms`` node (inputs:
the primals and that output; its output shares the output's buffer,
``backend/common/common.cpp``) carries the VJP ``vjp(fun, depends(primals, outputs),
cotangents)``: the layer run again on ``Depends`` copies of its parameters and input —
sharing their buffers, and made to wait for the layer's forward output — and
differentiated there. Export cannot record ``CustomTransforms`` (no state), so the
replay could not trace such a step.

:func:`checkpointed_step` builds the same arrays without it: the forward, each layer's
output ``stop_gradient``-ed; the head's (final norm, logits, ``default_loss``) value and
gradients by ``mx.value_and_grad`` with the last layer's output as a primal; then, top
layer first, each layer's ``mx.vjp`` on ``mx.depends([*params, x], [y])`` with the
cotangent of its output — what ``CustomTransforms::vjp`` calls — and the embedding
lookup's VJP, added to the tied head's gradient (``vjp``'s cotangent accumulation in
``transforms.cpp`` adds the later use's first); then the optimizer's update. Export's
``compile_simplify`` drops the ``Copy`` and ``StopGradient`` no-ops either way, so the
graph differs from the real one only by the ``CustomTransforms`` nodes, buffer-sharing
views between a layer's output and the next layer's input. For mlx-lm classes whose
``Model`` takes ``input_embeddings`` and has ``model.embed_tokens`` (Llama, Qwen2,
Qwen3, ...). Under mlx-lm's LoRA (``model.freeze()``, ``linear_to_lora_layers``) the
same function builds the LoRA step: each layer's VJP is taken over its trainable
parameters (the adapters; none for the frozen blocks below ``num_layers``) and the
frozen embedding has no lookup VJP.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from functools import partial


def head_loss(model, batch, lengths, hidden):
    """``default_loss`` (``mlx_lm/tuner/trainer.py``) with the model's layers skipped:
    the logits of ``hidden``, the last layer's output, through the final norm and head."""
    import mlx.core as mx
    import mlx.nn as nn

    inputs, targets = batch[:, :-1], batch[:, 1:]
    logits = model(inputs, input_embeddings=hidden)
    steps = mx.arange(1, targets.shape[1] + 1)
    mask = mx.logical_and(steps >= lengths[:, 0:1], steps <= lengths[:, 1:])
    ce = nn.losses.cross_entropy(logits, targets) * mask
    ntoks = mask.sum()
    ce = ce.astype(mx.float32).sum() / ntoks
    return ce, ntoks


@contextlib.contextmanager
def layers_as(cls, call: Callable) -> Iterator[None]:
    original = cls.__call__
    cls.__call__ = call
    try:
        yield
    finally:
        cls.__call__ = original


def checkpointed_step(model, optimizer, compiled: bool) -> Callable:
    """``step(batch, lengths)``: the graph of mlx-lm's checkpointed step (module
    docstring), Adam's update included; ``mx.compile``-d as ``make_step`` does."""
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_unflatten

    layers = model.layers
    cls = type(layers[0])
    forward = cls.__call__
    embed = model.model.embed_tokens
    tied = "lm_head" not in model

    def step(batch, lengths):
        params = model.trainable_parameters()
        inputs = batch[:, :-1]
        records = []

        def record(layer, x, *args, **kwargs):
            y = mx.stop_gradient(forward(layer, x, *args, **kwargs))
            records.append((layer, x, args, kwargs, y))
            return y

        with layers_as(cls, record):
            model.model(inputs)  # the forward, each layer's output stop_gradient-ed
        hidden = records[-1][-1]

        def head(p, h):
            model.update(p)
            with layers_as(cls, lambda layer, x, *a, **k: x):
                return head_loss(model, batch, lengths, h)

        value, (grads, cotangent) = mx.value_and_grad(head, argnums=(0, 1))(params, hidden)
        model.update(params)
        layer_grads = []
        for layer, x, args, kwargs, y in reversed(records):
            # a frozen layer (LoRA's blocks below num_layers) has no parameter to
            # differentiate: only its input's cotangent, which nothing reads unless a
            # layer below is trained (an unread array is not in the traced graph)
            flat = tree_flatten(layer.trainable_parameters())
            keys, leaves = [k for k, _ in flat], [v for _, v in flat]

            def inner(*arrays, layer=layer, keys=keys, args=args, kwargs=kwargs):
                layer.update(tree_unflatten(list(zip(keys, arrays[:-1], strict=True))))
                return forward(layer, arrays[-1], *args, **kwargs)

            primals = mx.depends([*leaves, x], [y])
            _, vjps = mx.vjp(inner, primals, [cotangent])
            layer.update(tree_unflatten(list(zip(keys, leaves, strict=True))))
            cotangent = vjps[-1]
            layer_grads.append(tree_unflatten(list(zip(keys, vjps[:-1], strict=True))))
        grads["model"]["layers"] = layer_grads[::-1]
        weight = embed.weight

        def lookup(w):
            embed.weight = w
            return embed(inputs)

        table = grads["model"].get("embed_tokens", {})
        if "weight" in table:  # a trained embedding (LoRA's is frozen: no lookup VJP)
            _, (lookup_grad,) = mx.vjp(lookup, [weight], [cotangent])
            embed.weight = weight
            table["weight"] = table["weight"] + lookup_grad if tied else lookup_grad
        optimizer.update(model, grads)
        return value

    if compiled:
        state = [model.state, optimizer.state]
        return partial(mx.compile, inputs=state, outputs=state)(step)
    return step
