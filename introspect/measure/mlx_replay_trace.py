"""Record an MLX training step's graph without evaluating it.

MLX is lazy: calling the step builds a graph of unevaluated arrays. ``mx.export_function``
with a callback walks that graph (``mlx/export.cpp``: ``compile_trace`` → ``compile_dfs``
→ ``compile_simplify``) and reports every primitive with its input and output arrays,
their shapes and dtypes, and nothing is evaluated — its example inputs need not be
evaluated either, so a 7B model's step can be traced from lazy parameters without
allocating its weights (``mx.get_peak_memory()`` stays at a few bytes).

The traced function takes the step's existing arrays as *inputs* — the batch, then
every parameter and optimizer-state array — so the graph says which existing buffers
Python still holds (the batch) and which only the graph holds once the step returns
(the old parameters, m and v: ``Optimizer.update`` replaces them in the model and the
state). Its outputs are what ``mx.eval(step(batch), [model.state, optimizer.state])``
evaluates, in that order (the order decides MLX's evaluation order).

Two differences from what ``mx.eval`` sees, both from ``compile_simplify``: no-ops
(``Copy`` — the tracer copies ``mx.value_and_grad`` makes of the parameters —
``StopGradient``) are gone, and identical ops on identical inputs are merged. Copy and
StopGradient share their input's buffer on CPU (``mlx/backend/common/common.cpp``), so
removing them changes no buffer; the merges match what ``mx.compile`` does anyway.

One primitive export cannot record: ``SegmentedMM``, the weight gradient of mlx-lm's
sorted mixture-of-experts projections (``SwitchLinear``); :mod:`.mlx_replay_moe` traces
those steps with a marker in its place and rebuilds it from MLX's source.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from introspect.measure import mlx_replay_moe
from introspect.measure.mlx_replay_graph import Graph, Node


def dtype_name(dtype) -> str:
    return str(dtype).rsplit(".", 1)[-1]


class UntraceableError(ValueError):
    """The step holds a primitive ``mx.export_function`` cannot record."""


def plain(x):
    """An export argument as plain Python (dtypes become their names)."""
    if isinstance(x, (list, tuple)):
        return type(x)(plain(v) for v in x)
    if isinstance(x, (bool, int, float, str)) or x is None:
        return x
    return dtype_name(x)


def trace(fun: Callable, inputs: Sequence, held_count: int, output_names: list[str]) -> Graph:
    """The graph of ``fun(*inputs)``; the first ``held_count`` inputs stay held by
    Python during evaluation, the rest are released to the graph."""
    import mlx.core as mx

    graph = Graph()
    index: dict[str, int] = {}

    def array_of(name: str, shape, dtype) -> int:
        if name not in index:
            index[name] = graph.add_array(shape, dtype_name(dtype))
        return index[name]

    def callback(entry: dict) -> None:
        kind = entry["type"]
        if kind == "inputs":
            for i, (name, shape, dtype) in enumerate(entry["inputs"]):
                a = array_of(name, shape, dtype)
                (graph.held if i < held_count else graph.released).append(a)
        elif kind == "outputs":
            outs = [array_of(n, s, d) for n, s, d in entry["outputs"]]
            graph.outputs.extend(outs)
        elif kind == "constants":
            for name, value in entry["constants"]:
                a = array_of(name, value.shape, value.dtype)
                graph.held.append(a)
                graph.constants.append(a)
        elif kind == "primitive":
            node = Node(
                name=entry["name"],
                args=[plain(x) for x in entry["arguments"]],
                inputs=[array_of(n, s, d) for n, s, d in entry["inputs"]],
                outputs=[array_of(n, s, d) for n, s, d in entry["outputs"]],
            )
            for o in node.outputs:
                graph.producer[o] = len(graph.nodes)
            graph.nodes.append(node)

    try:
        mx.export_function(callback, fun, *inputs)
    except ValueError as err:
        if "CustomTransforms" in str(err):
            raise UntraceableError(
                "the MLX replay cannot trace this step: mx.export_function cannot record "
                "mx.checkpoint / mx.custom_function (CustomTransforms has no state to export)"
            ) from err
        raise
    graph.output_names = list(output_names)
    return graph


def array_leaves(tree) -> list[tuple[str, object]]:
    import mlx.core as mx
    from mlx.utils import tree_flatten

    return [(k, v) for k, v in tree_flatten(tree) if isinstance(v, mx.array)]


def assign(tree, key: str, value) -> None:
    """Set ``tree``'s leaf at the dotted ``key`` (as ``tree_flatten`` writes it)."""
    *path, last = key.split(".")
    node = tree
    for part in path:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


def trace_step(model, optimizer, step: Callable, batch: Sequence) -> Graph:
    """The graph of one ``step(*batch)`` that updates ``model`` with ``optimizer``
    (whose state must exist: after a warm-up step, or ``optimizer.init``), evaluated as
    ``mx.eval(step(*batch), [model.state, optimizer.state])``. ``step`` may be
    ``mx.compile``-d: export inlines it, and :mod:`.mlx_replay_fuse` redoes its fusion.

    The model and optimizer are left as they were."""
    from mlx.utils import tree_unflatten

    params = array_leaves(model.parameters())
    opt = array_leaves(optimizer.state)
    n_batch = len(batch)

    def fun(*args):
        model.update(
            tree_unflatten(list(zip([k for k, _ in params], args[n_batch:], strict=False)))
        )
        for (key, _), value in zip(opt, args[n_batch + len(params) :], strict=False):
            assign(optimizer.state, key, value)
        value = step(*args[:n_batch])
        values = list(value) if isinstance(value, (tuple, list)) else [value]
        new_params = array_leaves(model.parameters())
        new_opt = array_leaves(optimizer.state)
        return [*values, *[v for _, v in new_params], *[v for _, v in new_opt]]

    inputs = [*batch, *[v for _, v in params], *[v for _, v in opt]]
    try:
        with mlx_replay_moe.traceable_switch(model) as switch:
            graph = trace(fun, inputs, n_batch, [])
        if switch:
            graph = mlx_replay_moe.rebuild(graph)
    finally:
        model.update(tree_unflatten(params))
        for key, value in opt:
            assign(optimizer.state, key, value)
    n_values = len(graph.outputs) - len(params) - len(opt)
    graph.optimizer_inputs = graph.released[len(params) :]
    graph.output_names = (
        [f"value{i}" for i in range(n_values)]
        + [f"param:{k}" for k, _ in params]
        + [f"state:{k}" for k, _ in opt]
    )
    return graph
