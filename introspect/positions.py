"""A sequence longer than a learned position table: every command refuses it.

A model with learned absolute positions (GPT-2's ``wpe``, ``n_positions`` rows) has no
row for position ``n_positions`` or beyond: the real model raises (``nn.Embedding``'s
index check, ``transformers/models/gpt2/modeling_gpt2.py``), so no memory figure exists
for that step and an estimate of one would describe a model that cannot run. Rotary and
other computed positions have no table and are not checked.
"""

from __future__ import annotations

from introspect.errors import IntrospectError
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec


def check_positions(spec: ModelSpec, setup: TrainingSetup) -> None:
    """Raise IntrospectError (one line, naming --seq) when ``setup.seq_len`` exceeds the
    spec's learned position table."""
    table = spec.max_position_embeddings
    if spec.position_embedding != "learned" or table is None:
        return
    if setup.seq_len > table:
        name = spec.source or spec.model_type
        raise IntrospectError(
            f"--seq {setup.seq_len}: {name} has a learned position table of {table:,} rows "
            f"(n_positions / max_position_embeddings); the real model cannot run a longer "
            f"sequence. Use --seq {table} or less"
        )
