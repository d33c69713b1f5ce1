"""Where each MLX CPU primitive puts its output: a new buffer, an input's buffer
(donation), or a view of an input's buffer — and with which strides and flags, since
those decide what later ops may donate or must copy.

Each rule is MLX's own (v0.32), file named beside it:

* views share their input's buffer — Broadcast, Transpose, Squeeze, ExpandDims, Slice,
  Split, Copy, StopGradient, Depends, CustomTransforms (``backend/common/common.cpp``,
  ``slicing.cpp``, ``broadcasting.cpp``); Reshape, Flatten, Unflatten share it when the
  strides allow (``prepare_reshape``) and copy otherwise;
* elementwise ops reuse an input's buffer when it is donatable — no other array or
  pending task refers to it, the same item size, its buffer no larger than the output
  plus 16 KiB (``backend/common/utils.h`` ``is_donatable``; ``unary.h``, ``binary.h``,
  ``ternary.h``); AsType, Full, Scatter and SliceUpdate copy through ``copy_cpu``, which
  donates on a vector copy (``common/copy.h``); Softmax donates a contiguous input
  (``cpu/softmax.cpp``); a fused kernel donates row-contiguous inputs one per output
  (``common/compiled.cpp`` ``compiled_allocate_outputs``) — but every output of a
  multi-output kernel holds the inputs, so none is ever donatable there;
* Matmul allocates its output and copies an input whose last two strides are not plain
  or transposed (``cpu/matmul.cpp``), LogSumExp copies a non-contiguous input
  (``cpu/logsumexp.cpp``): those copies are temporaries held until the worker ran the op;
* everything else allocates each output.
"""

from __future__ import annotations

from dataclasses import dataclass

#: ``is_donatable``'s slack: an input buffer up to this much larger still donates.
DONATION_EXTRA = 16384

VIEWS = {
    "Broadcast",
    "BroadcastAxes",
    "Transpose",
    "Squeeze",
    "ExpandDims",
    "Slice",
    "Split",
    "Copy",
    "StopGradient",
    "Depends",
    "CustomTransforms",
    "Reshape",
    "Flatten",
    "Unflatten",
    "AsStrided",
}
UNARY = {
    "Abs", "ArcCos", "ArcCosh", "ArcSin", "ArcSinh", "ArcTan", "ArcTanh", "Ceil", "Cos",
    "Conjugate", "Cosh", "Erf", "ErfInv", "Exp", "Expm1", "Floor", "Log", "Log1p",
    "LogicalNot", "Negative", "Round", "Sigmoid", "Sign", "Sin", "Sinh", "Square", "Sqrt",
    "Rsqrt", "Tan", "Tanh", "Real", "Imag", "BitwiseInvert",
}  # fmt: skip
BINARY = {
    "Add", "Divide", "Equal", "Greater", "GreaterEqual", "Less", "LessEqual",
    "LogicalAnd", "LogicalOr", "LogAddExp", "Maximum", "Minimum", "Multiply", "NotEqual",
    "Power", "Subtract", "ArcTan2", "Remainder", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
    "LeftShift", "RightShift",
}  # fmt: skip
TERNARY = {"Select"}


@dataclass
class Layout:
    """An evaluated array: its buffer, strides, ``data_size`` and flags (``array.h``)."""

    buf: int
    strides: tuple[int, ...]
    data_size: int
    contiguous: bool
    row: bool
    col: bool


