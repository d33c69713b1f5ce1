"""The MLA families beside DeepSeek-V3 (DeepSeek-V2, MiniCPM3): refined vs the dry run
of transformers' own class, for issue 22's three setups.

Run:  .venv/bin/python benchmarks/mla_families.py          # about a minute

Each row: ``tests/small_configs.py``'s ``MLA`` config (d=256, 2–3 layers, V=1000; a q
latent or a plain q_proj, greedy or group-limited routing, MiniCPM3's multipliers, MLP
biases), stepped under FakeTensorMode with ``model(input_ids=x, labels=x).loss`` and
Adam at B=2, T=128, three ways: eager FP32, autocast with activation checkpointing
(the class's default attention), pure BF16 with SDPA. Error = refined / measured − 1.
``tests/test_mla_families.py`` asserts the same rows within ±3%. Writes
``benchmarks/results/mla-families.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

OUT = Path(__file__).parent / "results" / "mla-families.md"

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from families import report  # noqa: E402
from small_configs import MLA  # noqa: E402

SETUPS = {
    "eager FP32": dict(attention="eager", precision="fp32"),
    "amp ckpt": dict(precision="amp", activation_checkpointing=True),
    "BF16 SDPA": dict(attention="memory_efficient", precision="bf16"),
}


def row(name: str, raw: dict, setup_name: str) -> list[str]:
    from introspect.adapters.hf_config import spec_from_config

    from introspect import refined
    from introspect.measure import hf_models
    from introspect.setup import TrainingSetup

    spec = spec_from_config(raw)
    setup = TrainingSetup(
        batch_size=2, seq_len=128, implementation="transformers", loop="labels",
        device="cpu", **SETUPS[setup_name],
    )  # fmt: skip
    m, _ = hf_models.measure(raw, name, spec, setup, device="fake", census=False)
    est = refined.execution_estimate(spec, setup)
    return [
        name, setup_name, f"{m.peak_bytes / 1e6:.2f}", f"{est.total / 1e6:.2f}",
        f"{est.total / m.peak_bytes - 1:+.2%}", f"{m.peak_phase} / {est.meta['peak_phase']}",
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    rows = [row(name, MLA[name], s) for name in MLA for s in SETUPS]
    errors = [abs(float(r[4].rstrip("%")) / 100) for r in rows]
    summary = (
        f"{len(rows)} rows: {sum(e <= 0.01 for e in errors)} within ±1%, "
        f"{sum(e <= 0.03 for e in errors)} within ±3%; worst {max(errors):.2%}."
    )
    text = report(
        "# MLA families (DeepSeek-V2, MiniCPM3): refined vs dry run",
        "python benchmarks/mla_families.py",
        f"{len(MLA)} configs × {len(SETUPS)} setups, {time.perf_counter() - start:.0f} s. "
        "B=2, T=128; eager FP32, amp with checkpointing, BF16 SDPA; labels loop, Adam "
        "(single-tensor, as on CPU), FakeTensorMode. Error = refined / measured − 1.",
        summary,
        rows,
        ["family", "setup", "measured MB", "refined MB", "error", "phase (meas / ref)"],
    )
    args.out.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
