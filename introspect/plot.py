"""Figures (matplotlib, an optional extra: ``pip install 'introspect[plot]'``).

Reports know Measurements and Breakdowns, never where a model came from; so do figures.
matplotlib is imported inside each function, so importing this module costs nothing and
works where matplotlib is absent (:func:`available` says whether figures can be drawn).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from introspect.breakdown import Breakdown
from introspect.errors import IntrospectError
from introspect.units import GB


def problem() -> str | None:
    """Why figures cannot be drawn here, or None when they can: matplotlib is missing, or
    importing it (or selecting its Agg backend, or pyplot) fails — a broken install raises
    anything from ImportError to AttributeError or OSError (a bad font cache), so every
    exception is caught and named."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot  # noqa: F401
    except ModuleNotFoundError as err:
        if err.name and err.name.split(".")[0] == "matplotlib":
            return "--plot needs matplotlib, which is not installed: pip install 'introspect[plot]'"
        return _broken(err)
    except Exception as err:  # a broken install: report it, never a traceback
        return _broken(err)
    return None


def _broken(err: BaseException) -> str:
    text = " ".join(str(err).split())[:200]
    return (
        f"--plot: matplotlib is installed but cannot be used ({type(err).__name__}: {text}); "
        "reinstall it: pip install --force-reinstall 'introspect[plot]'"
    )


def available() -> bool:
    """Whether matplotlib can be imported and used (:func:`problem` says why not)."""
    return problem() is None


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
    plt = _pyplot()
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
    return _save(fig, path)


#: The largest figure drawn, in GB: matplotlib needs floats, and past ~1e300 its axis
#: arithmetic overflows (only ``--force`` lets such a value through).
MAX_DRAWN_GB = 1e300


def gb(n_bytes: int | float) -> float:
    """Bytes as decimal GB for an axis; a value too large to draw (an integer past a
    float's range, or over :data:`MAX_DRAWN_GB`) is one line, not an OverflowError."""
    try:
        value = n_bytes / GB
    except OverflowError:
        value = math.inf
    if not abs(value) <= MAX_DRAWN_GB:
        raise IntrospectError(
            "--plot: a value is too large to draw (over 1e300 GB, accepted only by --force); "
            "drop --plot, or use smaller values"
        )
    return value


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str | Path) -> Path:
    """Save as PNG or SVG, by the file's suffix (anything else is a ValueError), through
    :func:`introspect.files.write_output`: a failed write is one line with the path and
    the OS's reason."""
    from introspect.files import write_output

    path = Path(path)
    kind = path.suffix.lower()[1:]
    if kind not in ("png", "svg"):
        raise ValueError(f"--plot {path}: give a .png or .svg file name")
    import matplotlib.pyplot as plt

    try:
        fig.tight_layout()
        return write_output(path, lambda f: fig.savefig(f, format=kind, dpi=130))
    finally:
        plt.close(fig)


def part_of(term: str) -> str:
    """The part a term is drawn under: weights, grads, optimizer state, or activations by
    part (embedding, attention, feed-forward, norms, logits, LoRA)."""
    head = term.split("/")[0]
    if head != "activations":
        return {"grads": "gradients", "optimizer": "optimizer"}.get(head, head)
    parts = term.split("/")
    if len(parts) > 2 and parts[1] == "layer":
        return "activations: " + {"layernorm": "norms"}.get(parts[2], parts[2]).replace("_", "-")
    return "activations: " + parts[1].replace("_", " ")


