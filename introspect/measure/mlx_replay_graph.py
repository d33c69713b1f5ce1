"""A traced MLX step's graph: its nodes (primitives) and arrays (shapes, dtypes,
producers), as :mod:`.mlx_replay_trace` records it and :mod:`.mlx_replay_moe` rebuilds
it. Plain data: no MLX import."""

from __future__ import annotations

from dataclasses import dataclass, field

#: The bytes of one element of each MLX dtype (``mlx/dtype.h``).
ITEMSIZE = {
    "bool": 1,
    "uint8": 1,
    "int8": 1,
    "uint16": 2,
    "int16": 2,
    "float16": 2,
    "bfloat16": 2,
    "uint32": 4,
    "int32": 4,
    "float32": 4,
    "uint64": 8,
    "int64": 8,
    "float64": 8,
    "complex64": 8,
}


@dataclass
class Node:
    """One primitive: its name (``Primitive::name()``), its arguments as export
    reports them, and its input and output array indices (several outputs: siblings)."""

    name: str
    args: list
    inputs: list[int]
    outputs: list[int]


@dataclass
class Graph:
    """A traced step. Arrays are indices; ``producer[a]`` is the node computing ``a``
    (None for arrays that exist before the step). ``nodes`` are in the tape order of
    ``compile_dfs`` (inputs before their users)."""

    shapes: list[tuple[int, ...]] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    producer: list[int | None] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    #: Arrays that exist before the step and stay held by Python (the batch, constants).
    held: list[int] = field(default_factory=list)
    #: Arrays that exist before the step and only the graph holds (old state).
    released: list[int] = field(default_factory=list)
    #: The held arrays that are constants of the function (not its inputs).
    constants: list[int] = field(default_factory=list)
    #: What mx.eval evaluates, in its order.
    outputs: list[int] = field(default_factory=list)
    #: For each output, its name in the step's state ("value0"… for the step's values).
    output_names: list[str] = field(default_factory=list)
    #: The optimizer-state arrays among ``released`` (Adam's old m and v, …).
    optimizer_inputs: list[int] = field(default_factory=list)

    def itemsize(self, a: int) -> int:
        return ITEMSIZE[self.dtypes[a]]

    def nbytes(self, a: int) -> int:
        n = self.itemsize(a)
        for s in self.shapes[a]:
            n *= s
        return n

    def add_array(self, shape, dtype: str) -> int:
        self.shapes.append(tuple(int(s) for s in shape))
        self.dtypes.append(dtype)
        self.producer.append(None)
        return len(self.shapes) - 1
