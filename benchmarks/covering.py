"""A seeded greedy pairwise (strength-2) covering array: rows in which every pair of
levels of every two dimensions appears at least once.

The construction is AETG's (Cohen, Dalal, Fredman, Patton, "The AETG System: An Approach
to Testing Based on Combinatorial Design", IEEE TSE 23(7), 1997): while a pair is
uncovered, build :data:`CANDIDATES` candidate rows, each started from a random
uncovered pair with the other dimensions filled in a random order, each with the level
that covers the most still-uncovered pairs against the levels already chosen (ties
broken at random); keep the candidate covering the most. Every row covers at least the
pair it started from, so the loop ends; the result covers every pair by construction,
and :func:`uncovered` checks it. Pure Python, no dependency (allpairspy is not used).

With a validity predicate (``pairwise(..., valid=...)``) the valid rows come first,
each level chosen among those that keep the row valid (PICT's way with constraints:
Czerwonka, "Pairwise Testing in Real World", PNSQC 2006); the pairs no valid row covers
are then covered by unconstrained rows, so the array covers every pair either way and
says, by the rows' order, which pairs only invalid rows hold.

Levels are indices here (``0 .. n-1`` per dimension); the caller maps them to values.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable

#: Candidate rows built per row kept (AETG used 50; 20 gives rows within a few of it
#: here at a fraction of the time).
CANDIDATES = 20

Pair = tuple[int, int, int, int]  # (dimension i, level of i, dimension j > i, level of j)
#: A predicate on a (partial) row: a level index per dimension, None where not chosen yet.
Valid = Callable[[tuple[int | None, ...]], bool]


def all_pairs(sizes: list[int]) -> set[Pair]:
    """Every pair of levels of two different dimensions, ``i < j``."""
    return {
        (i, a, j, b)
        for i, j in itertools.combinations(range(len(sizes)), 2)
        for a in range(sizes[i])
        for b in range(sizes[j])
    }


def pairs_of(row: tuple[int, ...]) -> set[Pair]:
    """The pairs one row covers."""
    return {(i, row[i], j, row[j]) for i, j in itertools.combinations(range(len(row)), 2)}


def uncovered(rows: list[tuple[int, ...]], sizes: list[int]) -> set[Pair]:
    """The pairs of ``sizes`` that no row of ``rows`` covers (empty for a covering array)."""
    missing = all_pairs(sizes)
    for row in rows:
        missing -= pairs_of(row)
    return missing


def _gain(row: list[int | None], f: int, level: int, todo: set[Pair]) -> int:
    """Uncovered pairs that ``level`` at dimension ``f`` would cover with the chosen ones."""
    n = 0
    for g, b in enumerate(row):
        if b is None or g == f:
            continue
        pair = (f, level, g, b) if f < g else (g, b, f, level)
        n += pair in todo
    return n


def _candidate(
    sizes: list[int],
    todo: set[Pair],
    start: Pair,
    rng: random.Random,
    valid: Valid | None = None,
) -> list[int] | None:
    """A row through ``start``, each other dimension (in a random order) at the level
    covering most of ``todo``; with ``valid``, only levels keeping the partial row valid
    (None when some dimension has none)."""
    i, a, j, b = start
    row: list[int | None] = [None] * len(sizes)
    row[i], row[j] = a, b
    order = [f for f in range(len(sizes)) if f not in (i, j)]
    rng.shuffle(order)
    for f in order:
        levels = range(sizes[f])
        if valid is not None:
            levels = [lv for lv in levels if valid(tuple(row[:f]) + (lv,) + tuple(row[f + 1 :]))]
            if not levels:
                return None
        gains = {lv: _gain(row, f, lv, todo) for lv in levels}
        best = max(gains.values())
        row[f] = rng.choice([lv for lv, g in gains.items() if g == best])
    return row  # type: ignore[return-value]


#: A failed start pair is given up (left to the unconstrained rows) after this many tries.
STRIKES = 3


def _constrained(
    sizes: list[int], todo: set[Pair], rng: random.Random, candidates: int, valid: Valid
) -> list[tuple[int, ...]]:
    """Valid rows covering every pair of ``todo`` that some valid row found here covers
    (those pairs are removed from ``todo``)."""
    blank = [None] * len(sizes)

    def alone(p: Pair) -> tuple[int | None, ...]:
        row = list(blank)
        row[p[0]], row[p[2]] = p[1], p[3]
        return tuple(row)

    feasible = {p for p in todo if valid(alone(p))}
    strikes: dict[Pair, int] = {}
    rows: list[tuple[int, ...]] = []
    while feasible:
        pool = sorted(feasible)
        best: tuple[int, ...] | None = None
        best_n = -1
        for _ in range(candidates):
            start = rng.choice(pool)
            row = _candidate(sizes, todo, start, rng, valid)
            if row is None or not valid(tuple(row)):
                strikes[start] = strikes.get(start, 0) + 1
                if strikes[start] >= STRIKES:
                    feasible.discard(start)
                    if not feasible:
                        break
                    pool = sorted(feasible)
                continue
            n = len(pairs_of(tuple(row)) & todo)
            if n > best_n:
                best, best_n = tuple(row), n
        if best is None:
            continue
        rows.append(best)
        covered = pairs_of(best)
        todo -= covered
        feasible -= covered
    return rows


def _greedy(
    sizes: list[int], todo: set[Pair], rng: random.Random, candidates: int
) -> list[tuple[int, ...]]:
    """Rows covering every pair of ``todo`` (emptied), without constraints."""
    rows: list[tuple[int, ...]] = []
    while todo:
        pool = sorted(todo)
        best: tuple[int, ...] | None = None
        best_n = -1
        for _ in range(candidates):
            row = tuple(_candidate(sizes, todo, rng.choice(pool), rng))  # type: ignore[arg-type]
            n = len(pairs_of(row) & todo)
            if n > best_n:
                best, best_n = row, n
        assert best is not None
        rows.append(best)
        todo -= pairs_of(best)
    return rows


def pairwise(
    sizes: list[int], seed: int, candidates: int = CANDIDATES, valid: Valid | None = None
) -> list[tuple[int, ...]]:
    """A covering array of strength 2 over dimensions of ``sizes`` levels, drawn from
    ``seed`` (the same seed, the same rows). One dimension alone: one row per level.

    With ``valid`` (a predicate on a row whose unfilled dimensions are None): first valid
    rows cover every pair they can (each level chosen among those keeping the row
    valid); the pairs left, which no valid row found covers, are covered after them by
    rows built without the predicate, so the array still covers every pair."""
    if any(n < 1 for n in sizes):
        raise ValueError(f"every dimension needs a level; got sizes {sizes}")
    rng = random.Random(seed)
    if len(sizes) < 2:
        return [(a,) for a in range(sizes[0])] if sizes else []
    todo = all_pairs(sizes)
    rows = _constrained(sizes, todo, rng, candidates, valid) if valid is not None else []
    return rows + _greedy(sizes, todo, rng, candidates)
