"""``--num-layers K``: LoRA on the top K blocks, real steps beside the refined estimate.

Run:  .venv/bin/python benchmarks/num_layers.py          # a few minutes on two cores

torch rows: each family's transformers class from ``benchmarks/families.py``'s small
configs (d=256, V=1000) at L=6 blocks, wrapped by ``get_peft_model`` with
``layers_to_transform`` = the top K blocks (peft's all-linear as the model's linear
names: peft refuses the string beside ``layers_to_transform``), rank 4, B=2, T=64, one
real CPU step of ``model(input_ids=x, labels=x).loss`` with Adam (live storages): FP32 at
K = 1, 3 and 6 (every block: the same step as without ``--num-layers``), FP32
checkpointed and QLoRA (bitsandbytes NF4 on CPU) over a BF16 base at K = 2. MoE models
whose experts peft adapts as parameters are refused with ``--num-layers`` (said, not
run).

MLX rows: mlx-lm's llama and qwen2 at d=128, f=256, 4 heads (2 K/V), V=2048, L=6,
``linear_to_lora_layers(model, K, {rank 8})``, B=2, T=128, eager and compiled, on the
CPU (``mx.get_peak_memory``). Error = refined / measured − 1. Writes
``benchmarks/results/num-layers.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from families import CONFIGS, report  # noqa: E402

OUT = Path(__file__).parent / "results" / "num-layers.md"
LAYERS = 6
BF16 = dict(precision="bf16", weights_dtype="bf16", activation_dtype="bf16")
SETUPS = {
    "FP32": {},
    "FP32 ckpt": dict(activation_checkpointing=True),
    "QLoRA BF16": dict(finetune="qlora", **BF16),
}
#: (setup, K) per family: FP32 at K = 1, 3 and every block, the others at K = 2.
PLAN = (("FP32", 1), ("FP32", 3), ("FP32", 6), ("FP32 ckpt", 2), ("QLoRA BF16", 2))
MLX_FAMILIES = ("llama", "qwen2")
MLX_KS = (1, 2, 3, 6)


def torch_row(name: str, setup_name: str, k: int) -> list[str]:
    from introspect.adapters.hf_config import spec_from_config

    from introspect import refined
    from introspect.errors import IntrospectError
    from introspect.measure import hf_models
    from introspect.refined import lora
    from introspect.setup import TrainingSetup

    raw = dict(CONFIGS[name])
    # The family's own key for the depth (GPT-2's n_layer: transformers reads
    # num_hidden_layers as an alias of it, the spec reader would keep n_layer's 2).
    raw["n_layer" if "n_layer" in raw else "num_hidden_layers"] = LAYERS
    label = [name, setup_name, str(k)]
    try:
        spec = spec_from_config(raw)
        kw = dict(finetune="lora") | SETUPS[setup_name]
        setup = TrainingSetup(
            batch_size=2, seq_len=64, device="cpu", implementation="transformers",
            loop="labels", lora_rank=4, num_layers=k, **kw,
        )  # fmt: skip
        from introspect.applies import check_model

        check_model(spec, setup)
        m, _ = hf_models.measure(raw, name, spec, setup, device="cpu", census=False)
    except (IntrospectError, ValueError, RuntimeError, ImportError) as err:
        return [*label, "", "", "", "", f"not run: {str(err).splitlines()[0][:90]}"]
    est = refined.estimate(spec, setup).total
    counted = lora.adapter_parameters(spec, setup)
    return [
        *label, f"{m.peak_bytes / 1e6:.2f}", f"{est / 1e6:.2f}",
        f"{est / m.peak_bytes - 1:+.2%}", f"{m.trainable_params:,} / {counted:,}", "",
    ]  # fmt: skip


def mlx_row(family: str, framework: str, k: int) -> list[str]:
    from introspect.adapters.hf_config import spec_from_config

    from introspect import refined
    from introspect.measure import mlx_lm_models
    from introspect.refined import lora
    from introspect.setup import TrainingSetup

    raw = dict(
        model_type=family, hidden_size=128, intermediate_size=256, num_hidden_layers=LAYERS,
        num_attention_heads=4, num_key_value_heads=2, vocab_size=2048,
        tie_word_embeddings=family == "qwen2", rms_norm_eps=1e-6,
    )  # fmt: skip
    spec = spec_from_config(raw, source=family)
    setup = TrainingSetup(
        seq_len=128, batch_size=2, framework=framework, implementation="mlx_lm",
        device="cpu", finetune="lora", lora_rank=8, num_layers=k,
    )  # fmt: skip
    m = mlx_lm_models.measure(raw, family, spec, setup, compiled=framework == "mlx_compiled")
    est = refined.estimate(spec, setup).total
    counted = lora.adapter_parameters(spec, setup)
    return [
        f"mlx-lm {family}", framework.replace("_", "-"), str(k), f"{m.peak_bytes / 1e6:.2f}",
        f"{est / 1e6:.2f}", f"{est / m.peak_bytes - 1:+.2%}",
        f"{m.trainable_params:,} / {counted:,}", "",
    ]  # fmt: skip


def summary_of(rows: list[list[str]]) -> str:
    run = [r for r in rows if r[5]]
    errors = [abs(float(r[5].rstrip("%")) / 100) for r in run]
    exact = sum(a == b for a, b in (r[6].split(" / ") for r in run))
    return (
        f"{len(run)} rows run: {sum(e <= 0.01 for e in errors)} within ±1%, "
        f"{sum(e <= 0.03 for e in errors)} within ±3%, {sum(e <= 0.05 for e in errors)} "
        f"within ±5%; adapters exact in {exact}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--no-mlx", action="store_true", help="torch rows only")
    parser.add_argument("--only", help="families whose name starts with this (comma list)")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    import logging

    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)

    start = time.perf_counter()
    torch_rows, mlx_rows = [], []
    names = [n for n in CONFIGS if not args.only or n.startswith(tuple(args.only.split(",")))]
    for name in names:
        for setup_name, k in PLAN:
            torch_rows.append(torch_row(name, setup_name, k))
            print(" | ".join(torch_rows[-1]), file=sys.stderr, flush=True)
    if not args.no_mlx:
        for family in MLX_FAMILIES:
            for framework in ("mlx", "mlx_compiled"):
                for k in MLX_KS:
                    mlx_rows.append(mlx_row(family, framework, k))
                    print(" | ".join(mlx_rows[-1]), file=sys.stderr, flush=True)
    summary = f"torch: {summary_of(torch_rows)}."
    if mlx_rows:
        summary += f" MLX: {summary_of(mlx_rows)}."
    text = report(
        "# LoRA on the top K blocks (--num-layers): refined vs measured",
        "python benchmarks/num_layers.py",
        f"{len(torch_rows)} torch rows and {len(mlx_rows)} MLX rows, "
        f"{time.perf_counter() - start:.0f} s (see the module docstring for the setups).",
        summary,
        torch_rows + mlx_rows,
        ["model", "setup", "K", "measured MB", "refined MB", "error",
         "adapters (measured / counted)", "note"],
    )  # fmt: skip
    args.out.write_text(text)
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
