"""What ``mx.compile`` does to a traced graph: ``compile_fuse`` (``mlx/compile.cpp``)
ported to the replay's graph.

Walking the tape from the outputs back, each op that is not a Broadcast starts a fused
section and pulls in its inputs while they are elementwise (unary, binary, Select,
Broadcast), within ``max_compile_depth`` (11) of it and ``max_compile_arrays`` (24)
inputs, and only if every user of that input is already in the section — a Broadcast
with users outside is split in two instead. A global output of the same shape inside
the section becomes another output of the fused kernel. Intermediate arrays of a
section are never materialised; its outputs are one ``Compiled`` primitive, which
allocates like ``compiled_allocate_outputs`` (see :mod:`.mlx_replay_layout`).

Compilation changes no saved tensor: the same matmuls, reductions and gathers stay,
but a chain of elementwise ops costs one buffer instead of one per op, the op count
falls (so the ~100 pending dispatches cover more of the graph), and Adam's update —
m, v and the new weight are outputs of one kernel — gets three new buffers, since each
output of a multi-output kernel holds the inputs and none is donatable.
"""

from __future__ import annotations

from introspect.measure.mlx_replay_layout import BINARY, TERNARY, UNARY
from introspect.measure.mlx_replay_trace import Graph, Node

#: ``max_compile_depth`` and ``max_compile_arrays`` (``mlx/compile.cpp``).
MAX_COMPILE_DEPTH = 11
MAX_COMPILE_ARRAYS = 24

#: ``is_unary`` in compile.cpp counts AsType (and Remainder) as unary.
FUSABLE_UNARY = (UNARY - {"Rsqrt"}) | {"AsType", "Remainder"}


def is_fusable(name: str) -> bool:
    return name in FUSABLE_UNARY or name in BINARY or name in TERNARY or name == "Broadcast"


