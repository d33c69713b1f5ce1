"""Falcon-H1 (attention and a Mamba-2 mixer in parallel in every block) at hidden 64, and
the every-type benchmark's shrunk default config (a 1024-wide mixer of 128 heads, chunk
256, at d=64): the closed form (introspect.refined.falcon_h1) beside the FakeTensorMode
dry run of transformers' own class (``introspect measure --impl transformers --device
fake``) for FP32 eager, autocast with checkpointing and BF16 SDPA. Writes
benchmarks/results/falcon-h1.md.

    .venv/bin/python benchmarks/falcon_h1.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ssm import row  # noqa: E402
from test_falcon_h1 import FALCON_H1, MULTIPLIERS  # noqa: E402


def shrunk_default() -> dict:
    import transformers
    from every_type import shrink

    return shrink(transformers.AutoConfig.for_model("falcon_h1").to_dict())


SETUPS = {
    "fp32 eager": ["--precision", "fp32", "--attention", "eager"],
    "amp + checkpointing": ["--precision", "amp", "--checkpointing"],
    "bf16 sdpa": ["--precision", "bf16", "--attention", "memory-efficient"],
}


def run() -> str:
    configs = {
        "small": (FALCON_H1, [(2, 64), (1, 100)]),
        "small, muP multipliers": ({**FALCON_H1, **MULTIPLIERS}, [(2, 64)]),
        "every-type shrunk default": (shrunk_default(), [(1, 64), (1, 512)]),
    }
    lines = [
        "# Falcon-H1: closed form vs the dry run",
        "",
        "Command: `.venv/bin/python benchmarks/falcon_h1.py` (FakeTensorMode dry run of",
        "transformers' FalconH1ForCausalLM; the torch scan, no mamba-ssm kernels).",
        "",
        "| config | setup | B | T | dry run MB | closed form MB | dry/closed |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, (config, shapes) in configs.items():
        for setup, flags in SETUPS.items():
            for B, T in shapes:
                r = row(config, flags, B, T)
                measured = r["measurement"]["peak_bytes"]
                ratio = r["measured_over_refined"]
                lines.append(
                    f"| {name} | {setup} | {B} | {T} | {measured / 1e6:.3f} | "
                    f"{measured / ratio / 1e6:.3f} | {ratio:.3f} |"
                )
    lines += [
        "",
        "Not modelled: the scan backward's peak inside a checkpointed layer's recomputation",
        "under autocast when the chunk matrices dominate (the shrunk default config, 128",
        "heads, chunk 256, at T = 512: two chunks): the closed form prices the recomputed",
        "layer's attention-side moment, not the scan's BF16/FP32 einsum gradients there;",
        "the dry run answers it. (The full-size default, d = 4096, BF16 SDPA at B=1, T=2048,",
        "is 1.000 of its dry run: 139.899 GB; not rerun in the other setups.)",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    text = run()
    out = Path(__file__).parent / "results" / "falcon-h1.md"
    out.write_text(text)
    print(text)
