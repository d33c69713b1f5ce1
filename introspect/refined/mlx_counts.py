"""The MLX closed form's derived counts, read from ``data/mlx_counts/<structure>.json``.

``python benchmarks/mlx_derive.py`` writes one JSON file per structure of
:data:`introspect.refined.mlx.STRUCTURES` (how each was made is in its ``about`` and
``derivation`` rows). A file maps each key ``<structure>/<dtype>/<eager|compiled>[/lora]``
(:func:`introspect.refined.mlx.key`) to that step's candidate moments: for each, the bytes
per element of every shape kind alive at the moment beyond the weights and Adam state, at
each depth the replays were read at (:func:`introspect.refined.mlx.counts_at` draws the
lines between them). JSON object keys are strings; the depths become ints here.

A file is read the first time one of its keys is asked for, and kept: a closed-form
command reads the one structure it needs (plain ``json`` and a path beside this file, as
``introspect.adapters.bundled`` does: importlib.resources costs start-up time, and the
files always install as ordinary files through pyproject's package-data).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from introspect._record import field, record

#: Where the files live (shipped as package-data of ``introspect.refined``).
DATA = Path(__file__).parent / "data" / "mlx_counts"
#: The checkpointed steps' counts (``python benchmarks/mlx_derive_ckpt.py``): keys
#: ``<structure>/<dtype>/<eager|compiled>/ckpt``, the same rows.
CKPT_DATA = Path(__file__).parent / "data" / "mlx_ckpt_counts"


@record
class Candidate:
    """One candidate moment of MLX's peak (``benchmarks/mlx_derive.py``'s ``fit``)."""

    #: ``backward`` (the largest moment of the whole tape) or ``optimizer_step`` (the
    #: largest within Adam's update).
    phase: str
    #: The op at that moment at the derivation shape: ``<MLX primitive>:<its output's kind>``.
    op: str
    #: Depth L → shape kind → bytes per element held (4 per FP32 tensor, 2 per BF16 one).
    at: dict[int, dict[str, int]]
    #: The derivation shape's T and V (``seq``, ``vocab``) the counts were read at.
    shape: dict[str, int]
    #: The same at depths below 4 (every structure's L = 1, 2, 3; Gemma 3's from 2).
    shallow: dict[int, dict[str, int]] = field(default_factory=dict)
    #: The same between the main depths: the dense classes' L = 5–9, the short-T
    #: candidates' L = 20, 24, 28 (``mlx_derive.py --short``); empty elsewhere.
    between: dict[int, dict[str, int]] = field(default_factory=dict)


def candidates(key: str) -> tuple[Candidate, ...]:
    """The candidates of one key (``llama/fp32/eager``); KeyError if none was derived."""
    return structure_counts(key.split("/", 1)[0])[key]


def checkpointed(key: str) -> tuple[Candidate, ...]:
    """The candidates of one checkpointed key (``llama/fp32/eager/ckpt``); KeyError if
    none was derived."""
    return structure_counts(key.split("/", 1)[0], CKPT_DATA)[key]


@cache
def structure_counts(structure: str, folder: Path = DATA) -> dict[str, tuple[Candidate, ...]]:
    """Every key of one structure's file, in the file's order (empty if there is no file:
    a structure never derived, so every one of its keys is missing)."""
    path = folder / f"{structure}.json"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    return {key: tuple(map(_candidate, rows)) for key, rows in json.loads(text)["counts"].items()}


def all_counts() -> dict[str, tuple[Candidate, ...]]:
    """Every key of every file (tests and the generator read them all)."""
    out: dict[str, tuple[Candidate, ...]] = {}
    for path in sorted(DATA.glob("*.json")):
        out.update(structure_counts(path.stem))
    return out


def _candidate(row: dict) -> Candidate:
    return Candidate(
        phase=row["phase"],
        op=row["op"],
        at=_depths(row["at"]),
        shape=row["shape"],
        shallow=_depths(row.get("shallow", {})),
        between=_depths(row.get("between", {})),
    )


def _depths(rows: dict[str, dict[str, int]]) -> dict[int, dict[str, int]]:
    return {int(depth): counts for depth, counts in rows.items()}
