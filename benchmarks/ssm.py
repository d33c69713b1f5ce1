"""Mamba-1 stacks (Mamba, Falcon-Mamba, Jamba) at hidden 64: the closed form
(introspect.refined.mamba1) beside the FakeTensorMode dry run of transformers' own class
(``introspect measure --impl transformers --device fake``) for FP32 eager, autocast with
checkpointing and BF16 (SDPA for Jamba; the pure stacks have no attention). Writes
benchmarks/results/ssm.md.

    .venv/bin/python benchmarks/ssm.py
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_mamba1 import FALCON_MAMBA, JAMBA, MAMBA  # noqa: E402

from introspect.cli import main  # noqa: E402

CONFIGS = {"mamba": MAMBA, "falcon_mamba": FALCON_MAMBA, "jamba": JAMBA}
SETUPS = {
    "fp32 eager": ["--precision", "fp32", "--attention", "eager"],
    "amp + checkpointing": ["--precision", "amp", "--checkpointing"],
    "bf16 (sdpa where attention)": ["--precision", "bf16"],
}
SHAPES = [(2, 32), (1, 128)]


def row(config: dict, flags: list[str], B: int, T: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.json"
        path.write_text(json.dumps(config))
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            args = ["measure", str(path), "--device", "fake", "--impl", "transformers"]
            assert main([*args, "--seq", str(T), "--batch", str(B), "--json", *flags]) == 0
        return json.loads(out.getvalue())["rows"][0]


def run() -> str:
    lines = [
        "# Mamba-1 stacks: closed form vs the dry run (hidden 64)",
        "",
        "Command: `.venv/bin/python benchmarks/ssm.py` (FakeTensorMode dry run of",
        "transformers' class; the torch scan, no mamba-ssm kernels).",
        "",
        "| model | setup | B | T | dry run MB | closed form MB | dry/closed |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, config in CONFIGS.items():
        for setup, flags in SETUPS.items():
            if name == "jamba" and setup.startswith("bf16"):
                flags = [*flags, "--attention", "memory-efficient"]
            elif setup.startswith("bf16"):
                flags = [*flags, "--attention", "eager"]
            for B, T in SHAPES:
                r = row(config, flags, B, T)
                measured = r["measurement"]["peak_bytes"]
                ratio = r["measured_over_refined"]
                lines.append(
                    f"| {name} | {setup} | {B} | {T} | {measured / 1e6:.3f} | "
                    f"{measured / ratio / 1e6:.3f} | {ratio:.3f} |"
                )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    text = run()
    out = Path(__file__).parent / "results" / "ssm.md"
    out.write_text(text)
    print(text)
