"""Zamba2 stacks at hidden 64 (tests/test_zamba2.py's configs): the closed form
(introspect.refined.shared_block for the shared transformer block, per use;
introspect.refined.mamba2 for the mixers) beside the FakeTensorMode dry run of
transformers' own class (``introspect measure --impl transformers --device fake``) for
FP32 eager, autocast with checkpointing and BF16 SDPA. Writes
benchmarks/results/zamba2.md.

    .venv/bin/python benchmarks/zamba2.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from ssm import row  # noqa: E402
from test_zamba2 import VARIANTS  # noqa: E402

CONFIGS = {
    "two blocks, q/k/v adapters, rope": VARIANTS["small"],
    "one block (the default's layout)": VARIANTS["plain"],
    "GQA, biases, untied (a copy per use)": VARIANTS["gqa, biases, untied"],
}
SETUPS = {
    "fp32 eager": ["--precision", "fp32", "--attention", "eager"],
    "amp + checkpointing": ["--precision", "amp", "--checkpointing"],
    "bf16 sdpa": ["--precision", "bf16", "--attention", "memory-efficient"],
}
SHAPES = [(2, 32), (1, 128)]


def run() -> str:
    lines = [
        "# Zamba2 stacks: closed form vs the dry run (hidden 64, 6 layers, 3 hybrid)",
        "",
        "Command: `.venv/bin/python benchmarks/zamba2.py` (FakeTensorMode dry run of",
        "transformers' Zamba2ForCausalLM; the torch scan, no mamba-ssm kernels).",
        "",
        "| config | setup | B | T | dry run MB | closed form MB | dry/closed | peak (dry, est.) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    ratios = []
    for name, config in CONFIGS.items():
        for setup, flags in SETUPS.items():
            for B, T in SHAPES:
                r = row(config, flags, B, T)
                measured = r["measurement"]["peak_bytes"]
                ratio = r["measured_over_refined"]
                ratios.append(ratio)
                phases = f"{r['measurement']['peak_phase']}, {r['refined_peak_phase']}"
                lines.append(
                    f"| {name} | {setup} | {B} | {T} | {measured / 1e6:.3f} | "
                    f"{measured / ratio / 1e6:.3f} | {ratio:.3f} | {phases} |"
                )
    inside = sum(abs(x - 1) <= 0.03 for x in ratios)
    lines += [
        "",
        f"{inside} of {len(ratios)} rows within ±3% (dry/closed {min(ratios):.3f} to "
        f"{max(ratios):.3f}). The untied config's copies hold every use's adapters and "
        "run one; the idle ones get no gradient in the step, and the closed form (like "
        "the dry run's Adam state, made for every parameter) counts them as trained.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    text = run()
    out = Path(__file__).parent / "results" / "zamba2.md"
    out.write_text(text)
    print(text)
