"""Published, measured training-memory figures beside introspect's closed form.

Run:  .venv/bin/python benchmarks/published.py             # the table, well under a second
      .venv/bin/python benchmarks/published.py --markdown  # the same as Markdown
      .venv/bin/python benchmarks/published.py --json      # every row's numbers, bytes
      .venv/bin/python benchmarks/published.py --only ID   # one row (repeatable)
      .venv/bin/python benchmarks/published.py --write     # also benchmarks/results/published.md

Each row of ``benchmarks/data/published_runs.json`` is one figure a project published
from a real run (torchtune's README tables, Answer.AI's fsdp_qlora benchmarks, Qwen's
profiling table), with the setup its source states, what the figure measures
(``torch.cuda.max_memory_allocated``, ``max_memory_reserved``, the caching allocator's
active peak, or a statistic the source does not name), the figure as printed, the URL
pinned to the commit read and the line quoted. Nothing in the file is computed.

For each row, its ``flags`` go through ``introspect profile``'s own parser
(:func:`introspect.cli.build_parser`, then :func:`introspect.commands._args.setup_from_args`),
the model resolves from the bundled data (``adapters/data``), the closed form is checked
(:func:`introspect.unmodelled.check_closed_form`) and priced
(:func:`introspect.commands.profile.estimates`), the same path ``introspect profile``
takes. Printed: the refined estimate's per-device execution peak, the seed's simplified
total, the published figure in decimal GB (GiB = 2^30 bytes, GB = 1e9, as each source
prints it) and ratio = refined estimate / published. Where the figure is one of
torch.cuda's statistics (``torch_allocator``), the estimate's terms outside torch's caching
allocator (:data:`OUTSIDE_TORCH`) are left out of the ratio: those statistics never see
them. What the flags cannot express is
each row's ``not_expressed`` list, printed under the table.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "published_runs.json"
RESULTS = Path(__file__).resolve().parent / "results" / "published.md"
#: Execution terms held outside torch's caching allocator: bitsandbytes' paged optimizer
#: state is CUDA managed memory (bitsandbytes/functional.py get_paged: cget_managed_ptr),
#: which torch.cuda's statistics never see.
OUTSIDE_TORCH = ("optimizer/paged_state",)
#: Bytes per unit as the sources print them.
UNIT_BYTES = {"GiB": 2**30, "GB": 10**9}
GROUPS = {
    "a": "LoRA/QLoRA with FSDP",
    "b": "LoRA/QLoRA on one GPU",
    "c": "chunked loss and its neighbours in torchtune's flag table",
}


def load_rows(path: Path = DATA) -> list[dict]:
    """The published rows, in file order."""
    return json.loads(path.read_text(encoding="utf-8"))["rows"]


def profile_args(row: dict) -> argparse.Namespace:
    """``introspect profile MODEL FLAGS…`` parsed by the CLI's own parser (a bad flag
    exits 2 with argparse's one line, as on the command line)."""
    from introspect.cli import build_parser

    return build_parser("profile").parse_args(["profile", row["model"], *row["flags"]])


def setup_for(row: dict):
    """The row's TrainingSetup, as ``introspect profile`` builds it from the flags."""
    from introspect.commands._args import setup_from_args

    return setup_from_args(profile_args(row))


def published_bytes(row: dict) -> int:
    """The published figure in bytes, in the unit the source prints."""
    return round(row["value"] * UNIT_BYTES[row["unit"]])


def estimate_row(row: dict) -> dict:
    """The closed form for one row beside its figure: bytes and the ratio."""
    from introspect.adapters import resolve

    from introspect.commands.profile import estimates
    from introspect.unmodelled import check_closed_form

    setup = setup_for(row)
    model = resolve(row["model"])
    check_closed_form(model.spec, setup)
    results = estimates(model.spec, setup)
    refined = results["refined"]
    published = published_bytes(row)
    outside = sum(refined.execution.terms.get(t, 0) for t in OUTSIDE_TORCH)
    # A torch.cuda statistic cannot see memory outside torch's allocator: compare like with like.
    compared = refined.total - outside if row["torch_allocator"] else refined.total
    return {
        "id": row["id"],
        "group": row["group"],
        "model": row["model"],
        "devices": row["devices"],
        "statistic": row["statistic"],
        "figure": row["figure"],
        "unit": row["unit"],
        "published_bytes": published,
        "refined_bytes": refined.total,
        "outside_torch_bytes": outside,
        "compared_bytes": compared,
        "peak_phase": refined.peak_phase,
        "simplified_bytes": results["simplified"].total,
        "ratio": compared / published,
        "not_expressed": list(row["not_expressed"]),
        "url": row["url"],
    }


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f}"