def fuse(graph: Graph) -> Graph:
    """The graph ``mx.compile`` would evaluate instead of ``graph``."""
    g = Graph(
        shapes=list(graph.shapes),
        dtypes=list(graph.dtypes),
        producer=list(graph.producer),
        nodes=[Node(n.name, n.args, list(n.inputs), list(n.outputs)) for n in graph.nodes],
        held=graph.held,
        released=graph.released,
        optimizer_inputs=graph.optimizer_inputs,
        constants=graph.constants,
        outputs=graph.outputs,
        output_names=graph.output_names,
    )
    nodes = g.nodes
    output_map = {o: o for o in g.outputs}
    function_inputs = set(g.held) - set(g.constants) | set(g.released)

    def prim(a: int) -> Node | None:
        k = g.producer[a]
        return None if k is None else nodes[k]

    parents: dict[int, list[tuple[int, int]]] = {}
    for node in nodes:
        for i, x in enumerate(node.inputs):
            for o in node.outputs:
                parents.setdefault(x, []).append((o, i))

    def set_input(parent: int, idx: int, value: int) -> None:
        prim(parent).inputs[idx] = value

    def merge_one(dst: int, src: int) -> None:
        src_parents = parents.pop(src, None)
        if src_parents is None:
            return
        pairs = parents.setdefault(dst, [])
        for p, idx in src_parents:
            set_input(p, idx, dst)
            pairs.append((p, idx))
        parents[dst] = [(p, i) for p, i in pairs if p != src]

    def split_one(x: int, divider: set[int]) -> int:
        node = prim(x)
        y = g.add_array(g.shapes[x], g.dtypes[x])
        g.producer[y] = len(nodes)
        nodes.append(Node(node.name, node.args, list(node.inputs), [y]))
        keep, moved = [], []
        for p, idx in parents.get(x, []):
            (moved if p in divider else keep).append((p, idx))
        for p, idx in moved:
            set_input(p, idx, y)
        parents[x] = keep
        parents.setdefault(y, []).extend(moved)
        return y

    tape = [node.outputs[0] for node in nodes]
    new_tape: list[int] = []
    global_cache: set[int] = set()

    def section(arr: int) -> None:
        """Fuse what can be fused into ``arr`` (one iteration of compile_fuse's loop)."""
        cache: set[int] = set()
        input_set: set[int] = set()

        def recurse(a: int, depth: int, shape) -> None:
            if a in cache:
                return
            node = prim(a)
            if (
                depth >= MAX_COMPILE_DEPTH
                or node is None
                or not is_fusable(node.name)
                or (a in output_map and g.shapes[a] != shape)
            ):
                input_set.add(a)
                return
            if depth > 0 and any(p not in cache for p, _ in parents.get(a, [])):
                if node.name == "Broadcast" and len(input_set) < MAX_COMPILE_ARRAYS:
                    recurse(split_one(a, cache), depth, shape)
                else:
                    input_set.add(a)
                return
            if a in output_map:
                input_set.add(a)
            else:
                input_set.discard(a)
            if len(input_set) >= MAX_COMPILE_ARRAYS:
                return
            cache.add(a)
            for x in list(node.inputs):
                recurse(x, depth + 1, shape)

        node = prim(arr)
        if node is not None and node.name != "Broadcast":
            recurse(arr, 0, g.shapes[arr])
        if len(cache) <= 1:
            new_tape.append(arr)
            return

        inputs: list[int] = []
        seen_inputs: set[int] = set()
        fused_tape: list[int] = []
        done: set[int] = set()

        def recurse_tape(a: int) -> None:
            if a not in cache:
                if a not in seen_inputs:
                    seen_inputs.add(a)
                    inputs.append(a)
                return
            if a in done:
                return
            done.add(a)
            for x in prim(a).inputs:
                recurse_tape(x)
            fused_tape.append(a)

        recurse_tape(arr)
        old_outputs = []
        for f in fused_tape[:-1]:
            if f in output_map:
                old_outputs.append(f)
                parents[f] = [(p, i) for p, i in parents.get(f, []) if p not in cache]
            else:
                parents.pop(f, None)
            global_cache.add(f)
        old_outputs.append(arr)

        constant = {
            i
            for i, x in enumerate(inputs)
            if len(g.shapes[x]) == 0 or _size(g.shapes[x]) == 1
            if g.producer[x] is None and x not in function_inputs
        }
        outs = [g.add_array(g.shapes[o], g.dtypes[o]) for o in old_outputs]
        compiled = Node("Compiled", [constant, len(fused_tape)], list(inputs), outs)
        for o in outs:
            g.producer[o] = len(nodes)
        nodes.append(compiled)
        new_tape.append(outs[-1])
        for i, x in enumerate(inputs):
            pairs = [(p, j) for p, j in parents.get(x, []) if p not in cache]
            pairs.extend((o, i) for o in outs)
            parents[x] = pairs
        for new, old in zip(outs, old_outputs, strict=False):
            merge_one(new, old)
            if old in output_map:
                output_map[old] = new

    for arr in reversed(tape):
        if arr not in global_cache:
            section(arr)

    new_tape.reverse()
    fused = Graph(
        shapes=g.shapes,
        dtypes=g.dtypes,
        producer=[None] * len(g.shapes),
        held=g.held,
        released=g.released,
        optimizer_inputs=g.optimizer_inputs,
        constants=g.constants,
        outputs=[output_map[o] for o in g.outputs],
        output_names=g.output_names,
    )
    # The nodes the outputs still reach, inputs first (fused-away ops are unreachable).
    placed: set[int] = set()
    stack = [(a, False) for a in reversed(fused.outputs)]
    while stack:
        a, ready = stack.pop()
        node = prim(a)
        if node is None or id(node) in placed:
            continue
        if ready:
            placed.add(id(node))
            for o in node.outputs:
                fused.producer[o] = len(fused.nodes)
            fused.nodes.append(node)
            continue
        stack.append((a, True))
        stack.extend((x, False) for x in reversed(node.inputs))
    return fused


def _size(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
