"""The experts' weight gradients of mlx-lm's ``SwitchLinear``, which ``mx.export_function``
cannot record, rebuilt in the traced graph from MLX's source.

mlx-lm's mixture-of-experts blocks (``SwitchGLU`` in ``mlx_lm/models/switch_layers.py``)
sort the token copies by expert once ``indices.size >= 64`` (``_gather_sort``) and call
``mx.gather_mm(x, weight.swapaxes(-1, -2), rhs_indices=idx, sorted_indices=True)``.
The VJP of a sorted ``GatherMM`` with respect to the weights (``GatherMM::vjp`` and
``gather_mm_grad`` in ``mlx/primitives.cpp``) is a ``segmented_mm`` over the experts'
segments, and ``SegmentedMM`` has no entry in export's primitive table
(``mlx/export.cpp``: "Unable to get state for primitive SegmentedMM"), so no such step
can be traced as it is.

While tracing, :func:`traceable_switch` has each sorted ``SwitchLinear`` compute its
forward with the weight behind ``mx.stop_gradient`` (the same ``Transpose`` →
``GatherMM`` ops: the trace's ``compile_simplify`` drops ``StopGradient``; the input's
VJP, a sorted ``gather_mm`` of the cotangent, is MLX's own) and add a zero-valued
*marker* through the weight, ``(sum(weight in float64) · 0)`` cast back, whose VJP
reaches the weight as a float64 chain from the same cotangent. :func:`rebuild` then
removes the marker (its ``Add`` and every op only it needed) and gives the weight's
gradient the ops ``gather_mm_grad`` builds for a sorted product, with the shapes,
inputs and order of the source:

    segments = zeros({E}, uint32)                         # Broadcast of a constant
    segments = scatter_add_axis(segments, idx, M, 0)      # Broadcast, ScatterAxis
    segments = cumsum(segments, 0)                        # Scan
    segments = concatenate({[0], segments})               # Concatenate
    segments = as_strided(segments, {E, 2}, {1, 1}, 0)    # AsStrided
    dw = segmented_mm(swapaxes(flatten(dy, 0, -2), 0, 1), flatten(x, 0, -2), segments)
    grad(weight) = swapaxes(swapaxes(dw, -1, -2))         # GatherMM's, then Transpose's VJP

(``reshape`` to the same shape and ``astype`` to the same dtype make no op.) Identical
ops on identical inputs are made once, as ``compile_simplify`` merges them (the
segments of a layer's three projections, the flattened input of up and gate). The
``SegmentedMM`` node allocates its output and copies an input whose last two strides
are neither plain nor transposed (``SegmentedMM::eval_cpu``,
``mlx/backend/cpu/masked_mm.cpp``), as ``GatherMM`` and ``Matmul`` do
(:mod:`.mlx_replay_ops`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from introspect.measure.mlx_replay_graph import Graph, Node


def has_switch(model) -> bool:
    return any(type(m).__name__ == "SwitchLinear" for _, m in model.named_modules())


@contextlib.contextmanager
def traceable_switch(model) -> Iterator[bool]:
    """While tracing, sorted ``SwitchLinear`` calls carry the marker (module docstring);
    yields whether ``model`` has any ``SwitchLinear``."""
    if not has_switch(model):
        yield False
        return
    import mlx.core as mx
    from mlx_lm.models import switch_layers

    cls = switch_layers.SwitchLinear
    original = cls.__call__

    def call(self, x, indices, sorted_indices=False):
        if not sorted_indices:
            return original(self, x, indices, sorted_indices)
        w = self["weight"]
        y = mx.gather_mm(
            x,
            mx.stop_gradient(w.swapaxes(-1, -2)),
            rhs_indices=indices,
            sorted_indices=True,
        )
        y = y + (mx.sum(w.astype(mx.float64)) * 0).astype(y.dtype)
        if "bias" in self:
            y = y + mx.expand_dims(self["bias"][indices], -2)
        return y

    cls.__call__ = call
    try:
        yield True
    finally:
        cls.__call__ = original


def rebuild(graph: Graph) -> Graph:
    """``graph`` with every marker replaced by the sorted weight gradient (module
    docstring), and nothing left that only a marker needed."""
    users: dict[int, list[int]] = {}
    for k, node in enumerate(graph.nodes):
        for i in node.inputs:
            users.setdefault(i, []).append(k)

    def made_by(a: int, name: str) -> Node | None:
        k = graph.producer[a]
        return graph.nodes[k] if k is not None and graph.nodes[k].name == name else None

    def from_float64(a: int) -> bool:
        node = made_by(a, "AsType")
        return node is not None and graph.dtypes[node.inputs[0]] == "float64"

    def marker(a: int) -> bool:  # the marker, broadcast to the product's shape
        node = made_by(a, "Broadcast")
        return from_float64(a) or (node is not None and from_float64(node.inputs[0]))

    # The marker's Adds: their users read the GatherMM's output instead.
    forward_of: dict[int, int] = {}
    for node in graph.nodes:
        if node.name == "Add" and len(node.inputs) == 2 and marker(node.inputs[1]):
            forward_of[node.outputs[0]] = node.inputs[0]
    for node in graph.nodes:
        node.inputs = [forward_of.get(i, i) for i in node.inputs]
    graph.outputs = [forward_of.get(o, o) for o in graph.outputs]

    made: dict[tuple, int] = {}
    constants: dict[tuple, int] = {}

    def constant(value: int, shape: tuple, dtype: str) -> int:
        if (value, shape, dtype) not in constants:
            a = graph.add_array(shape, dtype)
            graph.held.append(a)
            graph.constants.append(a)
            constants[(value, shape, dtype)] = a
        return constants[(value, shape, dtype)]

    def op(name: str, args: list, inputs: list[int], shape, dtype: str, out=None) -> int:
        key = (name, repr(args), tuple(inputs))
        if out is None and key in made:
            return made[key]
        a = graph.add_array(shape, dtype) if out is None else out
        graph.producer[a] = len(graph.nodes)
        graph.nodes.append(Node(name=name, args=args, inputs=list(inputs), outputs=[a]))
        made[key] = a
        return a

    # The weights' marker gradients: float64 chains cast back to a weight's shape.
    for node in list(graph.nodes):
        grad = node.outputs[0]
        if not (node.name == "AsType" and len(graph.shapes[grad]) == 3 and from_float64(grad)):
            continue
        dy, seen, todo = None, set(), [grad]
        while todo and dy is None:
            a = todo.pop()
            if a in seen or graph.producer[a] is None:
                continue
            seen.add(a)
            for i in graph.nodes[graph.producer[a]].inputs:
                if any(graph.nodes[k].name == "GatherMM" and graph.nodes[k].inputs[0] == i
                       for k in users.get(i, ())):  # fmt: skip
                    dy = i
                    break
                todo.append(i)
        if dy is None:
            raise ValueError("SwitchLinear marker: no GatherMM cotangent found")
        d_input = next(
            graph.nodes[k]
            for k in users[dy]
            if graph.nodes[k].name == "GatherMM" and graph.nodes[k].inputs[0] == dy
        )
        w_t = graph.nodes[graph.producer[d_input.inputs[1]]].inputs[0]
        fwd = next(
            graph.nodes[k]
            for k in users[w_t]
            if graph.nodes[k].name == "GatherMM" and graph.nodes[k].inputs[1] == w_t
        )
        x, idx = fwd.inputs[0], fwd.inputs[3]
        experts, d_out, d_in = graph.shapes[grad]
        rows = graph.shapes[x][-2]
        dtype = graph.dtypes[grad]
        n_tok = 1
        for s in graph.shapes[idx]:
            n_tok *= s
        zero = constant(0, (), "uint32")
        seg = op("Broadcast", [[experts]], [zero], (experts,), "uint32")
        m = op("Broadcast", [list(graph.shapes[idx])], [constant(rows, (), "uint32")],
               graph.shapes[idx], "uint32")  # fmt: skip
        seg = op("ScatterAxis", ["Sum", 0], [seg, idx, m], (experts,), "uint32")
        seg = op("Scan", ["Sum", 0, False, True], [seg], (experts,), "uint32")
        first = constant(0, (1,), "uint32")
        seg = op("Concatenate", [0], [first, seg], (experts + 1,), "uint32")
        seg = op("AsStrided", [[experts, 2], [1, 1], 0], [seg], (experts, 2), "uint32")
        dy_flat = op("Flatten", [0, -2], [dy], (n_tok * rows, d_out), dtype)
        lhs = op("Transpose", [[1, 0]], [dy_flat], (d_out, n_tok * rows), dtype)
        x_flat = op("Flatten", [0, -2], [x], (n_tok * rows, d_in), dtype)
        dw = op("SegmentedMM", [], [lhs, x_flat, seg], (experts, d_out, d_in), dtype)
        dw_t = op("Transpose", [[0, 2, 1]], [dw], (experts, d_in, d_out), dtype)
        graph.producer[grad] = None
        op("Transpose", [[0, 2, 1]], [dw_t], (experts, d_out, d_in), dtype, out=grad)
    return prune(graph)


def prune(graph: Graph) -> Graph:
    """``graph`` less every node no output needs (and the constants only they read)."""
    needed: set[int] = set()
    todo = list(graph.outputs)
    while todo:
        a = todo.pop()
        k = graph.producer[a]
        if k is None or k in needed:
            continue
        needed.add(k)
        todo.extend(graph.nodes[k].inputs)
    # Inputs before their users (the rebuilt gradients were appended last).
    keep: list[int] = []
    placed: set[int] = set()
    for start in sorted(needed):
        stack = [(start, False)]
        while stack:
            k, ready = stack.pop()
            if k in placed:
                continue
            if ready:
                placed.add(k)
                keep.append(k)
                continue
            stack.append((k, True))
            for i in reversed(graph.nodes[k].inputs):
                j = graph.producer[i]
                if j is not None and j not in placed:
                    stack.append((j, False))
    new_index = {k: i for i, k in enumerate(keep)}
    graph.nodes = [graph.nodes[k] for k in keep]
    graph.producer = [None if k is None else new_index.get(k) for k in graph.producer]
    read = {i for node in graph.nodes for i in node.inputs} | set(graph.outputs)
    unread = {a for a in graph.constants if a not in read}
    graph.constants = [a for a in graph.constants if a not in unread]
    graph.held = [a for a in graph.held if a not in unread]
    return graph
