"""The real HF ``Trainer`` and TRL ``SFTTrainer`` on CPU beside the closed form.

Run:  .venv/bin/python benchmarks/trainers.py      # 110 rows, 17-20 min on 2 shared cores

Each row is ``introspect.measure.trainer_run.measure``: transformers' own class built
from a tiny faithful config (d = 128, 2 layers, 4 heads of 32, V = 2048; the family's
own structure), ``trainer.train()`` for 2 optimizer steps on CPU over B·M·2 rows of
T = 64 random tokens, the peak of live tensor bytes over the whole run — beside
``refined`` (the execution estimate, ``setup.trainer`` set) for the same setup.

The grid is a pairwise covering array (:mod:`benchmarks.covering`, seeded) over
trainer (hf, trl) × family × optim (adamw_torch, adamw_torch_fused, adamw_bnb_8bit,
adafactor, sgd) × bf16 × gradient_checkpointing × batch (1, 2) × accumulation (1, 2) ×
LoRA, drawn twice (two seeds) for more rows: every pair of values appears in each draw.
A row the closed form refuses is listed with the refusal, its measured peak still shown.
The summary counts rows within ±1/±3/±5% and names the worst row and the category
(parameters, gradients, optimizer state, activations, temporaries) holding its gap.

Writes ``benchmarks/results/trainers.md`` and ``trainers.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "benchmarks"))

SEEDS = (21, 2021)
T = 64
D, LAYERS, HEADS, KV, FFN, V = 128, 2, 4, 2, 352, 2048

#: The families at the benchmark's shape, in Hugging Face's keys.
FAMILIES: dict[str, dict] = {
    "llama": {"model_type": "llama"},
    "qwen2": {"model_type": "qwen2"},
    "qwen3": {"model_type": "qwen3", "head_dim": 32},
    "mistral": {"model_type": "mistral", "sliding_window": None},
    "gemma": {"model_type": "gemma", "head_dim": 32},
    "gemma2": {"model_type": "gemma2", "head_dim": 32, "sliding_window": 32},
    "gemma3_text": {
        "model_type": "gemma3_text", "head_dim": 32, "sliding_window": 32,
        "layer_types": ["sliding_attention", "full_attention"],
    },
    "phi3": {"model_type": "phi3", "pad_token_id": 0},
    "olmo2": {"model_type": "olmo2"},
    "gpt2": {"model_type": "gpt2", "n_embd": D, "n_layer": LAYERS, "n_head": HEADS,
             "vocab_size": V, "n_positions": 256},
    "qwen3_moe": {"model_type": "qwen3_moe", "head_dim": 32, "num_experts": 4,
                  "num_experts_per_tok": 2, "moe_intermediate_size": 128},
}  # fmt: skip

OPTIMS = ("adamw_torch", "adamw_torch_fused", "adamw_bnb_8bit", "adafactor", "sgd")
#: The Trainer's optim name → (TrainingSetup.optimizer, optimizer_impl).
SETUP_OPTIM = {
    "adamw_torch": ("adamw", "auto"),
    "adamw_torch_fused": ("adamw", "fused"),
    "adamw_bnb_8bit": ("adam8bit", "auto"),
    "adafactor": ("adafactor", "auto"),
    "sgd": ("sgd", "auto"),
}
DIMENSIONS = {
    "trainer": ("hf", "trl"),
    "family": tuple(FAMILIES),
    "optim": OPTIMS,
    "bf16": (False, True),
    "checkpointing": (False, True),
    "batch": (1, 2),
    "accum": (1, 2),
    "lora": (False, True),
}


def config(family: str) -> dict:
    raw = dict(FAMILIES[family])
    if family == "gpt2":
        return raw
    base = dict(hidden_size=D, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                num_key_value_heads=KV, intermediate_size=FFN, vocab_size=V,
                max_position_embeddings=256)  # fmt: skip
    return base | raw


def grid() -> list[dict]:
    from covering import pairwise

    names = list(DIMENSIONS)
    sizes = [len(DIMENSIONS[n]) for n in names]
    rows = []
    for seed in SEEDS:
        for levels in pairwise(sizes, seed):
            rows.append({n: DIMENSIONS[n][i] for n, i in zip(names, levels, strict=True)})
    return rows


def setup_kwargs(row: dict) -> dict:
    optimizer, impl = SETUP_OPTIM[row["optim"]]
    kwargs = dict(
        batch_size=row["batch"], seq_len=T, precision="amp" if row["bf16"] else "fp32",
        optimizer=optimizer, optimizer_impl=impl, activation_checkpointing=row["checkpointing"],
        grad_accum=row["accum"], implementation="transformers", loop="labels", device="cpu",
        trainer=row["trainer"], cross_entropy="trl" if row["trainer"] == "trl" else "standard",
    )  # fmt: skip
    if row["lora"]:
        kwargs |= dict(finetune="lora", lora_rank=8)
    return kwargs


def run_row(row: dict) -> dict:
    from introspect.adapters.hf_config import spec_from_config

    from introspect.measure import trainer_run
    from introspect.measure.compare import by_category, refined_estimate
    from introspect.refined.implementations import resolve_attention
    from introspect.setup import TrainingSetup

    raw = config(row["family"])
    spec = spec_from_config(raw, source=row["family"])
    kwargs = setup_kwargs(row)
    out = dict(row)
    try:
        setup = TrainingSetup(**kwargs)
        estimate_error = None
    except Exception as err:  # noqa: BLE001 - the closed form's refusal, one line
        estimate_error = str(err).splitlines()[0]
        # the run itself needs no estimate: the same setup with the loss it can hold
        setup = TrainingSetup(**(kwargs | dict(trainer="hf", cross_entropy="standard")))
    setup = resolve_attention(spec, setup)
    terms: dict[str, int] = {}
    m = trainer_run.measure(raw, row["family"], spec, setup, trainer=row["trainer"], terms=terms)
    out |= {
        "attention": setup.attention,
        "measured": m.peak_bytes,
        "phase": m.peak_phase,
        "measured_categories": m.categories,
        "n_params": m.n_params,
        "trainable": m.trainable_params,
        "measured_terms": terms,
    }
    if estimate_error is None:
        try:
            refined = refined_estimate(spec, setup)
        except Exception as err:  # noqa: BLE001 - a refusal is a row, not a crash
            estimate_error = str(err).splitlines()[0]
    if estimate_error is not None:
        return out | {"refused": estimate_error}
    est = by_category(refined)
    gaps = {k: m.categories.get(k, 0) - est.get(k, 0) for k in set(m.categories) | set(est)}
    # the tracker files the update's and the loss's scratch as temporary, the estimate
    # within activations: compare their sum as one when naming the cause
    transient = gaps.pop("activations", 0) + gaps.pop("temporary", 0)
    gaps["activations+temporary"] = transient
    cause = max(gaps, key=lambda k: abs(gaps[k]))
    # bitsandbytes' FP32 state where the estimate has 8-bit: 8 bytes a value, not 2
    note = "".join(
        f"; {name} {value / 1e6:.3f} MB measured" for name, value in terms.items() if value
    )
    return out | {
        "note": note,
        "estimate": refined.total,
        "ratio": m.peak_bytes / refined.total,
        "estimate_categories": est,
        "cause": cause,
        "cause_bytes": gaps[cause],
    }


#: The keys ``--only`` prints for each row.
SHOWN = ("measured", "estimate", "ratio", "phase", "cause", "cause_bytes", "refused")


def label(r: dict) -> str:
    bits = [r["trainer"], r["family"], r["optim"]]
    bits += ["bf16" if r["bf16"] else "fp32"]
    bits += ["ckpt"] if r["checkpointing"] else []
    bits += [f"B={r['batch']}", f"M={r['accum']}"]
    bits += ["LoRA"] if r["lora"] else []
    return " ".join(bits)


def summary(rows: list[dict]) -> str:
    scored = [r for r in rows if "ratio" in r]
    refused = [r for r in rows if "refused" in r]
    within = {p: sum(abs(r["ratio"] - 1) <= p / 100 for r in scored) for p in (1, 3, 5)}
    worst = max(scored, key=lambda r: abs(r["ratio"] - 1))
    return (
        f"{len(rows)} rows ({len(scored)} estimated, {len(refused)} refused by the closed "
        f"form): within ±1% {within[1]}, ±3% {within[3]}, ±5% {within[5]} of "
        f"{len(scored)}; worst {label(worst)} at {worst['ratio']:.3f} "
        f"({worst['cause']} {worst['cause_bytes'] / 1e6:+.2f} MB)"
    )


def markdown(rows: list[dict], seconds: float, versions: dict) -> str:
    from tabulate import tabulate

    body = []
    for r in rows:
        if "ratio" in r:
            body.append((label(r), r["attention"], f"{r['measured']:,}", f"{r['estimate']:,}",
                         f"{r['ratio']:.4f}", r["phase"],
                         f"{r['cause']} {r['cause_bytes'] / 1e6:+.3f} MB{r['note']}"))  # fmt: skip
        else:
            body.append((label(r), r["attention"], f"{r['measured']:,}", "refused", "",
                         r["phase"], r["refused"]))  # fmt: skip
    lines = [
        "# The HF Trainer and TRL SFTTrainer on CPU beside the closed form",
        "",
        "Command: `.venv/bin/python benchmarks/trainers.py` "
        f"({seconds:.0f} s; {', '.join(f'{k} {v}' for k, v in versions.items())}).",
        "",
        f"Shape: d={D}, {LAYERS} layers, {HEADS} heads (K/V {KV}), f={FFN}, V={V} "
        f"(GPT-2: its own keys; phi3 pad 0), T={T}; 2 optimizer steps per row; peak of live "
        "tensor bytes over the whole trainer.train(); estimate = refined execution "
        "estimate with setup.trainer set. Pairwise covering arrays, seeds "
        f"{', '.join(map(str, SEEDS))}.",
        "",
        f"**Summary:** {summary(rows)}",
        "",
        "Gap column: the category holding the largest measured − estimated bytes "
        "(activations and temporaries compared as one: the tracker files scratch made in "
        "backward as temporary, the estimate within activations).",
        "",
        tabulate(
            body,
            ["row", "attention", "measured B", "estimate B", "ratio", "peak in", "gap / refusal"],
            tablefmt="github",
            disable_numparse=True,
        ),
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--limit", type=int, default=None, help="only the first N rows (a smoke run)")
    p.add_argument(
        "--only",
        metavar="SUBSTRING",
        default=None,
        help="only the rows whose label contains SUBSTRING (printed, results files untouched)",
    )
    args = p.parse_args()
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from introspect.measure.record import versions

    rows = grid()
    if args.only is not None:
        rows = [r for r in rows if args.only in label(r)]
    rows = rows[: args.limit]
    start = time.perf_counter()
    results = []
    for i, row in enumerate(rows, 1):
        r = run_row(row)
        results.append(r)
        shown = f"{r['ratio']:.4f}" if "ratio" in r else "refused"
        print(f"[{i}/{len(rows)}] {label(r)}: {shown}", file=sys.stderr, flush=True)
        if args.only is not None:
            print(json.dumps({k: r.get(k) for k in SHOWN}, default=str), flush=True)
    if args.only is not None:
        return 0
    seconds = time.perf_counter() - start
    v = versions("torch", "transformers", "trl", "accelerate", "peft", "bitsandbytes")
    v = {k: v[k] for k in ("torch", "transformers", "trl", "accelerate", "peft", "bitsandbytes")}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "trainers.md").write_text(markdown(results, seconds, v))
    (OUT / "trainers.json").write_text(
        json.dumps(
            {"versions": v, "seconds": seconds, "summary": summary(results), "rows": results},
            indent=1,
            default=str,
        )
        + "\n"  # fmt: skip
    )
    print(summary(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
