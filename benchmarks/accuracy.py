"""Estimate vs measured peak on a grid of real training steps.

Run:  .venv/bin/python benchmarks/accuracy.py            # the grid (this machine's budget)
      .venv/bin/python benchmarks/accuracy.py --quick    # a small subset, a few minutes
      .venv/bin/python benchmarks/accuracy.py --full     # every cell for real (fast machines)
      .venv/bin/python benchmarks/accuracy.py --only implementations   # keep the rest

The grid: the seed's synthetic 10M, 40M and 100M shapes (introspect.sizes) as a standard
transformer and as a Llama-style variant (RMSNorm, SwiGLU, GQA; introspect.measure.shapes),
at T = 256, 512, 1024, 2048, B = 1, FP32 Adam, eager attention — on torch CPU (and torch
CUDA when a GPU is present), MLX CPU uncompiled and MLX compiled as the seed measured;
plus real implementations trained the way their users write them: Hugging Face's
LlamaForCausalLM and mlx-lm's Llama at the nominal shapes, and the real-implementation
rows of :mod:`accuracy_impl` (transformers' own classes for nine families as dry runs,
mlx-lm's classes for real, in the setups people train with). Each row: measured peak,
the seed's simplified estimate, the refined estimate (with the framework in the setup),
both ratios, the peak phase, the term most responsible for the refined estimate's gap,
the category split at the peak, step time and tokens per second.

On a small CPU machine a full grid of real steps takes hours (MLX's CPU matmul is slow),
so by default the torch cells above a size's budget run as dry runs — the same step and
tracker under FakeTensorMode, whose figures equal the real CPU step's byte for byte
(tests/test_measure_torch.py) — and the MLX cells above the budget are left out and
listed. Writes benchmarks/results/accuracy.md (+ .json, and a .png when matplotlib is
installed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import accuracy_impl  # noqa: E402

from introspect import report  # noqa: E402
from introspect.measure import runner  # noqa: E402
from introspect.measure.shapes import llama_style, nominal_spec  # noqa: E402
from introspect.setup import TrainingSetup  # noqa: E402

RESULTS = Path(__file__).parent / "results"
SIZES = ("10M", "40M", "100M")
SEQS = (256, 512, 1024, 2048)
VARIANTS = ("standard", "llama")
#: Largest T run for real on torch CPU / on MLX per size (2 cores: see the docstring).
TORCH_REAL = {"10M": 2048, "40M": 2048, "100M": 1024}
MLX_REAL = {"10M": 1024, "40M": 256, "100M": 0}
#: Measured MLX steps per row (each with its own peak reset; the largest is reported).
MLX_REPEATS = 2
#: A dry run at a size no machine here could train: Llama-2-7B's shape, T = 2048.
DRY_7B = ("reference", "Llama-2-7B", "7B", "torch", "fake", 2048)
#: (implementation, framework, size, T): real implementations, Llama-style shapes.
IMPL_ROWS = (
    ("transformers", "torch", "10M", 512),
    ("transformers", "torch", "40M", 512),
    ("mlx_lm", "mlx", "10M", 256),
    ("mlx_lm", "mlx_compiled", "10M", 256),
)
BAND = 0.05


def spec_for(size: str, variant: str):
    if variant == "Llama-2-7B":
        from introspect.adapters import resolve

        return resolve("meta-llama/Llama-2-7b-hf").spec
    spec = nominal_spec(size)
    return llama_style(spec) if variant == "llama" else spec


def plan(quick: bool, full: bool, cuda: bool, only: str | None = None) -> tuple[list, list[str]]:
    """Rows to run — (impl, variant, size, framework, device, T) for the reference grid,
    dicts for the real-implementation rows (:mod:`accuracy_impl`) — and skipped cells."""
    impl_cells = (
        accuracy_impl.QUICK if quick else accuracy_impl.full() if full else accuracy_impl.DEFAULT
    )
    if only == "implementations":
        return list(impl_cells), []
    rows, skipped = [], []
    sizes, seqs = (("10M",), (256,)) if quick else (SIZES, SEQS)
    for variant in VARIANTS:
        for size in sizes:
            for T in seqs:
                torch_device = "cpu" if full or T <= TORCH_REAL[size] else "fake"
                rows.append(("reference", variant, size, "torch", torch_device, T))
                if cuda:
                    rows.append(("reference", variant, size, "torch", "cuda", T))
                for fw in ("mlx", "mlx_compiled"):
                    if full or T <= MLX_REAL.get(size, 0):
                        rows.append(("reference", variant, size, fw, "cpu", T))
                    else:
                        skipped.append(f"{fw} {variant} {size} T={T}")
    for impl, fw, size, T in IMPL_ROWS[:: 2 if quick else 1]:
        rows.append((impl, "llama", size, fw, "cpu", 256 if quick else T))
    if not quick:
        rows.append(DRY_7B)
    if only != "reference":
        rows += impl_cells
    return rows, skipped


def setup_for(impl: str, framework: str, T: int) -> TrainingSetup:
    # mlx-lm's Llama always runs mx.fast.scaled_dot_product_attention.
    attention = "memory_efficient" if impl == "mlx_lm" else "eager"
    # Every reference row runs here: on the CPU (or as a dry run, whose fake tensors are
    # CPU tensors), so torch's optimizer runs its CPU default (single-tensor).
    # The measured steps hold the logits and call cross-entropy themselves.
    return TrainingSetup(
        seq_len=T,
        framework=framework,
        attention=attention,
        device="cpu",
        implementation=impl,
        loop="logits",
    )


def run_cell(cell) -> dict:
    """One row of either kind, with its estimates."""
    if isinstance(cell, dict):
        out, comparison = accuracy_impl.run_cell(cell)
        return out | estimates(comparison)
    return run_row(*cell)


def run_row(impl, variant, size, framework, device, T) -> dict:
    spec = spec_for(size, variant)
    start = time.perf_counter()
    row = runner.run_one(
        spec,
        setup_for(impl, framework, T),
        device=device,
        impl=impl,
        census=framework == "torch",
        repeats=MLX_REPEATS if framework.startswith("mlx") else 1,
    )
    wall = time.perf_counter() - start
    m = row.comparison.measurement
    out = {
        "implementation": impl,
        "variant": variant,
        "size": size,
        "framework": framework,
        "device": device,
        "seq_len": T,
        **accuracy_impl.measured_fields(m, wall),
    }
    return out | estimates(row.comparison)


def estimates(c) -> dict:
    """The estimate columns of a row from a Comparison."""
    gap = c.largest_gap
    return {
        "simplified_bytes": c.simplified.total,
        "refined_bytes": c.refined.total if c.refined is not None else None,
        "measured_over_simplified": c.simplified_ratio,
        "measured_over_refined": c.refined_ratio,
        "refined_peak_phase": c.refined_phase,
        "largest_gap_term": gap[0] if gap else None,
        "largest_gap_bytes": gap[1] if gap else None,
    }


def reestimate(row: dict) -> dict:
    """A stored row with its estimates recomputed by today's code (no step is run)."""
    if row.get("kind") == "impl":
        source = row["source"]
        if "benchmarks/configs/" in source:  # stored relative to the repository
            source = accuracy_impl.CONFIGS + "/" + source.split("benchmarks/configs/", 1)[1]
        return row | {"source": source} | estimates(accuracy_impl.reestimate(row))
    from introspect.measure.compare import compare
    from introspect.measure.record import Measurement

    fw = row["framework"]
    m = Measurement(
        peak_bytes=row["measured_bytes"],
        categories=row["categories"],
        peak_phase=row["peak_phase"],
        backend="mlx" if fw.startswith("mlx") else "torch",
        compiled=fw == "mlx_compiled",
        device=row["device"],
        census=row.get("census") or {},
        n_params=row["n_params"],
    )
    spec = spec_for(row["size"], row["variant"])
    return row | estimates(compare(spec, setup_for(row["implementation"], fw, row["seq_len"]), m))


