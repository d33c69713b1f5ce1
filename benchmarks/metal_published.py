"""Published Metal measurements of mlx-lm LoRA steps beside the estimate.

    .venv/bin/python benchmarks/metal_published.py
    → benchmarks/results/metal-published.md and .json

Each row is a "Peak mem" line mlx-lm printed (``mx.get_peak_memory()``, or
``mx.metal.get_peak_memory()`` before MLX 0.24) on a Mac, quoted with its source URL and
the setup the source states; what the source does not state is named in ``assumed``.
The estimate is ``introspect.refined.estimate`` for that setup, as ``introspect profile
--framework mlx`` gives it, plus Metal's page rounding (:mod:`introspect.metal`; applied,
derived from MLX's source, not measured). Nothing here is tuned to these rows: a miss
beyond ±15% gets a named cause, not a constant.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

OUT = ROOT / "benchmarks" / "results"
COMMAND = ".venv/bin/python benchmarks/metal_published.py"
TOLERANCE = 0.15

#: mlx_lm.lora's defaults (mlx_lm/lora.py CONFIG_DEFAULTS: num_layers 16, batch 4,
#: rank 8, scale 20; tuner/utils.py: every linear of the block when no keys are given).
MLX_LM_DEFAULTS = dict(finetune="lora", lora_rank=8, num_layers=16, batch_size=4)

ROWS = [
    {
        "id": "llama-3.2-1b-defaults-T4095",
        "source": "https://github.com/ml-explore/mlx-lm/pull/47 "
        "(awni, 2025-03-22, 'Without splitting')",
        "hardware": "not stated (an Apple-silicon Mac with more than 70 GB)",
        "mlx": "not stated; 0.24.0 assumed (released 2025-03-20, two days before; "
        "0.25.0 came 2025-04-17)",
        "mlx_version": "0.24.0",
        "model": "meta-llama/Llama-3.2-1B",
        "checkpoint": "mlx-community/llama-3.2-1B-Instruct-bf16 (BF16 base)",
        "setup": "mlx_lm.lora defaults, --max-seq-length 4096: B=4, LoRA r=8 on every linear "
        "of the top 16 of 16 blocks, no checkpointing",
        "flags": {**MLX_LM_DEFAULTS, "seq_len": 4095, "precision": "bf16"},
        "assumed": "T = 4095: 'Trained Tokens 81900' after 5 steps = 4 × 4095 per step "
        "(mlx-lm trains on the batch less its last token); MLX version by date",
        "measured_gb": 69.810,
    },
    {
        "id": "llama-3.2-1b-seq-step-1024",
        "source": "https://github.com/ml-explore/mlx-lm/pull/47 "
        "(awni, 2025-03-22, 'With splitting')",
        "hardware": "not stated",
        "mlx": "not stated (0.24.0 assumed)",
        "mlx_version": "0.24.0",
        "model": "meta-llama/Llama-3.2-1B",
        "checkpoint": "mlx-community/llama-3.2-1B-Instruct-bf16",
        "setup": "as above with the PR's --seq-step-size 1024 (a KV cache splits each "
        "4095-token sequence into 1024-token steps)",
        "flags": {**MLX_LM_DEFAULTS, "seq_len": 4095, "precision": "bf16"},
        "assumed": "as above",
        "not_modelled": "sequence splitting through a KV cache (the PR's --seq-step-size, "
        "not merged into mlx-lm): the estimate is the unsplit step",
        "measured_gb": 19.704,
    },
    {
        "id": "llama-3.1-8b-T8192",
        "source": "https://github.com/ml-explore/mlx-examples/issues/1076 "
        "(hschaeufler, 2024-10-30; "
        "an earlier run of the same config in that issue, 2024-09-20: 121.504 GB)",
        "hardware": "MacBook Pro M3 Max, 128 GB",
        "mlx": "not stated (October 2024: 0.19 assumed)",
        "mlx_version": "0.19.0",
        "model": "meta-llama/Llama-3.1-8B",
        "checkpoint": "meta-llama/Meta-Llama-3.1-8B-Instruct (BF16, converted on load)",
        "setup": "mlx_lm.lora --config; sequences truncated to 8192 ('The longest sentence "
        "19487 will be truncated to 8192'); 'Trainable parameters: 1.045% (83.886M/8030.261M)'",
        "flags": {
            "finetune": "lora",
            "lora_rank": 64,
            "num_layers": 16,
            "batch_size": 1,
            "seq_len": 8192,
            "precision": "bf16",
        },
        "assumed": "B = 1: 'Trained Tokens 22075' in the first 10 steps, one of them the "
        "8192-token batch, and mlx-lm batches length-sorted neighbours, so B ≥ 3 would have "
        "trained more; K = 16 (the same author's config in ml-explore/mlx#1406) and r = 64 "
        "on every linear: 83,886,080 = r·K·81,920 gives r·K = 1,024",
        "measured_gb": 121.550,
    },
    {
        "id": "llama-3-8b-B1-T<=6299",
        "source": "https://github.com/ml-explore/mlx-examples/issues/724 (mzbac, 2024-04-28); "
        "config in https://github.com/ml-explore/mlx-examples/issues/738",
        "hardware": "not stated (a Mac with 192 GB: peaks 'up to 300GB' are reported)",
        "mlx": "0.11.0 (issue 738)",
        "mlx_version": "0.11.0",
        "model": "meta-llama/Llama-3.1-8B",
        "checkpoint": "meta-llama/Meta-Llama-3-8B-Instruct (BF16): the same shapes as "
        "Llama-3.1-8B, bundled",
        "setup": "lora_layers 32, batch_size 1, max_seq_length 8096; 'Trainable parameters: "
        "4.178% (335.544M/8030.261M)'",
        "flags": {
            "finetune": "lora",
            "lora_rank": 128,
            "num_layers": 32,
            "batch_size": 1,
            "seq_len": 6299,
            "precision": "bf16",
        },
        "assumed": "r = 128 on every linear (335,544,320 = r·32·81,920); T ≤ 6299: the peak "
        "rose to 45.742 GB in steps 21–30, which trained 6,299 tokens (14,794 − 8,495) at "
        "B = 1; the estimate is at that bound",
        "not_modelled": "T not stated (at most 6299): a bound, not a comparison",
        "measured_gb": 45.742,
    },
]


def estimate_row(row: dict) -> dict:
    """The refined estimate for the row's setup (``profile --framework mlx``) and the
    Metal view (:func:`introspect.metal.metal_view`)."""
    from introspect.adapters import resolve

    from introspect import metal, refined
    from introspect.refined.implementations import resolve_attention
    from introspect.setup import TrainingSetup

    spec = resolve(row["model"]).spec
    setup = resolve_attention(spec, TrainingSetup(framework="mlx", **row["flags"]))
    est = refined.estimate(spec, setup)
    view = metal.metal_view(spec, setup, est.total)
    terms = {k: v for k, v in est.execution.terms.items() if v}
    label = est.execution.label
    kept = metal.attention_kept_in_training(row.get("mlx_version"))
    derived = view.allocated
    if kept is False and view.fused_024 is not None:
        derived = view.fused_024 + view.rounding
    return {
        "metal_estimate_bytes": derived,
        "attention_kept": kept,
        "estimate_bytes": view.allocated,
        "page_rounding_bytes": view.rounding,
        "label": label,
        "largest_terms": sorted(terms.items(), key=lambda kv: -kv[1])[:4],
    }


def cause(row: dict, ratio: float, result: dict) -> str:
    """The named cause of a miss of the Metal-derived estimate, read off the row's setup,
    its MLX version and the estimate's terms."""
    if row.get("not_modelled"):
        return "not modelled: " + row["not_modelled"]
    if abs(ratio - 1) <= TOLERANCE:
        return "within ±15%"
    terms = dict(result["largest_terms"])
    parts = []
    if "torch" in result["label"]:
        parts.append(
            "this setup takes torch's moments (MLX LoRA counts exist for Llama/Qwen2 blocks "
            "at mlx-lm's default targets only; the label says so)"
        )
    if result["attention_kept"] is False:
        parts.append(
            "MLX 0.24.x ran fused causal attention under grad (applied: the T×T kinds at "
            "one layer); the one layer's T×T count is the CPU line's, read at L ≥ 4, "
            "unverified on Metal"
        )
    elif terms.get("activations/mlx/attention"):
        share = terms["activations/mlx/attention"] / result["estimate_bytes"]
        parts.append(
            f"T×T terms are {share:.0%} of the estimate, kept per layer as on the CPU for "
            "this MLX version; the miss is beyond what they could explain only if the "
            "assumed B or T is wrong"
        )
    parts.append(
        "fused rms_norm/rope VJPs keep less on Metal than the CPU fallback the counts "
        "follow (mlx/fast.cpp:112-177; not applied: estimate high)"
    )
    return "; ".join(parts)


