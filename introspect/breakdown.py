"""Breakdown: named memory terms, in bytes, that add up to a total.

Terms are slash paths (``weights``, ``optimizer/adam_m``,
``activations/layer/attention/scores``) so any two estimators can be laid side by side
and any prefix summed. The total is always the sum of the terms; nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from introspect._record import field, record

TYPE_CHECKING = False  # typing's flag without importing typing (see introspect._record)
if TYPE_CHECKING:
    from typing import Any


@record
class Breakdown:
    """Ordered ``{term: bytes}`` plus a label for the estimator that made it.

    ``notes`` carries per-term explanations (why a term has the size it has), keyed by the
    same paths; ``meta`` carries anything else a report may print (a peak phase, say).
    """

    terms: Mapping[str, int]
    label: str = ""
    notes: Mapping[str, str] = field(default_factory=dict)
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, value in self.terms.items():
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"term {name!r} must be an integer number of bytes, got {value!r}")
        # Freeze the mapping so a breakdown is a value.
        object.__setattr__(self, "terms", dict(self.terms))

    @property
    def total(self) -> int:
        """Sum of every term, in bytes."""
        return sum(self.terms.values())

    def __getitem__(self, name: str) -> int:
        return self.terms[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.terms)

    def __len__(self) -> int:
        return len(self.terms)

    def get(self, name: str, default: int = 0) -> int:
        return self.terms.get(name, default)

    def items(self):
        return self.terms.items()

    def sum(self, prefix: str) -> int:
        """Bytes of every term equal to ``prefix`` or below it (``activations`` sums
        ``activations/...``)."""
        return sum(v for k, v in self.terms.items() if k == prefix or k.startswith(prefix + "/"))

    def group(self, depth: int = 1) -> dict[str, int]:
        """Terms summed by their first ``depth`` path components, in first-seen order."""
        out: dict[str, int] = {}
        for name, value in self.terms.items():
            key = "/".join(name.split("/")[:depth])
            out[key] = out.get(key, 0) + value
        return out

    def to_json(self) -> dict[str, Any]:
        """JSON-ready: bytes as integers, with ``total_bytes``."""
        out: dict[str, Any] = {
            "label": self.label,
            "terms": dict(self.terms),
            "total_bytes": self.total,
        }
        if self.notes:
            out["notes"] = dict(self.notes)
        if self.meta:
            out["meta"] = dict(self.meta)
        return out
