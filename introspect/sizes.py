"""The seed's model-size table: synthetic standard-transformer shapes at nominal sizes.

The seed's own shapes were lost with its table; these are chosen so that the rows the
seed quotes come back: the 40M and 100M shapes give 4.064 and 7.673 GB at T = 2048
(seed: 4.069 and 7.726 GB, within 1%), and the 7B shape is the worked example's
(L = 33, d = 4096, h = 32, V = 43,520, so N = 2Vd + 12Ld² = 7.0003e9). Every head
dimension is an integer (64 or 128). Small models use an 8,192-token vocabulary, as a
small experiment on a laptop would; the 70B row is a scale check (16N ≈ 1.12 TB).
"""

from __future__ import annotations

from introspect._record import record
from introspect.spec import ModelSpec, standard_spec

#: The seed's budgets on an 8 GB M2: ~4 GB for training, 8 GB the optimistic ceiling.
BUDGETS_GB = (4, 8)


@record
class NominalShape:
    nominal: str
    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    vocab_size: int

    def spec(self) -> ModelSpec:
        return standard_spec(
            num_hidden_layers=self.num_hidden_layers,
            hidden_size=self.hidden_size,
            num_attention_heads=self.num_attention_heads,
            vocab_size=self.vocab_size,
            source=f"synthetic {self.nominal} standard transformer",
        )


SHAPES: tuple[NominalShape, ...] = (
    NominalShape("10M", 8, 256, 4, 8192),
    NominalShape("20M", 8, 384, 6, 8192),
    NominalShape("40M", 10, 512, 8, 8192),
    NominalShape("100M", 12, 768, 12, 8192),
    NominalShape("300M", 24, 1024, 16, 8192),
    NominalShape("1B", 18, 2048, 16, 32000),
    NominalShape("7B", 33, 4096, 32, 43520),
    NominalShape("70B", 86, 8192, 64, 32000),
)

DEFAULT_SEQS = (512, 2048)


def worked_example() -> ModelSpec:
    """The seed's worked example: N = 7e9 given by hand, L = 33, d = 4096, h = 32,
    V = 43,520 (the 7B row's shape, whose own N by the formula is 7.0003e9)."""
    seven = shape("7B")
    return standard_spec(
        num_hidden_layers=seven.num_hidden_layers,
        hidden_size=seven.hidden_size,
        num_attention_heads=seven.num_attention_heads,
        vocab_size=seven.vocab_size,
        num_parameters=7_000_000_000,
        source="the seed's worked example, N = 7e9 by hand",
    )


def shape(nominal: str) -> NominalShape:
    """The shape for a nominal size such as ``"40M"``."""
    for s in SHAPES:
        if s.nominal.lower() == nominal.lower():
            return s
    known = ", ".join(s.nominal for s in SHAPES)
    raise KeyError(f"no nominal size {nominal!r}; known: {known}")
