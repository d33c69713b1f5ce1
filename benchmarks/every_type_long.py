"""Every modelled every-type cell again at a longer sequence: the closed form over the dry
run of the real transformers class (FakeTensorMode), the default config shrunk as
``benchmarks/every_type.py`` shrinks it, B=1, each setup with T changed.

    .venv/bin/python benchmarks/every_type_long.py --seq 512
    .venv/bin/python benchmarks/every_type_long.py --seq 512 --redo TYPE,TYPE   # in place

At T = 64 most cells peak at the optimizer step, so they say little about the saved
activations and the backward moments; at a longer T the activation side dominates. Only
the cells ``every-type.json`` prices in closed form are run (the dry-run answers and the
refusals have no closed form to check). Writes ``every-type-long.json`` and
``every-type-long.md`` beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

RESULTS = Path(__file__).resolve().parent / "results"


def cell(model_type: str, shape: str | None, name: str, seq_len: int) -> dict:
    """One cell: the dry run's peak, the closed form and their ratio, or the failure."""
    import every_type as et
    from introspect.adapters.hf_config import spec_from_config

    from introspect import refined
    from introspect._record import replace
    from introspect.measure import runner

    row = et.count_row(model_type)
    small = et.shrink(row["raw"], widths=shape is None)
    spec = spec_from_config(small, source=model_type)
    setup = replace(et.setup_for(name), seq_len=seq_len)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            measured, _ = runner.measure(
                spec, setup, device="fake", impl="transformers", census=False,
                config=(small, model_type),
            )  # fmt: skip
        closed = refined.estimate(spec, setup).total
    except Exception as e:  # noqa: BLE001 - reported in the cell, the survey goes on
        return {"note": et._first(e)}
    return {"dry_run": measured.peak_bytes, "closed_form": closed,
            "ratio": closed / measured.peak_bytes}  # fmt: skip


def render(rows: list[dict], seq_len: int, seconds: float, command: str) -> str:
    names = ["fp32 eager", "amp ckpt", "bf16 sdpa"]
    lines = [
        f"# Every modelled model_type at T = {seq_len}: closed form beside the dry run",
        "",
        f"`{command}` ({seconds:.0f} s). The default config shrunk as "
        "`benchmarks/every_type.py` shrinks it, B=1; only the cells every-type.md prices in "
        "closed form. Cells are closed form / dry-run peak.",
        "",
    ]
    for name in names:
        cells = [r["setups"][name] for r in rows if name in r["setups"]]
        ratios = [c["ratio"] for c in cells if "ratio" in c]
        within3 = sum(abs(x - 1) <= 0.03 for x in ratios)
        within5 = sum(0.03 < abs(x - 1) <= 0.05 for x in ratios)
        failed = len(cells) - len(ratios)
        lines.append(
            f"- {name}: {len(ratios)} cells, {within3} within ±3%, {within5} more within ±5%"
            + (f", {failed} failed" if failed else "")
            + (f"; range {min(ratios):.3f}–{max(ratios):.3f}" if ratios else "")
        )
    lines += ["", "| model_type | " + " | ".join(names) + " |", "|---|---:|---:|---:|"]
    for r in rows:
        out = []
        for name in names:
            c = r["setups"].get(name)
            if c is None:
                out.append("")
            elif "ratio" in c:
                mark = "" if abs(c["ratio"] - 1) <= 0.03 else " **"
                out.append(f"{c['ratio']:.3f}{mark}")
            else:
                out.append(f"failed: {c['note'][:80]}")
        lines.append(f"| {r['model_type']} | " + " | ".join(out) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=512, help="tokens per sample (T)")
    parser.add_argument("--only", help="comma-separated model_types (exact names)")
    parser.add_argument(
        "--redo",
        help="comma-separated model_types run again, the other rows kept from the "
        "every-type-long.json already there (same --seq)",
    )
    parser.add_argument("--results", type=Path, default=RESULTS, help="results folder")
    args = parser.parse_args()
    if args.seq < 1:
        parser.error("--seq: must be at least 1")
    if args.redo and args.only:
        parser.error("--redo and --only: give one")
    every = json.loads((args.results / "every-type.json").read_text())
    only = set(args.only.split(",")) if args.only else None
    redo = set(args.redo.split(",")) if args.redo else set()
    kept: dict[str, dict] = {}
    earlier = ""
    if redo:
        saved = args.results / "every-type-long.json"
        md = saved.with_suffix(".md")
        header = md.read_text().split("\n")[2] if md.exists() else ""
        if not saved.exists() or f"--seq {args.seq}" not in header:
            parser.error(f"--redo: no earlier run at --seq {args.seq} in {args.results}")
        kept = {r["model_type"]: r for r in json.loads(saved.read_text())}
        from every_type import earlier_runs

        earlier = earlier_runs(header.split(". The default config")[0])
        unknown = sorted(redo - {r["model_type"] for r in every})
        if unknown:
            parser.error(f"--redo: not in every-type.json: {', '.join(unknown)}")
    start = time.perf_counter()
    rows = []
    for row in every:
        if only and row["model_type"] not in only:
            continue
        if redo and row["model_type"] not in redo:
            if row["model_type"] in kept:
                rows.append(kept[row["model_type"]])
            continue
        priced = [n for n, c in (row.get("setups") or {}).items() if "ratio" in c]
        if not priced:
            continue
        out = {"model_type": row["model_type"], "setups": {}}
        for name in priced:
            out["setups"][name] = cell(row["model_type"], row.get("shape"), name, args.seq)
        print(row["model_type"], {n: round(c.get("ratio", 0), 3) for n, c in out["setups"].items()},
              flush=True)  # fmt: skip
        rows.append(out)
    seconds = time.perf_counter() - start
    command = "benchmarks/every_type_long.py " + " ".join(sys.argv[1:])
    text = render(rows, args.seq, seconds, command)
    if earlier:  # the other rows' run, as its header gave it: "`CMD` (N s), then `CMD` (M s)"
        text = text.replace("`" + command, "`" + earlier + command, 1)
    (args.results / "every-type-long.json").write_text(json.dumps(rows, indent=1) + "\n")
    (args.results / "every-type-long.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