def main() -> int:
    from introspect.units import GB

    rows = []
    for row in ROWS:
        result = estimate_row(row)
        est_gb = result["estimate_bytes"] / GB
        metal_gb = result["metal_estimate_bytes"] / GB
        ratio = row["measured_gb"] / metal_gb
        rows.append(
            {
                **row,
                **result,
                "estimate_gb": est_gb,
                "metal_estimate_gb": metal_gb,
                "profile_ratio": row["measured_gb"] / est_gb,
                "ratio": ratio,
                "cause": cause(row, ratio, result),
            }
        )
    comparable = [r for r in rows if not r.get("not_modelled")]
    within = sum(abs(r["ratio"] - 1) <= TOLERANCE for r in comparable)
    within_profile = sum(abs(r["profile_ratio"] - 1) <= TOLERANCE for r in comparable)
    lines = [
        "# Published Metal measurements beside the estimate",
        "",
        f"Command: `{COMMAND}`",
        "",
        "Measured: mlx-lm's 'Peak mem' (mx.get_peak_memory(): live buffers at the peak, "
        "cache excluded) as each source prints it. *profile*: `introspect.refined.estimate` "
        "for the stated setup, as `introspect profile --framework mlx` gives it (verified on "
        "the CPU stream) plus Metal's page rounding. *Metal-derived*: the same with what "
        "MLX's Metal backend did at the row's MLX version (`introspect.metal`: on 0.24.x "
        "fused causal attention under grad, the T×T kinds at one layer); derived from MLX's "
        "source, not measured. Ratio = measured / estimate.",
        "",
        f"Comparable rows (setup stated or derived from the source): Metal-derived {within} "
        f"of {len(comparable)} within ±15%, profile {within_profile} of {len(comparable)}; "
        f"{len(rows) - len(comparable)} rows not modelled or bounds only.",
        "",
        "| row | source | hardware; MLX | model (checkpoint) | setup | assumed | measured GB "
        "| profile GB | ratio | Metal-derived GB | ratio | cause of a miss |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['id']} | {r['source']} | {r['hardware']}; MLX {r['mlx']} | "
            f"{r['model']} ({r['checkpoint']}) | {r['setup']} | {r['assumed']} | "
            f"{r['measured_gb']:.3f} | {r['estimate_gb']:.3f} | {r['profile_ratio']:.2f} | "
            f"{r['metal_estimate_gb']:.3f} | {r['ratio']:.2f} | {r['cause']} |"
        )
    lines += ["", "Largest terms of the profile estimate per row (GB):", ""]
    for r in rows:
        top = ", ".join(f"{k} {v / GB:.2f}" for k, v in r["largest_terms"])
        lines.append(f"- {r['id']}: {top}; label: {r['label']}")
    lines += [
        "",
        "Not found in the stored issue and page corpora (searched; not included): the "
        "QLoRA-with-checkpointing row on Qwen3-8B-4bit and the 7,936-token fit the issue "
        "names. No row above has a 4-bit affine base (those await the mlx-lora branch).",
    ]
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "metal-published.md").write_text("\n".join(lines) + "\n")
    payload = {"command": COMMAND, "tolerance": TOLERANCE, "rows": rows}
    (OUT / "metal-published.json").write_text(json.dumps(payload, indent=1, default=str) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
