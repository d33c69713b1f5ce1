"""Every family's own transformers class, stepped as its users step it, beside the
refined estimate: the check for the families the seeded sweep does not draw.

Run:  .venv/bin/python benchmarks/families.py          # about 3 minutes

Each row: the family's ``*ForCausalLM`` built from a small config (d=256, 2–6 layers,
V=1000; the variations transformers' config classes allow: shared experts, mixed MoE and
dense stacks, windows on some layers, MLA, chunked and NoPE layers, Gated DeltaNet),
stepped under FakeTensorMode (the CPU step's exact live storages) with
``model(input_ids=x, labels=x).loss`` and Adam, three ways: eager FP32 and SDPA under
autocast at B=2, T=128, and pure BF16 with checkpointing at T=64. Error = refined /
measured − 1. A setup transformers refuses for a family (no SDPA for gpt-oss and Gemma 2)
is said, not run. Writes ``benchmarks/results/families.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

OUT = Path(__file__).parent / "results" / "families.md"

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
#: The families and variations: tests/small_configs.py's, which
#: tests/test_hf_config_transformers.py also counts.
from small_configs import FAMILIES as CONFIGS  # noqa: E402

SETUPS = {
    "eager FP32": dict(seq_len=128, attention="eager", precision="fp32"),
    "SDPA amp": dict(seq_len=128, attention="memory_efficient", precision="amp"),
    "BF16 ckpt": dict(seq_len=64, precision="bf16", activation_checkpointing=True),
}


def row(name: str, raw: dict, setup_name: str) -> list[str]:
    from introspect.adapters.hf_config import spec_from_config

    from introspect import refined
    from introspect.errors import IntrospectError
    from introspect.measure import hf_models
    from introspect.setup import TrainingSetup

    spec = spec_from_config(raw)
    setup = TrainingSetup(
        batch_size=2, implementation="transformers", loop="labels", device="cpu",
        **SETUPS[setup_name],
    )  # fmt: skip
    try:
        m, _ = hf_models.measure(raw, name, spec, setup, device="fake", census=False)
    except (IntrospectError, RuntimeError) as err:
        return [name, setup_name, "", "", "", f"not run: {str(err).splitlines()[0][:90]}"]
    est = refined.execution_estimate(spec, setup)
    error = est.total / m.peak_bytes - 1
    return [
        name, setup_name, f"{m.peak_bytes / 1e6:.2f}", f"{est.total / 1e6:.2f}", f"{error:+.2%}",
        f"{m.peak_phase} / {est.meta['peak_phase']}",
    ]  # fmt: skip


def report(title: str, command: str, how: str, summary: str, rows: list, headers: list[str]) -> str:
    """A results file: the title, the command that wrote it, how it was run, the summary
    in bold and the rows as a GitHub table."""
    from introspect._tabulate import tabulate

    table = tabulate(rows, headers=headers, tablefmt="github")
    return "\n".join([title, "", f"    {command}", "", how, "", f"**{summary}**", "", table, ""])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="families whose name starts with this (comma list)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)

    names = list(CONFIGS)
    if args.only:
        names = [n for n in names if n.startswith(tuple(args.only.split(",")))]
    start = time.perf_counter()
    rows = []
    for name in names:
        for setup_name in SETUPS:
            rows.append(row(name, CONFIGS[name], setup_name))
            print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
    errors = [abs(float(r[4].rstrip("%")) / 100) for r in rows if r[4]]
    run = [r for r in rows if r[4]]
    summary = (
        f"{len(run)} rows run ({len(rows) - len(run)} refused by transformers): "
        f"{sum(e <= 0.01 for e in errors)} within ±1%, {sum(e <= 0.03 for e in errors)} "
        f"within ±3%, {sum(e <= 0.05 for e in errors)} within ±5%."
    )
    text = report(
        "# Every family's transformers class: refined vs dry run",
        f"python benchmarks/families.py{' --only ' + args.only if args.only else ''}",
        f"{len(names)} configs × {len(SETUPS)} setups, {time.perf_counter() - start:.0f} s. "
        "B=2; eager FP32 and SDPA amp at T=128, BF16 with checkpointing at T=64; labels "
        "loop, Adam (single-tensor, as on CPU), FakeTensorMode. "
        "Error = refined / measured − 1.",
        summary,
        rows,
        ["family", "setup", "measured MB", "refined MB", "error", "phase (meas / ref)"],
    )
    if not args.only:
        args.out.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