def _as_printed(result: dict) -> str:
    """The figure as the source prints it, its unit added where a table column gives it."""
    figure = result["figure"]
    return figure if any(c.isalpha() for c in figure) else f"{figure} {result['unit']}"


HEADER = (
    "row",
    "D",
    "refined GB",
    "compared GB",
    "seed GB",
    "published",
    "as GB",
    "ratio",
    "measures",
)


def table_rows(results: list[dict]) -> list[tuple[str, ...]]:
    """One tuple of cells per result, in :data:`HEADER`'s order."""
    return [
        (
            r["id"],
            str(r["devices"]),
            _gb(r["refined_bytes"]),
            _gb(r["compared_bytes"]),
            _gb(r["simplified_bytes"]),
            _as_printed(r),
            _gb(r["published_bytes"]),
            f"{r['ratio']:.2f}",
            r["statistic"],
        )
        for r in results
    ]


def render_text(results: list[dict]) -> str:
    """A fixed-width table, the groups apart, and each row's unexpressed settings."""
    cells = [HEADER, *table_rows(results)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADER))]
    left = (0, len(HEADER) - 1)  # the row id and the statistic
    fmt = "  ".join(f"{{:{'<' if i in left else '>'}{w}}}" for i, w in enumerate(widths))
    lines = [fmt.format(*HEADER)]
    for group, label in GROUPS.items():
        rows = [c for c, r in zip(cells[1:], results, strict=True) if r["group"] == group]
        if rows:
            lines.append(f"-- ({group}) {label}")
            lines += [fmt.format(*c) for c in rows]
    lines.append("")
    lines.append(
        "compared = the refined estimate (per-device execution peak) less its memory outside "
        "torch's allocator where the figure is a torch.cuda statistic; ratio = compared / published"
    )
    lines.append("not expressed by today's flags:")
    for r in results:
        lines.append(f"  {r['id']}: " + "; ".join(r["not_expressed"]))
    return "\n".join(lines)


def render_markdown(results: list[dict]) -> str:
    """The same table as Markdown, by group, with each row's source link."""
    head = ["group", *HEADER, "source"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    ordered = sorted(results, key=lambda r: list(GROUPS).index(r["group"]))
    for cells, r in zip(table_rows(ordered), ordered, strict=True):
        lines.append("| " + " | ".join([r["group"], *cells, f"[link]({r['url']})"]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    fmt = parser.add_mutually_exclusive_group()
    fmt.add_argument("--markdown", action="store_true", help="print a Markdown table")
    fmt.add_argument("--json", action="store_true", help="print every row's numbers (bytes)")
    parser.add_argument("--only", action="append", metavar="ID", help="only this row")
    parser.add_argument("--write", action="store_true", help=f"also write {RESULTS.name}")
    args = parser.parse_args(argv)
    rows = load_rows()
    if args.only:
        unknown = sorted(set(args.only) - {r["id"] for r in rows})
        if unknown:
            parser.error(f"no row {', '.join(unknown)} in {DATA.name}")
        rows = [r for r in rows if r["id"] in args.only]
    results = [estimate_row(r) for r in rows]
    if args.json:
        print(json.dumps(results, indent=2))
    elif args.markdown:
        print(render_markdown(results))
    else:
        print(render_text(results))
    if args.write:
        RESULTS.write_text(results_file(results), encoding="utf-8")
    return 0


def results_file(results: list[dict]) -> str:
    """``results/published.md``: how it was made, the Markdown table, what the flags
    cannot express per row."""
    import datetime
    import subprocess

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parent,
    ).stdout.strip()
    lines = [
        "# Published, measured runs beside the closed form",
        "",
        f"Made by `python benchmarks/published.py --write` at commit {commit or 'unknown'}, "
        f"{datetime.date.today().isoformat()}. The figures and their sources: "
        "`benchmarks/data/published_runs.json`. compared = the refined estimate (per-device "
        "execution peak) less its memory outside torch's allocator where the figure is a "
        "torch.cuda statistic; ratio = compared / published; 'measures' is the statistic "
        "the source names (unnamed: it names none).",
        "",
        render_markdown(results),
        "",
        "Not expressed by today's flags:",
        "",
    ]
    lines += [f"- `{r['id']}`: " + "; ".join(r["not_expressed"]) for r in results]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
