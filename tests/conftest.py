"""Session summaries for the input corpus and the CLI fuzz: one line each at the end of
``pytest tests/test_corpus.py -q`` and ``pytest tests/test_fuzz_cli.py -q``.

The corpus line counts the cases of ``tests/test_corpus.py::test_case_is_clean`` that
passed, by their expected class; the fuzz line is what ``tests/test_fuzz_cli.py`` records
in :data:`FUZZ` (examples run per command, the budget and the per-example timeout).
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, settings

# The machine running the suite is shared: a property test's examples may take longer than
# hypothesis's 200 ms deadline or trip its too-slow health check under load, which would
# fail a test for the machine's speed, not for the property.
settings.register_profile("introspect", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("introspect")

#: (expected class, clean?) → count, from the corpus cases that ran this session.
CORPUS: Counter = Counter()
#: Filled by tests/test_fuzz_cli.py: {"budget": ..., "timeout_s": ..., "examples": Counter}.
FUZZ: dict = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    callspec = getattr(item, "callspec", None)
    if getattr(item, "originalname", None) != "test_case_is_clean" or callspec is None:
        return
    if report.when == "call" or (report.when == "setup" and not report.passed):
        CORPUS[(callspec.params["case"].expect, report.passed)] += 1


def pytest_terminal_summary(terminalreporter):
    if CORPUS:
        total = sum(CORPUS.values())
        clean = CORPUS[("ok", True)] + CORPUS[("refused", True)]
        by = ", ".join(
            f"{kind} {CORPUS[(kind, True)]} of {CORPUS[(kind, True)] + CORPUS[(kind, False)]}"
            for kind in ("ok", "refused")
        )
        terminalreporter.write_line(f"corpus: {total} cases, {clean} clean ({by})")
    if FUZZ.get("examples"):
        ex = FUZZ["examples"]
        per = ", ".join(f"{c} {n}" for c, n in sorted(ex.items()))
        exits = FUZZ.get("exits", {})
        terminalreporter.write_line(
            f"fuzz: {sum(ex.values())} examples ({per}; exit 0: {exits.get(0, 0)}, exit 2: "
            f"{exits.get(2, 0)}, other: {exits.get('other', 0)}); "
            f"budget {FUZZ['budget']} per command "
            f"(INTROSPECT_FUZZ_EXAMPLES), {FUZZ['timeout_s']} s per example, "
            f"commands failing: {FUZZ.get('failed', 0)}"
        )
