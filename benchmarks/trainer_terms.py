"""The real HF Trainer's peak beside ``profile --trainer hf``'s closed form, over a grid.

Run:  .venv/bin/python benchmarks/trainer_terms.py     # about 6 minutes on 2 cores

Each row: ``transformers.Trainer.train()`` for two optimizer steps on CPU (tiny Llama and
GPT-2 configs, B=2, T=64, a tokenized dataset of input_ids, attention_mask and labels),
the Trainer building its own optimizer, under the project's live tracker (peak of live
tensor storages over ``train()``): ``tests/test_trainer_terms.py``'s ``trainer_run``.
Beside it the closed form of the same setup under ``--trainer hf``
(:mod:`introspect.refined.trainers`). The grid is every combination of ``optim``
(adamw_torch_fused, adamw_torch, adamw_bnb_8bit, adafactor, sgd) × bf16 × gradient
checkpointing × gradient_accumulation_steps (1, 2) × LoRA (r=8, all-linear). Error =
closed form / measured − 1. Writes ``benchmarks/results/trainer-terms.md``.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

OUT = Path(__file__).parent / "results" / "trainer-terms.md"

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_trainer_terms import CONFIGS, OPTIM, closed_form, trainer_run  # noqa: E402


def grid(families: list[str]):
    for family, optim, bf16, ckpt, accum, lora in itertools.product(
        families, OPTIM, (False, True), (False, True), (1, 2), (False, True)
    ):
        yield family, dict(optim=optim, bf16=bf16, checkpointing=ckpt, accum=accum, lora=lora)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--families", nargs="+", default=["llama", "gpt2"], choices=list(CONFIGS))
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args()
    start, rows = time.perf_counter(), []
    for family, row in grid(args.families):
        tracker, _ = trainer_run(CONFIGS[family], **row)
        estimate = closed_form(CONFIGS[family], **row)
        real = tracker.peak_bytes
        error = estimate.total / real - 1
        phase = estimate.meta["peak_phase"]
        rows.append((family, row, real, estimate.total, error, tracker.peak_phase, phase))
        print(f"{family:6} {row} {real:,} {estimate.total:,} {100 * error:+.2f}%", flush=True)
    worst = max(rows, key=lambda r: abs(r[4]))
    within = {b: sum(abs(r[4]) <= b / 100 for r in rows) for b in (1, 3, 5)}
    lines = [
        "# The HF Trainer's peak beside `--trainer hf`'s closed form",
        "",
        f"`{' '.join(['python', 'benchmarks/trainer_terms.py', *sys.argv[1:]])}` "
        f"({time.perf_counter() - start:.0f} s): transformers.Trainer.train(), 2 steps on "
        "CPU, B=2, T=64, peak of live storages (the project's live tracker).",
        "",
        f"{len(rows)} rows: within ±1% {within[1]}, ±3% {within[3]}, ±5% {within[5]}; "
        f"worst {100 * worst[4]:+.2f}% ({worst[0]}, {worst[1]}).",
        "",
        "| family | optim | bf16 | ckpt | accum | LoRA | measured B | closed form B | error "
        "| tracker phase | closed-form phase |",
        "|---|---|---|---|---|---|---:|---:|---:|---|---|",
    ]
    for family, row, real, est, error, phase, est_phase in rows:
        lines.append(
            f"| {family} | {row['optim']} | {row['bf16']} | {row['checkpointing']} | "
            f"{row['accum']} | {row['lora']} | {real:,} | {est:,} | {100 * error:+.2f}% | "
            f"{phase} | {est_phase} |"
        )
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(lines[4])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