def breakdown_stack(breakdowns: dict[str, Breakdown], path: str | Path, title: str) -> Path:
    """One stacked bar per breakdown (e.g. seed vs refined), parts as :func:`part_of`."""
    plt = _pyplot()
    parts: list[str] = []
    for b in breakdowns.values():
        for term in b.terms:
            p = part_of(term)
            if p not in parts:
                parts.append(p)
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    names = list(breakdowns)
    bottom = [0.0] * len(names)
    cmap = plt.get_cmap("tab20")
    for k, p in enumerate(parts):
        values = [gb(sum(v for t, v in b.items() if part_of(t) == p)) for b in breakdowns.values()]
        ax.bar(names, values, bottom=bottom, label=p, color=cmap(k % 20))
        bottom = [x + y for x, y in zip(bottom, values, strict=True)]
    ax.set_ylabel("GB (decimal)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return _save(fig, path)


def fit_curves(spec, setup, budget: int, need, path: str | Path) -> Path:
    """Memory against T (at the setup's B) and against B (at its T), the budget as a
    line, and the T where the saved T² terms overtake the rest of the activations."""
    from introspect import fit

    plt = _pyplot()
    fig, (ax_t, ax_b) = plt.subplots(1, 2, figsize=(10, 4))
    T0, B0 = setup.seq_len, setup.batch_size
    seqs = sorted({max(1, int(T0 * 2**k)) for k in [x / 2 for x in range(-8, 5)]})
    batches = list(range(1, max(8, 4 * B0) + 1))
    ax_t.plot(seqs, [gb(need(spec, setup.replace(seq_len=t))) for t in seqs], marker=".")
    ax_b.plot(batches, [gb(need(spec, setup.replace(batch_size=b))) for b in batches], marker=".")
    for ax in (ax_t, ax_b):
        ax.axhline(gb(budget), color="tab:red", lw=1, label=f"budget {gb(budget):.1f} GB")
        ax.set_ylabel("GB (decimal)")
    takeover = fit.quadratic_takeover(spec, setup)
    if takeover and seqs[0] <= takeover <= seqs[-1]:
        ax_t.axvline(
            takeover, color="tab:gray", ls="--", lw=1, label=f"T² takes over, T={takeover}"
        )
    ax_t.set_xscale("log", base=2)
    ax_t.set_xlabel(f"sequence length T (B={B0})")
    ax_b.set_xlabel(f"micro-batch B (T={T0})")
    ax_t.legend(fontsize=7)
    ax_b.legend(fontsize=7)
    fig.suptitle(f"{spec.source or spec.model_type}: memory vs T and B", fontsize=9)
    return _save(fig, path)


def model_bars(rows: Sequence[dict], path: str | Path, title: str) -> Path:
    """One pair of bars per model: the seed's total and the refined execution peak
    (``rows`` carry ``label``, ``seed_bytes`` and ``refined_bytes``)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(rows) + 2), 4.5))
    xs = range(len(rows))
    w = 0.4
    ax.bar([x - w / 2 for x in xs], [gb(r["seed_bytes"]) for r in rows], w, label="seed")
    ax.bar([x + w / 2 for x in xs], [gb(r["refined_bytes"]) for r in rows], w, label="refined")
    ax.set_xticks(list(xs), [r["label"] for r in rows], rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("GB (decimal)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    return _save(fig, path)


#: The measured categories and which estimate terms fall in each.
MEASURED_CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations", "temporary")


def estimate_category(term: str) -> str:
    """The measured category an estimate term is compared with."""
    if term.startswith("weights"):
        return "parameters"
    if term.startswith("grads"):
        return "gradients"
    if term == "optimizer/temporaries":
        return "temporary"
    if term.startswith("optimizer"):
        return "optimizer_state" if "master" not in term else "parameters"
    if term.endswith("/grad") or "mlx" in term:
        return "temporary"
    return "activations"


def measured_vs_estimate(pairs: Sequence[tuple[str, dict, Breakdown]], path) -> Path:
    """For each (label, measured categories, refined breakdown): bars of estimate vs
    measured per category."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(pairs), figsize=(5 * len(pairs), 4), squeeze=False)
    for ax, (label, measured, b) in zip(axes[0], pairs, strict=True):
        est = dict.fromkeys(MEASURED_CATEGORIES, 0)
        for term, value in b.items():
            est[estimate_category(term)] += value
        xs = range(len(MEASURED_CATEGORIES))
        ax.bar([x - 0.2 for x in xs], [gb(measured.get(c, 0)) for c in est], 0.4, label="measured")
        ax.bar([x + 0.2 for x in xs], [gb(est[c]) for c in est], 0.4, label="refined estimate")
        ax.set_xticks(list(xs), [c.replace("_", " ") for c in est], rotation=30, fontsize=7)
        ax.set_title(label, fontsize=8)
        ax.set_ylabel("GB (decimal)")
        ax.legend(fontsize=7)
    return _save(fig, path)