def error(estimate: int | None, measured: int) -> float | None:
    """(estimate − measured) / measured."""
    return None if estimate is None else estimate / measured - 1


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.1%}"


def within(x: float | None, band: float = BAND) -> bool:
    return x is not None and abs(x) <= band


def table(rows: list[dict]) -> str:
    out = []
    for r in rows:
        se = error(r["simplified_bytes"], r["measured_bytes"])
        re_ = error(r["refined_bytes"], r["measured_bytes"])
        gap = ""
        if r["largest_gap_term"] and not within(re_):
            gap = f"{r['largest_gap_term']} {r['largest_gap_bytes'] / 1e9:+.3f}"
        out.append(
            (
                r["implementation"],
                f"{r['size']} {r['variant']}",
                r["framework"],
                r["device"],
                r["seq_len"],
                f"{r['n_params']:,}",
                report.gb(r["measured_bytes"]),
                report.gb(r["simplified_bytes"]),
                pct(se),
                report.gb(r["refined_bytes"]) if r["refined_bytes"] else "n/a",
                pct(re_),
                "yes" if within(re_) else "no",
                f"{r['peak_phase'] or 'n/a'} / {r['refined_peak_phase'] or 'n/a'}",
                gap,
                split(r["categories"]),
                "" if r["step_seconds"] is None else f"{r['step_seconds']:.2f}",
                "" if r["tokens_per_second"] is None else f"{r['tokens_per_second']:,.0f}",
            )
        )
    headers = [
        "impl", "model", "framework", "device", "T", "N", "measured GB", "simplified GB",
        "simplified err", "refined GB", "refined err", "±5%", "peak (meas / ref)",
        "largest gap (GB, where missed)", "at peak P/G/O/A/T+other GB", "step s", "tokens/s",
    ]  # fmt: skip
    return report.table(out, headers, "markdown")


