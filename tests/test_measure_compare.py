"""Measurement beside the estimates: categories of breakdown terms, the largest gap, the
plot. No framework needed: Measurements here are records a backend could have made."""

from __future__ import annotations

import pytest
from specs import VARIANTS

from introspect import simplified
from introspect.breakdown import Breakdown
from introspect.measure.compare import by_category, category_of, compare, largest_gap
from introspect.measure.record import Measurement
from introspect.setup import TrainingSetup

SPEC = VARIANTS["standard"]  # tests/specs.py: d=64, L=2, 4 heads, V=512


@pytest.mark.parametrize(
    "term, category",
    [
        ("weights", "parameters"),
        ("grads", "gradients"),
        ("optimizer/adam_m", "optimizer_state"),
        ("optimizer/temporaries", "temporary"),
        ("activations/layer/attention/quadratic/probs", "activations"),
        ("loss/transient", "temporary"),
    ],
)
def test_category_of(term, category):
    assert category_of(term) == category


def test_by_category_keeps_the_total():
    b = simplified.estimate(SPEC, TrainingSetup(seq_len=32))
    assert sum(by_category(b).values()) == b.total


def test_largest_gap_names_the_category_that_differs_most():
    est = Breakdown({"weights": 100, "grads": 100, "optimizer/adam_m": 200, "activations/x": 50})
    m = Measurement(
        peak_bytes=480,
        categories={
            "parameters": 100,
            "gradients": 100,
            "optimizer_state": 200,
            "activations": 20,
            "temporary": 60,
        },
        backend="torch",
    )
    assert largest_gap(m, est) == ("temporary", 60)


def test_largest_gap_for_mlx_compares_the_lumped_working_memory():
    est = Breakdown({"weights": 100, "grads": 100, "optimizer/adam_m": 200, "activations/x": 50})
    m = Measurement(
        peak_bytes=500,
        categories={"parameters": 100, "optimizer_state": 200, "other": 200},
        backend="mlx",
    )
    assert largest_gap(m, est) == ("gradients+activations+temporary", 50)


def test_compare_ratios_use_the_measured_framework():
    setup = TrainingSetup(seq_len=32)
    total = simplified.estimate(SPEC, setup).total
    m = Measurement(
        peak_bytes=total * 2, categories={"other": total * 2}, backend="mlx", compiled=True
    )
    c = compare(SPEC, setup, m)
    assert m.framework == "mlx_compiled"
    assert c.simplified_ratio == pytest.approx(2.0)
    out = c.to_json()
    assert out["measured_over_simplified"] == pytest.approx(2.0)
    if c.refined is not None:
        assert out["refined"]["meta"].get("framework", "mlx_compiled") == "mlx_compiled"


def test_accuracy_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    from introspect import plot

    rows = [
        {"label": "a", "measured_bytes": 100, "simplified_bytes": 110, "refined_bytes": 101},
        {"label": "b", "measured_bytes": 200, "simplified_bytes": 180, "refined_bytes": None},
    ]
    path = plot.accuracy(rows, tmp_path / "acc.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
