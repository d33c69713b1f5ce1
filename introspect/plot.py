"""Figures (matplotlib, an optional extra: ``pip install 'introspect[plot]'``).

Reports know Measurements and Breakdowns, never where a model came from; so do figures.
matplotlib is imported inside each function, so importing this module costs nothing and
works where matplotlib is absent (:func:`available` says whether figures can be drawn).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from introspect.units import GB


def available() -> bool:
    """Whether matplotlib can be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def accuracy(
    rows: Sequence[dict],
    path: str | Path,
    *,
    band: float = 0.05,
    title: str = "estimate vs measured peak",
) -> Path:
    """Estimated over measured peak for each row, simplified and refined side by side,
    with the ±``band`` target shaded. ``rows`` carry ``label``, ``measured_bytes``,
    ``simplified_bytes`` and ``refined_bytes`` (``None`` when absent)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.32 * len(rows) + 2), 4.2))
    xs = range(len(rows))
    simple = [r["simplified_bytes"] / r["measured_bytes"] for r in rows]
    ax.axhspan(1 - band, 1 + band, color="tab:green", alpha=0.15, label=f"±{band:.0%}")
    ax.axhline(1.0, color="tab:green", lw=0.8)
    ax.scatter(xs, simple, marker="o", color="tab:gray", label="simplified (seed)")
    refined = [
        (i, r["refined_bytes"] / r["measured_bytes"])
        for i, r in enumerate(rows)
        if r.get("refined_bytes")
    ]
    if refined:
        ax.scatter(*zip(*refined, strict=True), marker="x", color="tab:blue", label="refined")
    ax.set_xticks(list(xs), [r["label"] for r in rows], rotation=90, fontsize=6)
    ax.set_ylabel("estimate / measured peak")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def gb(n_bytes: int) -> float:
    return n_bytes / GB
