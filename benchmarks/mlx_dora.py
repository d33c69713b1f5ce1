"""mlx-lm's DoRA, LoRA dropout and gradient accumulation, real steps on the MLX CPU,
against the refined estimate (:mod:`introspect.refined.mlx_dora`).

    python benchmarks/mlx_dora.py     # writes benchmarks/results/mlx-dora.md

DoRA and dropout rows: :func:`introspect.measure.mlx_lm_models.measure` (``model.freeze()``,
``linear_to_lora_layers(..., use_dora=...)`` with mlx-lm's default keys, Adam over the
adapters, ``default_loss``), the largest of ``REPEATS`` steps. Accumulation rows:
mlx-lm's own ``train`` loop with ``grad_accumulation_steps`` M
(:func:`introspect.measure.mlx_lm_trainer.measure_trainer`, always compiled, as the
trainer compiles its step). Every shape is held out (none is a derivation shape of the
LoRA counts, and none was looked at while writing mlx_dora's terms: those were read off
d = 128 Llama steps, ``tests/test_mlx_dora.py``'s shape).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

REPORT = ROOT / "benchmarks" / "results" / "mlx-dora.md"
BAND = 0.05
REPEATS = 2

MODELS = {
    "llama d=192 L=4 V=6144": dict(
        model_type="llama", hidden_size=192, num_hidden_layers=4, num_attention_heads=6,
        num_key_value_heads=3, intermediate_size=512, vocab_size=6144,
        tie_word_embeddings=True, rms_norm_eps=1e-5, max_position_embeddings=1024,
    ),
    "qwen2 d=160 L=3 V=5000": dict(
        model_type="qwen2", hidden_size=160, num_hidden_layers=3, num_attention_heads=5,
        num_key_value_heads=1, intermediate_size=448, vocab_size=5000,
        tie_word_embeddings=True, rms_norm_eps=1e-6, max_position_embeddings=1024,
    ),
}  # fmt: skip

#: What an earlier run found (a term has changed since).
HISTORY = (
    "History: a first run (the llama rows of the first 11, stopped there) priced the "
    "dropout mask at 1 byte and kept LoRA's shared inputs: FP32 1.001 and 1.005, BF16 "
    "0.965 (eager) and 0.958 (compiled). Reading MLX's multiply (it casts the boolean mask "
    "to x's dtype) and a replay of a d = 128 step (which inputs are freed) gave the rule "
    "now in introspect.refined.mlx_dora.dropout_terms, before this run; so the llama "
    "dropout rows are not held out from that change, the qwen2 rows are."
)

#: (what, finetune, dropout, grad_accum, dtype, compiled, B, T) per model.
GRID = (
    *(("dora", "dora", 0.0, 1, dt, c, 2, 128) for dt in ("fp32", "bf16") for c in (False, True)),
    *(("dropout", "lora", 0.1, 1, dt, c, 2, 128) for dt in ("fp32", "bf16") for c in (False, True)),
    ("dora + dropout", "dora", 0.1, 1, "fp32", False, 1, 256),
    ("accumulation", "lora", 0.0, 2, "fp32", True, 2, 128),
    ("accumulation", "dora", 0.0, 2, "fp32", True, 2, 128),
    ("accumulation", "full", 0.0, 2, "fp32", True, 2, 128),
)


def setup_of(finetune, dropout, accum, dtype, compiled, batch, seq):
    from introspect.setup import TrainingSetup

    return TrainingSetup(
        framework="mlx_compiled" if compiled else "mlx", implementation="mlx_lm",
        device="cpu", finetune=finetune, lora_rank=8, lora_dropout=dropout, grad_accum=accum,
        batch_size=batch, seq_len=seq, precision="bf16" if dtype == "bf16" else "fp32",
    )  # fmt: skip


def rows() -> list[dict]:
    from introspect.adapters.hf_config import spec_from_config

    from introspect.measure import mlx_lm_models
    from introspect.measure.mlx_lm_trainer import measure_trainer
    from introspect.refined import estimate

    out = []
    for name, raw in MODELS.items():
        spec = spec_from_config(raw, source=name)
        for what, finetune, dropout, accum, dtype, compiled, batch, seq in GRID:
            setup = setup_of(finetune, dropout, accum, dtype, compiled, batch, seq)
            if accum > 1:
                peak = measure_trainer(raw, name, spec, setup)[0]
            else:
                m = mlx_lm_models.measure(
                    raw, name, spec, setup, compiled=compiled, repeats=REPEATS
                )
                peak = m.peak_bytes
            est = estimate(spec, setup)
            base = estimate(spec, setup.replace(finetune="lora", lora_dropout=0.0, grad_accum=1))
            row = dict(
                model=name, what=what, finetune=finetune, dropout=dropout, accum=accum,
                dtype=dtype, compiled=compiled, B=batch, T=seq, measured=peak,
                estimate=est.total, lora=base.total if finetune != "full" else None,
            )  # fmt: skip
            out.append(row)
            print(row, flush=True)
    return out


def write(rows: list[dict], seconds: float) -> None:
    import importlib.metadata

    version = importlib.metadata.version
    lines = [
        "# mlx-lm DoRA, LoRA dropout and gradient accumulation (MLX CPU) vs the refined estimate",
        "",
        "    python benchmarks/mlx_dora.py    # this file",
        "",
        f"mlx {version('mlx')}, mlx-lm {version('mlx-lm')}, CPU; {seconds:.0f} s. r = 8, "
        "scale 20, mlx-lm's default keys (every nn.Linear of each block). DoRA/dropout "
        f"rows: the largest of {REPEATS} steps of `introspect.measure.mlx_lm_models.measure`; "
        "accumulation rows: mlx-lm's own `train` loop with `grad_accumulation_steps` 2 "
        "(compiled, as the trainer always is), the largest iteration after the warm-up "
        "(`introspect.measure.mlx_lm_trainer`). *estimate*: "
        "`introspect.refined.estimate(spec, setup).total`; *plain LoRA estimate*: the same "
        "setup as plain LoRA, no dropout, no accumulation (what DoRA/dropout/accumulation "
        "add is the difference). All rows held out (the terms were derived from "
        "mlx_lm/tuner/dora.py, lora.py, trainer.py and checked on d = 128 Llama steps only).",
        "",
        "| model | what | fine-tune | dropout | M | dtype | step | B | T | measured MB | "
        "estimate MB | estimate/measured | plain LoRA estimate MB |",
        "|---|---|---|--:|--:|---|---|--:|--:|--:|--:|--:|--:|",
    ]
    for r in rows:
        lora = f"{r['lora'] / 1e6:.2f}" if r["lora"] else "—"
        lines.append(
            f"| {r['model']} | {r['what']} | {r['finetune']} | {r['dropout']:g} | {r['accum']} "
            f"| {r['dtype']} | {'compiled' if r['compiled'] else 'eager'} | {r['B']} | {r['T']} "
            f"| {r['measured'] / 1e6:.2f} | {r['estimate'] / 1e6:.2f} | "
            f"{r['estimate'] / r['measured']:.3f} | {lora} |"
        )
    lines += ["", "## Summary (within ±5% of the measured peak)", ""]
    lines += ["| rows | n | within ±5% | estimate/measured |", "|---|--:|--:|---|"]
    for what in dict.fromkeys(r["what"] for r in rows):
        sel = [r for r in rows if r["what"] == what]
        ratios = [r["estimate"] / r["measured"] for r in sel]
        n = sum(abs(x - 1) <= BAND for x in ratios)
        lines.append(f"| {what} | {len(sel)} | {n} | {min(ratios):.3f} to {max(ratios):.3f} |")
    ratios = [r["estimate"] / r["measured"] for r in rows]
    n = sum(abs(x - 1) <= BAND for x in ratios)
    lines.append(f"| all | {len(rows)} | {n} | {min(ratios):.3f} to {max(ratios):.3f} |")
    lines += ["", HISTORY, ""]
    REPORT.write_text("\n".join(lines))


def main() -> None:
    start = time.perf_counter()
    found = rows()
    write(found, time.perf_counter() - start)
    print(REPORT.read_text())


if __name__ == "__main__":
    main()
