"""benchmarks/combinations.py: its covering array covers every pair of levels, and a few
cheap rows run end to end through the closed form and the dry run.

No accuracy threshold here (the benchmark's results file holds the accuracy); these
check the generator's guarantee and that a row's outcome is what the sides say."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def _load(name: str):
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while it runs
    spec.loader.exec_module(module)
    return module


covering = _load("covering")
combinations = _load("combinations")


def _sizes() -> list[int]:
    return [len(d.levels) for d in combinations.dimensions()]


@pytest.mark.parametrize("seed", [0, 7, 2026])
def test_array_covers_every_pair_of_levels(seed):
    sizes = _sizes()
    rows = covering.pairwise(sizes, seed)
    assert all(len(r) == len(sizes) for r in rows)
    assert all(0 <= lv < n for r in rows for lv, n in zip(r, sizes, strict=True))
    # Checked pair by pair, independently of the generator's own bookkeeping.
    for (i, ni), (j, nj) in itertools.combinations(enumerate(sizes), 2):
        seen = {(r[i], r[j]) for r in rows}
        assert seen == set(itertools.product(range(ni), range(nj))), (i, j)
    assert covering.uncovered(rows, sizes) == set()
    assert covering.pairwise(sizes, seed) == rows  # the seed is the draw
    # Far fewer rows than the product, and no fewer than the two largest dimensions need.
    largest = sorted(sizes)[-2:]
    assert largest[0] * largest[1] <= len(rows) < 2 * largest[0] * largest[1]


def test_constrained_array_puts_valid_rows_first_and_still_covers_every_pair():
    sizes = [5, 3, 4, 2, 3]
    banned = {(1, 2), (2, 3)}  # (dimension, level) that never runs

    def valid(row):
        if any((f, lv) in banned for f, lv in enumerate(row) if lv is not None):
            return False
        return not (row[0] == 4 and row[3] == 1)  # a pair refused together

    rows = covering.pairwise(sizes, 3, valid=valid)
    assert covering.uncovered(rows, sizes) == set()
    ok = [valid(r) for r in rows]
    first_invalid = ok.index(False)
    assert all(ok[:first_invalid]) and not any(ok[first_invalid:])
    # Every pair a valid row could hold is held by one of the valid rows.
    held = set().union(*(covering.pairs_of(r) for r in rows[:first_invalid]))
    for p in covering.all_pairs(sizes):
        i, a, j, b = p
        alone = [None] * len(sizes)
        alone[i], alone[j] = a, b
        if valid(tuple(alone)):
            assert p in held, p


def test_draw_with_runnable_levels_spends_the_first_rows_on_them():
    dims = combinations.dimensions()
    runnable = {(d.name, d.levels[0]) for d in dims}
    runnable |= {("family", f) for f in list(combinations.FAMILIES)[:3]}
    runnable |= {("precision", p) for p in ("bf16", "amp")}
    rows = combinations.draw(1, dims, runnable)
    sizes = [len(d.levels) for d in dims]
    index = [{v: i for i, v in enumerate(d.levels)} for d in dims]
    as_idx = [tuple(index[k][r[d.name]] for k, d in enumerate(dims)) for r in rows]
    assert covering.uncovered(as_idx, sizes) == set()
    usable = [all((k, v) in runnable for k, v in r.items()) for r in rows]
    assert usable[0] and False in usable
    cut = usable.index(False)
    assert all(usable[:cut]) and not any(usable[cut:])
    # family × precision over the runnable levels: 3 × 3 pairs, each in a usable row.
    held = {(r["family"], r["precision"]) for r in rows[:cut]}
    families = list(combinations.FAMILIES)[:3]
    assert held >= set(itertools.product(families, ("fp32", "bf16", "amp")))


def _base(**changes):
    return combinations.base(combinations.dimensions()) | changes


def test_a_cheap_row_runs_both_sides():
    row = combinations.run_row(_base(family="llama, head_dim 48", d=256, seq=128))
    assert row["outcome"] == "ran", row.get("reason")
    assert row["dry_run"] > 0 and row["closed_form"] > 0
    assert row["error"] == row["closed_form"] / row["dry_run"] - 1
    assert row["dry_run_phase"] and row["closed_form_phase"]
    # The categories are the tracker's, each side's summing to its peak.
    assert sum(row["dry_run_categories"].values()) == row["dry_run"]
    assert sum(row["closed_form_categories"].values()) == row["closed_form"]
    assert row["cause"]["category"] in {*row["dry_run_categories"], *row["closed_form_categories"]}


def test_rows_a_side_refuses_are_reported_with_the_reason():
    off = combinations.run_row(_base(offload="optimizer"))
    assert off["outcome"] == "dry run refused" and "--offload optimizer" in off["reason"]
    assert "closed_form" not in off and "dry_run" not in off
    zero2 = combinations.run_row(_base(sharding="zero2", devices=8))
    assert zero2["outcome"] == "no dry run" and "ZeRO-2" in zero2["reason"]
    sdpa = combinations.run_row(_base(family="gpt_oss", attention="memory_efficient"))
    assert sdpa["outcome"] == "closed form refused" and "SDPA" in sdpa["reason"]


def test_zero1s_largest_rank_is_the_largest_of_every_rank():
    """ZeRO-1's ranks differ only in their partition: the rank holding the most
    parameters, found from rank 0's own partition, is the largest of all D ranks."""
    fake_sharded = pytest.importorskip("introspect.measure.fake_sharded")
    levels = _base(sharding="zero1", devices=4)
    setup, raw, where, spec = combinations.prepare(levels)
    chosen = combinations.largest_rank(fake_sharded, raw, where, spec, setup)
    every = fake_sharded.dry_run(raw, where, spec, setup, ranks=(0, 1, 2, 3))
    assert chosen.peak_bytes == max(r.peak_bytes for r in every.ranks)
