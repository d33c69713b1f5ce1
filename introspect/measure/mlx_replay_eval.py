"""Replay a traced MLX graph through what ``mx.eval`` does on the CPU, buffer by buffer,
and return the peak of MLX's allocator — what ``mx.get_peak_memory()`` reads.

The mechanism, from MLX v0.32's source:

1. **Order** (``eval_impl`` in ``mlx/transforms.cpp``): a depth-first pass from the
   outputs counts each array's uses (siblings share a count); a breadth-first pass then
   puts an array on the tape once its last user has, at most ``MLX_BFS_MAX_WIDTH`` (20)
   arrays ahead of the cursor — past that it goes down a level, depth-first. The tape
   runs backwards: inputs first.
2. **Allocation** (:mod:`.mlx_replay_layout`): each op allocates on the main thread when
   it is encoded; views and donations take no new buffer.
3. **Lifetimes** (``mlx/array.cpp``, ``backend/cpu/eval.cpp``): an array is released
   when nobody refers to it — every unevaluated user holds it in its inputs (each
   output of a multi-output op does), Python holds the batch and the step's outputs;
   an op is detached (its inputs dropped) right after it is encoded. Its buffer lives
   while an array or a pending task refers to it: ``cpu::eval`` hands the worker a task
   holding every input's and sibling's buffer (and the op's temporaries), released only
   when the worker has run it. A buffer is donatable only when its array has one
   reference and the buffer one holder — so a pending task blocks donation.
4. **Asynchrony** (``backend/cpu/encoder.h``, ``mlx/scheduler.h``): every tenth task
   dispatched counts as one active task; past ``MAX_ACTIVE_TASKS`` (10) the main thread
   waits for one to finish. The replay lets the main thread run as far ahead as that
   allows — the CPU worker, doing the arithmetic, is the slower of the two — so about
   100 dispatches are pending at any moment.

No constant here is fitted: each is MLX's, named where it is defined. The rows this was
derived from and checked on are listed in :mod:`.mlx_replay`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from introspect.measure.mlx_replay_layout import (
    DONATION_EXTRA,
    Layout,
    fresh_flags,
    row_strides,
    size_of,
)
from introspect.measure.mlx_replay_ops import OpRules
from introspect.measure.mlx_replay_trace import Graph

#: ``env::bfs_max_width()`` (``mlx/utils.h``): 20 unless ``MLX_BFS_MAX_WIDTH`` is set.
MLX_BFS_MAX_WIDTH = int(os.environ.get("MLX_BFS_MAX_WIDTH", "20"))
#: ``cpu::DISPATCHES_PER_TASK`` (``backend/cpu/encoder.h``).
DISPATCHES_PER_TASK = 10
#: ``MAX_ACTIVE_TASKS`` (``mlx/transforms.cpp``).
MAX_ACTIVE_TASKS = 10

SYNC = -1  # the synchronizer array eval_impl puts above the outputs


@dataclass
class Replay:
    """What the replay found: the allocator's peak, the bytes alive before the step,
    and the op (and its position) during which the peak was reached."""

    peak_bytes: int
    baseline_bytes: int
    peak_op: str
    peak_index: int
    n_ops: int
    #: "optimizer" when the op that set the peak belongs to the update (it reads the
    #: optimizer's state), else "forward/backward" (``mlx_step``'s phase names).
    peak_phase: str = "forward/backward"
    #: Bytes alive once the worker has run every task (what the next step starts with).
    final_bytes: int = 0
    order: list[int] = field(default_factory=list, repr=False)
    #: Sizes of the buffers alive at the peak, by the op that allocated them.
    peak_buffers: dict[str, int] = field(default_factory=dict, repr=False)


def eval_order(graph: Graph, width: int = MLX_BFS_MAX_WIDTH) -> list[int]:
    """The arrays ``eval_impl`` evaluates, in its order (one per op)."""
    existing = set(graph.held) | set(graph.released)
    nodes, producer = graph.nodes, graph.producer

    def inputs(a: int) -> list[int]:
        if a == SYNC:
            return graph.outputs
        if a in existing or producer[a] is None:
            return []
        return nodes[producer[a]].inputs

    def siblings(a: int) -> list[int]:
        if a == SYNC or a in existing or producer[a] is None:
            return []
        return [o for o in nodes[producer[a]].outputs if o != a]

    cache: dict[int, int] = {}
    stack = [[SYNC, 0]]
    while stack:
        top = stack[-1]
        ins = inputs(top[0])
        if top[1] < len(ins):
            a = ins[top[1]]
            top[1] += 1
            if a not in cache:
                stack.append([a, 0])
                cache[a] = 1
                for s in siblings(a):
                    cache.setdefault(s, 1)
            else:
                cache[a] += 1
                for s in siblings(a):
                    cache[s] = cache.get(s, 0) + 1
            continue
        stack.pop()

    tape = [SYNC]
    dfs: list[tuple[int, int]] = []
    i = 0
    while i < len(tape) or dfs:
        if i >= len(tape):
            a, j = dfs.pop()
        else:
            a, j = tape[i], 0
            i += 1
        ins = inputs(a)
        while j < len(ins):
            x = ins[j]
            if x in existing:
                j += 1
                continue
            if len(tape) - i >= width:
                dfs.append((a, j))
                break
            cache[x] -= 1
            if cache[x] != 0:
                for s in siblings(x):
                    cache[s] -= 1
                j += 1
                continue
            del cache[x]
            for s in siblings(x):
                cache.pop(s, None)
            tape.append(x)
            j += 1
    tape.reverse()
    return tape


class Evaluator(OpRules):
    """The buffers and references of one ``mx.eval`` (see the module docstring)."""

    def __init__(self, graph: Graph) -> None:
        self.g = graph
        self.lay: dict[int, Layout] = {}
        self.refs: dict[int, int] = {}  # array -> references to it
        self.buf_size: dict[int, int] = {}
        self.buf_refs: dict[int, int] = {}
        self.buf_owner: dict[int, str] = {}
        self.next_buf = 0
        self.active = 0
        self.peak = 0
        self.peak_at: tuple[str, int] = ("", -1)
        self.peak_buffers: dict[str, int] = {}
        self.dispatches = 0
        self.completed_tasks = 0
        self.executed = 0
        self.pending: list[tuple[int, list[int]]] = []
        self.current: tuple[str, int] = ("", -1)
        self.current_node = -1
        self.peak_node = -1

    # buffers -------------------------------------------------------------------------
    def malloc(self, nbytes: int, owner: str) -> int:
        b = self.next_buf
        self.next_buf += 1
        self.buf_size[b] = nbytes
        self.buf_refs[b] = 0
        self.buf_owner[b] = owner
        self.active += nbytes
        if self.active > self.peak:
            self.peak = self.active
            self.peak_at = self.current
            self.peak_node = self.current_node
            self.peak_buffers = {}
            for k, n in self.buf_size.items():
                key = self.buf_owner[k]
                self.peak_buffers[key] = self.peak_buffers.get(key, 0) + n
        return b

    def hold_buf(self, b: int) -> None:
        self.buf_refs[b] += 1

    def drop_buf(self, b: int) -> None:
        self.buf_refs[b] -= 1
        if self.buf_refs[b] == 0:
            self.active -= self.buf_size.pop(b)
            del self.buf_refs[b]
            del self.buf_owner[b]

    def set_layout(self, a: int, lay: Layout) -> None:
        self.lay[a] = lay
        self.hold_buf(lay.buf)

    def fresh(self, a: int, owner: str, nbytes: int | None = None) -> Layout:
        shape = self.g.shapes[a]
        n = self.g.nbytes(a) if nbytes is None else nbytes
        c, r, col = fresh_flags(shape)
        lay = Layout(self.malloc(n, owner), row_strides(shape), size_of(shape), c, r, col)
        self.set_layout(a, lay)
        return lay

    def like(self, a: int, src: Layout, owner: str) -> Layout:
        n = src.data_size * self.g.itemsize(a)
        lay = Layout(
            self.malloc(n, owner), src.strides, src.data_size, src.contiguous, src.row, src.col
        )
        self.set_layout(a, lay)
        return lay

    def share(self, a: int, src: Layout) -> None:
        self.set_layout(
            a, Layout(src.buf, src.strides, src.data_size, src.contiguous, src.row, src.col)
        )

    # references ----------------------------------------------------------------------
    def ref(self, a: int, n: int = 1) -> None:
        self.refs[a] = self.refs.get(a, 0) + n

    def unref(self, a: int, n: int = 1) -> None:
        self.refs[a] -= n
        if self.refs[a] == 0:
            del self.refs[a]
            lay = self.lay.pop(a, None)
            if lay is not None:
                self.drop_buf(lay.buf)

    def is_donatable(self, a: int) -> bool:
        """``array::is_donatable``: one reference to the array, one holder of its buffer."""
        lay = self.lay[a]
        return self.refs.get(a, 0) == 1 and self.buf_refs[lay.buf] == 1

    def donatable_to(self, a: int, out: int) -> bool:
        """``is_donatable(in, out)`` in ``backend/common/utils.h``."""
        return (
            self.is_donatable(a)
            and self.g.itemsize(a) == self.g.itemsize(out)
            and self.buf_size[self.lay[a].buf] <= self.g.nbytes(out) + DONATION_EXTRA
        )

    # the worker ----------------------------------------------------------------------
    def dispatch(self, held: list[int] | None = None) -> None:
        self.dispatches += 1
        if held:
            for b in held:
                self.hold_buf(b)
            self.pending.append((self.dispatches, held))

    def run_worker(self, upto: int) -> None:
        self.executed = max(self.executed, upto)
        while self.pending and self.pending[0][0] <= self.executed:
            _, held = self.pending.pop(0)
            for b in held:
                self.drop_buf(b)

    def throttle(self) -> None:
        """``scheduler::wait_for_one`` once more than MAX_ACTIVE_TASKS are in flight."""
        counted = self.dispatches // DISPATCHES_PER_TASK
        if counted - self.completed_tasks > MAX_ACTIVE_TASKS:
            self.completed_tasks += 1
            self.run_worker(self.completed_tasks * DISPATCHES_PER_TASK)

    def detach(self, k: int) -> None:
        """``array::detach``: every output drops its inputs and its siblings."""
        node = self.g.nodes[k]
        n = len(node.outputs)
        for _ in node.outputs:
            for i in node.inputs:
                self.unref(i)
        if n > 1:
            for o in node.outputs:
                self.unref(o, n - 1)


def update_nodes(graph: Graph) -> set[int]:
    """The ops of the optimizer update: everything computed from the optimizer's state
    (Adam's m and v, the step count); a parameter's update may run mid-backward."""
    reached = {a for a in graph.optimizer_inputs if graph.nbytes(a) > 0}
    out: set[int] = set()
    for k, node in enumerate(graph.nodes):  # tape order: inputs before users
        if any(i in reached for i in node.inputs):
            out.add(k)
            reached.update(node.outputs)
    return out


def phase_of(graph: Graph, k: int) -> str:
    if k < 0:
        return "forward/backward"
    return "optimizer" if k in update_nodes(graph) else "forward/backward"


def replay(graph: Graph, width: int = MLX_BFS_MAX_WIDTH, worker: str = "behind") -> Replay:
    """Evaluate ``graph`` as ``mx.eval`` would on the CPU, counting bytes only.

    ``worker="behind"``: the worker is as far behind as the scheduler allows (the CPU's
    arithmetic is slower than encoding an op: true once ops are large); ``"caught_up"``:
    it runs each task as soon as it is dispatched — the other bound, for steps whose ops
    are so small that the worker keeps up."""
    order = eval_order(graph, width)
    ev = Evaluator(graph)
    outputs = set(graph.outputs)
    for a in [*graph.held, *graph.released]:
        if a not in ev.lay:
            ev.fresh(a, "existing")
            if a in graph.held or a in outputs:
                ev.ref(a)  # Python keeps it
    for node in graph.nodes:
        for _ in node.outputs:
            for i in node.inputs:
                ev.ref(i)
        if len(node.outputs) > 1:
            for o in node.outputs:
                ev.ref(o, len(node.outputs) - 1)
    for o in graph.outputs:
        ev.ref(o, 2)  # the synchronizer's input and Python's result
    for a in graph.released:
        if a not in ev.refs:  # nothing reads it: freed as the step begins
            ev.drop_buf(ev.lay.pop(a).buf)
    baseline = ev.active
    ev.peak = baseline
    for idx, arr in enumerate(order):
        if arr == SYNC:
            continue
        k = graph.producer[arr]
        ev.current = (graph.nodes[k].name, idx)
        ev.current_node = k
        ev.execute(k, arr)
        if worker == "caught_up":
            ev.run_worker(ev.dispatches)
        else:
            ev.throttle()
        ev.detach(k)
    ev.run_worker(ev.dispatches)  # mx.eval's final synchronize
    return Replay(
        final_bytes=ev.active,
        peak_bytes=ev.peak,
        baseline_bytes=baseline,
        peak_op=ev.peak_at[0],
        peak_phase=phase_of(graph, ev.peak_node),
        peak_index=ev.peak_at[1],
        n_ops=len(order) - 1,
        order=order,
        peak_buffers=ev.peak_buffers,
    )