def split(categories: dict[str, int]) -> str:
    """The measured peak by category, in GB: parameters / gradients / optimizer state /
    activations / temporaries and other (MLX: its working memory is all 'other')."""
    c = categories
    rest = c.get("temporary", 0) + c.get("other", 0)
    keys = ("parameters", "gradients", "optimizer_state", "activations")
    return "/".join(f"{c.get(k, 0) / 1e9:.2f}" for k in keys) + f"/{rest / 1e9:.2f}"


def group(r: dict) -> str:
    """The row's implementation (named always: a figure on our reference model says so),
    framework and device."""
    impl = "our reference model" if r["implementation"] == "reference" else r["implementation"]
    return f"{impl}, {r['framework']} ({r['device']})"


def phase_agreement(rows: list[dict]) -> tuple[int, int]:
    """Rows whose refined peak phase (in the tracker's names) is the measured one, of the
    rows where both are known."""
    known = [r for r in rows if r.get("peak_phase") and r.get("refined_peak_phase")]
    return sum(r["peak_phase"] == r["refined_peak_phase"] for r in known), len(known)


def by_implementation(rows: list[dict]) -> str:
    """Per implementation, framework and device: rows within ±3% and ±5% (refined and
    the seed's formula), the worst refined row and its largest gap, the phase agreement."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(group(r), []).append(r)
    out = []
    for name, rs in groups.items():
        ref = [error(r["refined_bytes"], r["measured_bytes"]) for r in rs]
        seed = [error(r["simplified_bytes"], r["measured_bytes"]) for r in rs]
        worst = max(rs, key=lambda r: abs(error(r["refined_bytes"], r["measured_bytes"]) or 0))
        err = error(worst["refined_bytes"], worst["measured_bytes"])
        gap = worst.get("largest_gap_term")
        cause = (
            f"{gap} {(worst['largest_gap_bytes'] or 0) / 1e9:+.3f} GB"
            if gap and not within(err, 0.03)
            else ""
        )
        agree, known = phase_agreement(rs)
        out.append([
            name, len(rs),
            sum(within(x, 0.03) for x in ref), sum(map(within, ref)),
            f"{pct(err)} ({worst['size']} {worst['variant']}, T={worst['seq_len']})", cause,
            f"{agree} of {known}" if known else "n/a",
            sum(within(x, 0.03) for x in seed), sum(map(within, seed)),
            pct(max(seed, key=abs)),
        ])  # fmt: skip
    headers = [
        "implementation, framework (device)", "rows", "refined ±3%", "refined ±5%",
        "worst refined (row)", "its largest gap (measured − estimate)", "peak phase right",
        "seed ±3%", "seed ±5%", "seed worst",
    ]  # fmt: skip
    return report.table(out, headers, "markdown")


def summary(rows: list[dict]) -> list[str]:
    refined = [error(r["refined_bytes"], r["measured_bytes"]) for r in rows]
    simple = [error(r["simplified_bytes"], r["measured_bytes"]) for r in rows]
    n = len(rows)
    lines = [
        f"- refined estimate within ±5% of the measured peak: **{sum(map(within, refined))} of "
        f"{n} rows**; the seed's simplified formula: {sum(map(within, simple))} of {n}.",
        f"- simplified error range: {pct(min(simple))} to {pct(max(simple))}; "
        + (
            f"refined: {pct(min(x for x in refined if x is not None))} to "
            f"{pct(max(x for x in refined if x is not None))}."
            if any(x is not None for x in refined)
            else "refined: not available."
        ),
    ]
    real = [r for r in rows if r["implementation"] != "reference"]
    for name, part in (("real implementations (transformers, mlx-lm)", real),
                       ("our reference model", [r for r in rows if r not in real])):  # fmt: skip
        ok3 = sum(within(error(r["refined_bytes"], r["measured_bytes"]), 0.03) for r in part)
        ok = sum(within(error(r["refined_bytes"], r["measured_bytes"])) for r in part)
        agree = phase_agreement(part)
        lines.append(
            f"- {name}: refined within ±3% on {ok3} and ±5% on {ok} of {len(part)} rows; "
            f"peak phase right on {agree[0]} of {agree[1]}."
        )
    spreads = [
        (max(r["peak_samples"]) - min(r["peak_samples"])) / max(r["peak_samples"])
        for r in rows
        if len(r.get("peak_samples") or ()) > 1
    ]
    if spreads:
        lines.append(
            f"- MLX peaks moved by up to {max(spreads):.1%} between the {MLX_REPEATS} measured "
            f"steps of a row (median {sorted(spreads)[len(spreads) // 2]:.1%}); the table "
            "reports the larger."
        )
    lifted = [r for r in rows if r.get("phase_peaks") and r["peak_phase"] == "optimizer"]
    mlx_rows = [r for r in rows if r.get("phase_peaks")]
    if mlx_rows:
        rises = sorted(
            (r["phase_peaks"]["step"] - r["phase_peaks"]["loss_and_gradients"]) / r["n_params"]
            for r in mlx_rows
        )
        lines.append(
            f"- MLX: the optimizer update raised the peak above the loss-and-gradients peak "
            f"in {len(lifted)} of {len(mlx_rows)} rows, by {rises[0]:.1f} to {rises[-1]:.1f} "
            f"bytes per parameter (median {rises[len(rises) // 2]:.1f}): MLX's update builds "
            "new weights, m and v before the old ones are freed."
        )
        lines.append(
            "- MLX's peak phase is not the same question on both sides: the measured step "
            "calls its peak the optimizer's when it exceeds a separate gradients-only "
            "evaluation by more than 1%, while the closed form's moments come from the "
            "full step's one graph, where the update's first ops run interleaved with "
            "backward; the phase column is reported, not claimed, for MLX rows."
        )
    misses = [r for r in rows if not within(error(r["refined_bytes"], r["measured_bytes"]))]
    misses.sort(key=lambda r: -abs(error(r["refined_bytes"], r["measured_bytes"]) or 0))
    for r in misses[:6]:
        lines.append(
            f"- miss: {r['implementation']} {r['size']} {r['variant']} {r['framework']} "
            f"T={r['seq_len']}: refined {pct(error(r['refined_bytes'], r['measured_bytes']))}; "
            f"largest gap {r['largest_gap_term']} "
            f"({(r['largest_gap_bytes'] or 0) / 1e9:+.3f} GB measured − estimate)"
            + (
                f"; measured peak in {r['peak_phase']}, refined puts it in "
                f"{r['refined_peak_phase']}."
                if r["peak_phase"] and r["peak_phase"] != r["refined_peak_phase"]
                else "."
            )
        )
    return lines


def write(
    rows: list[dict],
    skipped: list[str],
    command: str,
    seconds: float,
    out: Path,
    reestimated_by: str | None = None,
    run_at: str | None = None,
    parts: dict | None = None,
) -> None:
    """``parts``: {"reference"|"implementations": {"command", "seconds"}} when the two
    parts of the grid were run by separate commands (``--only``)."""
    import torch

    run_at = run_at or f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M}"
    versions = rows[0]["versions"] if rows else {}
    mlx_version = next((r["versions"].get("mlx") for r in rows if "mlx" in r["versions"]), "")
    lines = [
        "# Estimate vs measured peak",
        "",
        *(
            [
                "Commands: "
                + "; ".join(
                    f"{name} rows `{p['command']}` ({p['seconds'] / 60:.1f} minutes)"
                    for name, p in parts.items()
                )
                + "  "
            ]
            if parts
            else [f"Command: `{command}`  "]
        ),
        *(
            [f"Estimates recomputed from the stored measurements by `{reestimated_by}`  "]
            if reestimated_by
            else []
        ),
        f"Run {run_at} UTC on {platform.machine()} "
        f"{platform.system()}, {os.cpu_count()} cores; python {versions.get('python', '')}, "
        f"torch {torch.__version__}, mlx {mlx_version}; {seconds / 60:.1f} minutes.",
        "",
        "Reference rows (impl reference, and the older transformers/mlx_lm Llama rows "
        "built from the nominal shapes): B = 1, FP32 weights, gradients, Adam state and "
        "activations, eager attention. Real-implementation rows (model = label and setup: "
        "B, attention, precision, ckpt = checkpointing, loop) run the config's own "
        "transformers class as a dry run (torch fake: FakeTensorMode, byte for byte the CPU "
        "step) or mlx-lm's class for real, Adam. A "
        "warm-up step first, the peak counter reset before the measured step. Peaks: "
        "torch CPU — live tensor storages (torch's MemTracker); torch fake — the same step "
        "and tracker under FakeTensorMode (no step time); MLX — `mx.get_peak_memory()`. "
        "Error = estimate / measured − 1. The refined estimate takes the framework "
        "(torch, mlx, mlx_compiled) as part of the setup. 'largest gap' names the "
        "category (or, for activations, the seed term from autograd's saved-tensor census) "
        "whose measured bytes differ most from the refined estimate's.",
        "",
        "## Summary",
        "",
        by_implementation(rows),
        "",
        *summary(rows),
        "",
        "## Rows",
        "",
        table(rows),
        "",
    ]
    has_cuda = any(r.get("device") == "cuda" for r in rows)
    if skipped or not has_cuda:
        lines += ["## Not run here", ""]
    if not has_cuda:
        lines += [
            "torch CUDA rows: pending — no GPU was present for this run (the grid adds "
            "`torch.cuda.max_memory_allocated()` rows by itself wherever "
            "`torch.cuda.is_available()`).",
            "",
        ]
    if skipped:
        lines += [
            "MLX cells above this machine's time budget (MLX's CPU matmul runs at a few "
            "GFLOP/s here); `--full` runs them: " + "; ".join(skipped) + ".",
            "",
        ]
    out.write_text("\n".join(lines))
    stored = {
        "command": command,
        "run_at": run_at,
        "seconds": seconds,
        "skipped": skipped,
        "parts": parts,
        "rows": rows,
    }
    out.with_suffix(".json").write_text(json.dumps(stored, indent=1) + "\n")


def run_isolated(cell: tuple) -> dict:
    """One row in a fresh process: each step starts from an empty allocator (glibc's
    arenas and MLX's buffer cache otherwise grow across rows until a 24 GB machine runs
    out), and one failed row cannot take the grid down with it."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "row.json"
        payload = json.dumps(cell if isinstance(cell, dict) else list(cell))
        cmd = [sys.executable, __file__, "--row", payload, "--row-out", str(out)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            tail = (done.stderr or "").strip().splitlines()[-1:] or [f"exit {done.returncode}"]
            raise SystemExit(f"row {cell} failed: {tail[0]}")
        return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--row", help=argparse.SUPPRESS)
    parser.add_argument("--row-out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="10M at T=256 only")
    parser.add_argument("--full", action="store_true", help="every cell for real")
    parser.add_argument(
        "--only",
        choices=("reference", "implementations"),
        help="run one part of the grid and keep the other part's rows stored in the .json "
        "beside --out (implementations: transformers' and mlx-lm's classes)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "accuracy.md")
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument(
        "--reestimate",
        action="store_true",
        help="keep the measurements stored in the .json beside --out and recompute only "
        "the estimates (after a change to the estimators; runs no step)",
    )
    args = parser.parse_args(argv)
    if args.row:
        args.row_out.write_text(json.dumps(run_cell(json.loads(args.row))))
        return 0
    import torch
    from tqdm.auto import tqdm

    rows_plan, skipped = plan(args.quick, args.full, torch.cuda.is_available(), args.only)
    command = "python benchmarks/accuracy.py" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:])
    )
    stored = args.out.with_suffix(".json")
    if args.reestimate:
        saved = json.loads(stored.read_text())
        rows = [reestimate(r) for r in saved["rows"]]
        seconds, skipped = saved["seconds"], saved["skipped"]
        parts = saved.get("parts")
        reestimated_by, command = command, saved["command"]
        run_at = saved.get("run_at")
    else:
        reestimated_by = run_at = parts = None
        rows = []
        start = time.perf_counter()
        bar = tqdm(rows_plan, file=sys.stderr, unit="row")
        for cell in bar:
            bar.set_description(
                f"{cell['label']} {cell['seq']}"
                if isinstance(cell, dict)
                else " ".join(map(str, cell))
            )
            rows.append(run_isolated(cell))
        seconds = time.perf_counter() - start
        if args.only and stored.exists():
            saved = json.loads(stored.read_text())
            kept = [
                r
                for r in saved["rows"]
                if (r.get("kind") == "impl") != (args.only == "implementations")
            ]
            rows = kept + rows
            other = "reference" if args.only == "implementations" else "implementations"
            parts = dict(saved.get("parts") or {})
            parts.setdefault(other, {"command": saved["command"], "seconds": saved["seconds"]})
            parts[args.only] = {"command": command, "seconds": seconds}
            skipped = skipped or saved.get("skipped", [])
            seconds = sum(p["seconds"] for p in parts.values())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write(rows, skipped, command, seconds, args.out, reestimated_by, run_at, parts)
    from introspect import plot

    if not args.no_plot and plot.available():
        labels = [
            f"{r['size']} {r['variant'][0]} {r['framework']}{'*' if r['device'] == 'fake' else ''}"
            f" {r['seq_len']}"
            + ("" if r["implementation"] == "reference" else " " + r["implementation"])
            for r in rows
        ]
        plot.accuracy(
            [r | {"label": lbl} for r, lbl in zip(rows, labels, strict=True)],
            args.out.with_suffix(".png"),
        )
    print(by_implementation(rows))
    print("\n".join(summary(rows)))
    print(f"wrote {args.out} in {seconds / 60:.1f} minutes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
