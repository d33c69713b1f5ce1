"""LoRA and QLoRA on every family's transformers class, as peft puts it there, beside
the refined estimate (``introspect/refined/lora.py``, ``lora_moe.py``).

Run:  .venv/bin/python benchmarks/lora_families.py          # about 3 minutes

Each row: the family's ``*ForCausalLM`` from the small configs of
``benchmarks/families.py`` (d=256, V=1000), wrapped by ``get_peft_model`` with peft's
own ``target_modules="all-linear"`` at rank 4, and one real CPU step of
``model(input_ids=x, labels=x).loss`` with Adam (measured live storages), B=2. The
mixture-of-experts configs five ways (FP32 at T=64 and 256, pure BF16, checkpointed
FP32, QLoRA — bitsandbytes NF4 on CPU — over a BF16 base), the dense ones two (FP32 and
QLoRA at T=64). Adapters: what peft made against what the estimate counts. Error =
refined / measured − 1. Writes ``benchmarks/results/lora-families.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from families import CONFIGS, report  # noqa: E402

OUT = Path(__file__).parent / "results" / "lora-families.md"
MOE = (
    "qwen3_moe",
    "mixtral",
    "qwen2_moe, shared expert",
    "qwen2_moe, MoE every 2nd layer",
    "gpt_oss",
    "deepseek_v3, MLA",
    "qwen3_next, hybrid",
)
BF16 = dict(precision="bf16", weights_dtype="bf16", activation_dtype="bf16")
SETUPS = {
    "FP32 T=64": dict(seq_len=64),
    "FP32 T=256": dict(seq_len=256),
    "BF16 T=64": dict(seq_len=64, **BF16),
    "FP32 ckpt T=64": dict(seq_len=64, activation_checkpointing=True),
    "QLoRA BF16 T=64": dict(seq_len=64, finetune="qlora", **BF16),
}
DENSE_SETUPS = ("FP32 T=64", "QLoRA BF16 T=64")
PLAN = [(n, s) for n in CONFIGS if n not in MOE for s in DENSE_SETUPS] + [
    (n, s) for n in MOE for s in SETUPS
]


def row(name: str, setup_name: str) -> list[str]:
    from introspect.adapters.hf_config import spec_from_config

    from introspect import refined
    from introspect.errors import IntrospectError
    from introspect.measure import hf_models
    from introspect.refined import lora
    from introspect.setup import TrainingSetup

    raw = CONFIGS[name]
    spec = spec_from_config(raw)
    kw = dict(finetune="lora") | SETUPS[setup_name]
    setup = TrainingSetup(
        batch_size=2, device="cpu", implementation="transformers", loop="labels",
        lora_rank=4, **kw,
    )  # fmt: skip
    try:
        m, _ = hf_models.measure(raw, name, spec, setup, device="cpu", census=False)
    except (IntrospectError, RuntimeError, ImportError) as err:
        return [name, setup_name, "", "", "", "", f"not run: {str(err).splitlines()[0][:80]}"]
    est = refined.estimate(spec, setup).total
    counted = lora.adapter_parameters(spec, setup)
    return [
        name, setup_name, f"{m.peak_bytes / 1e6:.2f}", f"{est / 1e6:.2f}",
        f"{est / m.peak_bytes - 1:+.2%}", f"{m.trainable_params:,} / {counted:,}",
        f"{m.peak_phase}",
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")

    start = time.perf_counter()
    rows = []
    for name, setup_name in PLAN:
        rows.append(row(name, setup_name))
        print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
    run = [r for r in rows if r[4]]
    errors = [abs(float(r[4].rstrip("%")) / 100) for r in run]
    exact = sum(a == b for a, b in (r[5].split(" / ") for r in run))
    summary = (
        f"{len(run)} rows run: {sum(e <= 0.02 for e in errors)} within ±2%, "
        f"{sum(e <= 0.05 for e in errors)} within ±5%; adapters exact in {exact}."
    )
    text = report(
        "# LoRA on every family's transformers class (peft all-linear): refined vs measured",
        "python benchmarks/lora_families.py",
        f"{len(PLAN)} rows ({len(CONFIGS) - len(MOE)} dense configs × "
        f"{len(DENSE_SETUPS)} setups, {len(MOE)} MoE configs × {len(SETUPS)}), "
        f"{time.perf_counter() - start:.0f} s. B=2, rank 4, peft's all-linear, labels "
        "loop, Adam, real CPU steps (live storages). Error = refined / measured − 1.",
        summary,
        rows,
        ["family", "setup", "measured MB", "refined MB", "error",
         "adapters (peft / counted)", "measured peak in"],
    )  # fmt: skip
    args.out.write_text(text)
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