def size_of(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def row_strides(shape) -> tuple[int, ...]:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return tuple(reversed(out))


def fresh_flags(shape) -> tuple[bool, bool, bool]:
    """``array::set_data(buffer)``: contiguous, row-contiguous, col-contiguous when a
    vector."""
    n = size_of(shape)
    return True, True, n <= 1 or n == max(shape, default=1)


def check_contiguity(shape, strides) -> tuple[int, bool, bool]:
    """``check_contiguity`` in ``backend/common/utils.h``."""
    no_broadcast, f, b, row, col = 1, 1, 1, True, True
    n = len(shape)
    for i in range(n):
        ri = n - 1 - i
        col &= strides[i] == f or shape[i] == 1
        row &= strides[ri] == b or shape[ri] == 1
        f *= shape[i]
        b *= shape[ri]
        if strides[i] > 0:
            no_broadcast *= shape[i]
    return no_broadcast, row, col


def collapse_contiguous_dims(shape, strides) -> tuple[list[int], list[int]]:
    """Merge adjacent dimensions laid out one after the other (``collapse_contiguous_dims``
    in ``backend/common/utils.cpp``), dropping size-1 dimensions."""
    dims = [(s, st) for s, st in zip(shape, strides, strict=False) if s != 1]
    if not dims:
        return [1], [1]
    out_shape, out_strides = [dims[0][0]], [dims[0][1]]
    for s, st in dims[1:]:
        if out_strides[-1] == st * s:
            out_shape[-1] *= s
            out_strides[-1] = st
        else:
            out_shape.append(s)
            out_strides.append(st)
    return out_shape, out_strides


def reshape_strides(in_shape, lay: Layout, out_shape) -> tuple[int, ...] | None:
    """``prepare_reshape``: the output strides of a shared reshape, or None when MLX
    must copy."""
    if size_of(in_shape) == 0 or lay.row:
        return row_strides(out_shape)
    if len(in_shape) == 0:
        return tuple(0 for _ in out_shape)
    shape, strides = collapse_contiguous_dims(in_shape, lay.strides)
    out: list[int] = []
    j = 0
    for n in out_shape:
        if j < len(shape) and shape[j] % n == 0:
            shape[j] //= n
            out.append(shape[j] * strides[j])
            j += shape[j] == 1
        elif n == 1:
            out.append(out[-1] if out else 1)
        else:
            return None
    return tuple(out)


def view_layout(name: str, args: list, in_shape, lay: Layout, out_shape) -> Layout | None:
    """The layout of a view of ``lay`` (same buffer), or None when the op must copy."""
    st = lay.strides
    if name in ("Copy", "StopGradient", "Depends", "CustomTransforms"):
        return Layout(lay.buf, st, lay.data_size, lay.contiguous, lay.row, lay.col)
    if name in ("Broadcast", "BroadcastAxes"):
        diff = len(out_shape) - len(in_shape)
        strides = [0] * len(out_shape)
        for i in range(len(in_shape)):
            strides[i + diff] = 0 if in_shape[i] == 1 else st[i]
        row, col = lay.row, lay.col
        if size_of(out_shape) > size_of(in_shape):
            row = col = False
        return Layout(lay.buf, tuple(strides), lay.data_size, lay.contiguous, row, col)
    if name == "Transpose":
        axes = args[0]
        strides = tuple(st[a] for a in axes)
        row, col = lay.row, lay.col
        if lay.contiguous and lay.data_size == size_of(in_shape):
            _, row, col = check_contiguity(out_shape, strides)
        return Layout(lay.buf, strides, lay.data_size, lay.contiguous, row, col)
    if name == "Squeeze":
        axes = {a % len(in_shape) for a in args[0]}
        strides = tuple(s for i, s in enumerate(st) if i not in axes)
        return Layout(lay.buf, strides, lay.data_size, lay.contiguous, lay.row, lay.col)
    if name == "ExpandDims":
        strides = list(st)
        shape = list(in_shape)
        for ax in sorted(a % len(out_shape) for a in args[0]):
            s = strides[ax] * shape[ax] if ax < len(strides) else 1
            strides.insert(ax, s)
            shape.insert(ax, 1)
        return Layout(lay.buf, tuple(strides), lay.data_size, lay.contiguous, lay.row, lay.col)
    if name in ("Slice", "Split", "AsStrided"):
        if name == "Slice":
            steps = args[2]
            strides = tuple(s * k for s, k in zip(st, steps, strict=False))
        elif name == "AsStrided":
            strides = tuple(args[1])
        else:
            strides = st
        if size_of(out_shape) == 0:
            return Layout(lay.buf, strides, 0, True, True, True)
        high = low = 0
        for s, n in zip(strides, out_shape, strict=False):
            if s > 0:
                high += s * (n - 1)
            else:
                low += s * (n - 1)
        data_size = high - low + 1
        no_broadcast, row, col = check_contiguity(out_shape, strides)
        if name == "Split":
            contiguous = lay.contiguous
            if no_broadcast == 1:
                contiguous = True
            elif no_broadcast != lay.data_size:
                contiguous = contiguous and (row or col)
            return Layout(lay.buf, strides, no_broadcast, contiguous, row, col)
        return Layout(lay.buf, strides, data_size, no_broadcast == data_size, row, col)
    # Reshape, Flatten, Unflatten
    strides = reshape_strides(in_shape, lay, out_shape)
    if strides is None:
        return None
    row, col = lay.row, lay.col
    if lay.row:
        n = size_of(out_shape)
        col = n <= 1 or n == max(out_shape, default=1)
    return Layout(lay.buf, strides, lay.data_size, lay.contiguous, row, col)
