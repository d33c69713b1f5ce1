"""Every case of the bad-input corpus (``tests/corpus/``) is clean: an ``ok`` case exits 0
with an answer on stdout (JSON when ``--json``); a ``refused`` case exits 2 with exactly
one line on stderr naming the file or flag; never a traceback, a hang (a generous bound,
enforced by a timer in process and by the subprocess timeout — a hang check, not a timing
assertion) or a file written next to the input (``tests/corpus/runner.py`` judges).

In-process cases run through :func:`introspect.cli.main`; the environment and Hub cases
run in subprocesses (huggingface_hub reads its environment at import), all of them at
once in a small thread pool the first time one is asked for, each against its own
loopback Hub (``tests/hubserver.py``).

``pytest tests/test_corpus.py -q`` ends with one summary line (``tests/conftest.py``):
``corpus: N cases, M clean (ok a of A, refused b of B)``.
"""

from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor

import pytest
from corpus.cases import Case, all_cases
from corpus.runner import Outcome, problem, run

from introspect.cli import COMMANDS, build_parser

CASES = all_cases()


@pytest.fixture(scope="module")
def subprocess_results(tmp_path_factory) -> dict[str, Outcome]:
    """Every subprocess case, run four at a time, by id."""
    root = tmp_path_factory.mktemp("corpus-sub")

    def one(index_case):
        index, case = index_case
        return case.id, run(case, root / f"case{index}", root / f"home{index}")

    todo = [(i, c) for i, c in enumerate(CASES) if c.subprocess]
    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(pool.map(one, todo))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case_is_clean(case: Case, tmp_path, request):
    if case.subprocess:
        outcome = request.getfixturevalue("subprocess_results")[case.id]
    else:
        outcome = run(case, tmp_path / "case")
    why = problem(case, outcome)
    assert why is None, f"{case.expect} case: {why}"


def test_corpus_is_large_and_covers_every_kind():
    kinds = {c.id.split("/")[0] for c in CASES}
    assert kinds == {
        *("config", "safetensors", "index", "args", "env", "hub"),
        *("flags", "ok", "contra", "quant", "format", "fs", "tcfg"),
    }
    assert len(CASES) >= 400
    assert len({c.id for c in CASES}) == len(CASES)
    assert {c.expect for c in CASES} == {"ok", "refused"}
    assert all(c.names for c in CASES if c.expect == "refused")


def _options(command: str) -> set[str]:
    parser = build_parser(command)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {a.option_strings[-1] for a in sub.choices[command]._actions if a.option_strings} - {
        "--help"
    }


@pytest.mark.parametrize("command", COMMANDS)
def test_every_flag_of_every_command_has_cases(command):
    """A flag added to a command without corpus cases fails here."""
    used = {a for c in CASES if c.argv and c.argv[0] == command for a in c.argv}
    missing = sorted(_options(command) - used)
    assert not missing, f"introspect {command}: no corpus case uses {missing}"
