"""Run the whole corpus without pytest and print what is not clean, then the summary
line: ``python tests/corpus/run.py [--markdown] [ID-PREFIX ...]``.

With ``--markdown`` the failures are a table (case, command, what happened, expected),
the form of the findings file for the lead."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from corpus.cases import all_cases  # noqa: E402
from corpus.runner import problem, run  # noqa: E402


def main(argv: list[str]) -> int:
    markdown = "--markdown" in argv
    prefixes = [a for a in argv if a != "--markdown"]
    cases = [c for c in all_cases() if not prefixes or c.id.startswith(tuple(prefixes))]
    bad, counts = [], {"ok": [0, 0], "refused": [0, 0]}
    with tempfile.TemporaryDirectory() as root:
        slow = []
        for i, case in enumerate(cases):
            start = time.monotonic()
            why = problem(case, run(case, Path(root) / f"case{i}", Path(root) / f"home{i}"))
            slow.append((time.monotonic() - start, case.id))
            counts[case.expect][1] += 1
            if why is None:
                counts[case.expect][0] += 1
                continue
            bad.append((case, why))
    for seconds, case_id in sorted(slow, reverse=True)[:5]:
        print(f"slowest: {case_id} {seconds:.1f} s", file=sys.stderr)
    if markdown:
        print("| case | command | what happened | expected |")
        print("|---|---|---|---|")
    for case, why in bad:
        cmd = " ".join(a if a and " " not in a else repr(a) for a in case.argv)
        want = (
            "exit 0 with an answer"
            if case.expect == "ok"
            else ("exit 2, one line naming " + " or ".join(case.names))
        )
        if markdown:
            row = (case.id, f"`introspect {cmd}`"[:200], why.replace("|", "\\|"), want)
            print("| " + " | ".join(row) + " |")
        else:
            print(f"{case.id}: {why}\n    introspect {cmd}\n    expected {want}")
    clean = counts["ok"][0] + counts["refused"][0]
    by = ", ".join(f"{k} {v[0]} of {v[1]}" for k, v in counts.items())
    print(f"corpus: {len(cases)} cases, {clean} clean ({by})")
    return 0 if not bad else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
