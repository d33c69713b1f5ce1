"""What each MLX CPU op does to the buffers when it is encoded: the rules of
:mod:`.mlx_replay_layout` applied to the evaluator's state (``cpu::eval`` in
``backend/cpu/eval.cpp``, each primitive's ``eval_cpu``). Mixed into
:class:`.mlx_replay_eval.Evaluator`, which owns the buffers, references and the worker.
"""

from __future__ import annotations

from introspect.measure.mlx_replay_layout import (
    BINARY,
    TERNARY,
    UNARY,
    VIEWS,
    Layout,
    size_of,
    view_layout,
)


class OpRules:
    """``Evaluator``'s per-op allocation rules (see the module docstring)."""

    def execute(self, k: int, arr: int) -> None:
        """``cpu::eval(arr)``: the op's allocations and dispatches, then the task that
        holds its inputs' and siblings' buffers until the worker has run it."""
        g, node = self.g, self.g.nodes[k]
        name, ins, outs = node.name, node.inputs, node.outputs
        out = outs[0]
        temps: list[int] = []
        compute = 1
        if name in VIEWS:
            compute = 0
            if name == "Depends":
                for o, i in zip(outs, ins, strict=False):
                    self.share(o, self.lay[i])
            elif name == "CustomTransforms":
                for o, i in zip(outs, ins[len(ins) - len(outs) :], strict=False):
                    self.share(o, self.lay[i])
            else:
                src = ins[0]
                for o in outs:
                    lay = view_layout(name, node.args, g.shapes[src], self.lay[src], g.shapes[o])
                    if lay is None:  # a reshape that must copy
                        self.fresh(o, name)
                        compute = 1
                    else:
                        self.share(o, lay)
        elif name in UNARY:
            self.unary(ins[0], out, name)
        elif name in BINARY:
            self.binary(ins[0], ins[1], out, name)
        elif name in TERNARY:
            self.ternary(ins, out, name)
        elif name == "Compiled":
            self.compiled(node)
        elif name in ("AsType", "Full"):
            lay = self.lay[ins[0]]
            if name == "Full" and lay.data_size == 1:
                self.fresh(out, name)
            elif lay.contiguous:
                if self.donatable_to(ins[0], out):
                    self.share(out, lay)
                else:
                    self.like(out, lay, name)
            else:
                self.fresh(out, name)
        elif name == "Softmax":
            lay = self.lay[ins[0]]
            if lay.contiguous and (not lay.strides or lay.strides[-1] == 1):
                if self.is_donatable(ins[0]):
                    self.share(out, lay)
                else:
                    self.like(out, lay, name)
            else:
                self.fresh(out, name)
                compute += 1
        elif name == "LogSumExp":
            lay = self.lay[ins[0]]
            if not (lay.contiguous and lay.strides[-1] == 1):
                temps.append(self.malloc(g.nbytes(ins[0]), name + " copy"))
                compute += 1
            self.fresh(out, name)
        elif name in ("Matmul", "GatherMM", "SegmentedMM"):
            # cpu/matmul.cpp; GatherMM's and SegmentedMM's check_transpose
            # (cpu/masked_mm.cpp) copy the same inputs.
            self.fresh(out, name)
            for a in ins[:2]:
                lay, shape = self.lay[a], g.shapes[a]
                stx, sty = lay.strides[-2], lay.strides[-1]
                if not ((stx == shape[-1] and sty == 1) or (stx == 1 and sty == shape[-2])):
                    temps.append(self.malloc(g.nbytes(a), name + " copy"))
                    compute += 1
        elif name in ("Scatter", "ScatterAxis", "SliceUpdate"):
            src = ins[0]
            lay = self.lay[src]
            if name == "SliceUpdate" and size_of(g.shapes[ins[1]]) == 0:
                self.share(out, lay)
                compute = 0
            else:
                if name == "SliceUpdate":
                    vector = (
                        lay.data_size != 1
                        and lay.contiguous
                        and (size_of(g.shapes[src]) == lay.data_size)
                    )
                else:
                    vector = lay.row
                if vector and self.donatable_to(src, out):
                    self.share(out, lay)
                elif vector:
                    self.like(out, lay, name)
                    compute += 1
                else:
                    self.fresh(out, name)
                    compute += 1
        elif name == "Concatenate":
            self.fresh(out, name)
            compute = len(ins)
        else:
            for o in outs:
                self.fresh(o, name)
        for _ in range(compute):
            self.dispatch()
        held = {self.lay[i].buf for i in ins}
        held |= {self.lay[o].buf for o in outs if o != arr}
        held.discard(self.lay[arr].buf)
        self.dispatch([*held, *temps])

    def unary(self, a: int, out: int, name: str) -> None:
        lay = self.lay[a]
        if not lay.contiguous:
            self.fresh(out, name)
        elif self.donatable_to(a, out):
            self.share(out, lay)
        else:
            self.like(out, lay, name)

    def binary(self, a: int, b: int, out: int, name: str) -> None:
        """``set_binary_op_output_data`` (``backend/common/binary.h``)."""
        la, lb = self.lay[a], self.lay[b]
        if la.data_size == 1 and lb.data_size == 1:
            lay = Layout(
                self.malloc(self.g.itemsize(out), name),
                la.strides,
                1,
                la.contiguous,
                la.row,
                la.col,
            )
            self.set_layout(out, lay)
        elif la.data_size == 1 and lb.contiguous:
            self.share(out, lb) if self.donatable_to(b, out) else self.like(out, lb, name)
        elif lb.data_size == 1 and la.contiguous:
            self.share(out, la) if self.donatable_to(a, out) else self.like(out, la, name)
        elif (la.row and lb.row) or (la.col and lb.col):
            if self.donatable_to(a, out):
                self.share(out, la)
            elif self.donatable_to(b, out):
                self.share(out, lb)
            else:
                self.like(out, la, name)
        else:
            n = size_of(self.g.shapes[out])
            for x, lx in ((a, la), (b, lb)):
                if self.donatable_to(x, out) and lx.row and size_of(self.g.shapes[x]) == n:
                    self.share(out, lx)
                    return
            self.fresh(out, name)

    def ternary(self, ins: list[int], out: int, name: str) -> None:
        """``set_ternary_op_output_data`` (``backend/common/ternary.h``)."""
        lays = [self.lay[i] for i in ins]
        if all(la.data_size == 1 for la in lays):
            lb = lays[1]
            self.set_layout(
                out,
                Layout(
                    self.malloc(self.g.itemsize(out), name),
                    lb.strides,
                    1,
                    lb.contiguous,
                    lb.row,
                    lb.col,
                ),
            )
            return
        every = all(la.row for la in lays) or all(la.col for la in lays)
        for i, la in zip(ins, lays, strict=False):
            if (every or la.row) and self.donatable_to(i, out):
                self.share(out, la)
                return
        if every:
            self.like(out, lays[1], name)
        else:
            self.fresh(out, name)

    def compiled(self, node) -> None:
        """``compiled_allocate_outputs`` (``backend/common/compiled.cpp``)."""
        g, outs = self.g, node.outputs
        constant = node.args[0] if node.args else set()
        shape = g.shapes[outs[0]]
        scalars = [i for i in node.inputs if len(g.shapes[i]) == 0]
        others = [i for i in node.inputs if len(g.shapes[i]) != 0]
        same = [g.shapes[i] == shape for i in others]
        if len(others) > 1:
            contiguous = all(
                self.lay[i].row and s for i, s in zip(others, same, strict=False)
            ) or all(self.lay[i].col and s for i, s in zip(others, same, strict=False))
        elif len(others) == 1:
            contiguous = self.lay[others[0]].contiguous and same[0]
        else:
            contiguous = len(shape) == 0
        del scalars
        o = 0
        rep: Layout | None = None
        for pos, i in enumerate(node.inputs):
            if o >= len(outs):
                break
            lay = self.lay[i]
            ok = (
                g.itemsize(i) == g.itemsize(outs[o])
                and self.is_donatable(i)
                and pos not in constant
            )
            if contiguous:
                ok = ok and len(g.shapes[i]) != 0
            else:
                ok = ok and lay.row and size_of(g.shapes[i]) == size_of(g.shapes[outs[o]])
            if ok:
                self.share(outs[o], lay)
                o += 1
            if contiguous and rep is None and size_of(g.shapes[i]) == size_of(shape):
                rep = lay
        for x in outs[o:]:
            if contiguous and rep is not None:
                self.like(x, rep, "Compiled")
            else:
                self.fresh(x, "Compiled")
