"""The every-type results beside an earlier commit's: each row whose cells changed, and
both summaries.

Run:  .venv/bin/python benchmarks/every_type_delta.py --before 32b58db

Reads ``results/every-type.json`` as committed at ``--before`` (``git show``) and as it is
now (after ``benchmarks/every_type.py --redo ...``), and writes
``results/every-type-delta.md``: the summary lines of both (:func:`every_type.summary`)
and, per changed row, each setup's cell before → after (closed form / dry-run peak, or
``dry run``, ``refused``, ``cannot``, ``fail``). Nothing is run: both sides are the
benchmark's own rows.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import every_type  # noqa: E402

RESULTS = Path(__file__).parent / "results"
JSON = "benchmarks/results/every-type.json"


def cells(row: dict) -> dict[str, str]:
    """The row's three setups as the results markdown prints them."""
    return {k: every_type.cell_text(v) for k, v in (row.get("setups") or {}).items()}


def render(ref: str, before: list[dict], after: list[dict]) -> str:
    """The markdown: both summaries, then the rows whose cells differ."""
    old = {r["model_type"]: r for r in before}
    setups = list(every_type.SETUPS)
    lines = [
        "# Every-type results: now beside an earlier commit",
        "",
        f"Command: `.venv/bin/python benchmarks/every_type_delta.py --before {ref}` "
        f"(both sides read from `{JSON}`; the rows now come from `benchmarks/every_type.py "
        "--redo`, see every-type.md's header).",
        "",
        f"## Summary at {ref}",
        "",
        *every_type.summary(before),
        "",
        "## Summary now",
        "",
        *every_type.summary(after),
        "",
        "## Rows whose cells changed (before → now)",
        "",
        "| model_type | " + " | ".join(setups) + " |",
        "|---|" + "---|" * len(setups),
    ]
    changed = 0
    for row in after:
        was = cells(old.get(row["model_type"], {}))
        now = cells(row)
        if was == now:
            continue
        changed += 1
        out = []
        for s in setups:
            a, b = was.get(s, ""), now.get(s, "")
            out.append(b if a == b else f"{a} → {b}")
        lines.append(f"| {row['model_type']} | " + " | ".join(out) + " |")
    lines += ["", f"{changed} rows changed."]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the git commit to compare with")
    args = parser.parse_args()
    root = Path(__file__).resolve().parent.parent
    shown = subprocess.run(
        ["git", "show", f"{args.before}:{JSON}"],
        cwd=root,
        capture_output=True,
        text=True,
    )
    if shown.returncode:
        print(f"every_type_delta: git show {args.before}:{JSON}: {shown.stderr.strip()}")
        return 2
    before = json.loads(shown.stdout)
    after = json.loads((RESULTS / "every-type.json").read_text())
    text = render(args.before, before, after)
    (RESULTS / "every-type-delta.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
