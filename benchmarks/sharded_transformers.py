"""transformers' own classes under DDP, ZeRO-1 and FSDP2 in real gloo processes, beside
the refined per-rank estimate.

Run:  .venv/bin/python benchmarks/sharded_transformers.py     # about 2 minutes

``benchmarks/sharded_accuracy.py`` measures our reference model; this runs each family's
``*ForCausalLM`` class (``introspect.measure.distributed.measure_many`` with its config),
stepped as its users step it: ``model(input_ids=x, labels=x).loss`` (the HF Trainer's
loop) or cross-entropy on the held logits, D = 2 processes, FP32 (and FSDP2's
MixedPrecisionPolicy), Adam after two warm-up steps; the peak is the largest rank's live
tensor storages (torch's FSDPMemTracker / MemTracker). Writes
``benchmarks/results/sharded-transformers.md``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

OUT = Path(__file__).parent / "results" / "sharded-transformers.md"

SMALL = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, vocab_size=8192,
             max_position_embeddings=4096)  # fmt: skip
CONFIGS = {
    "llama": dict(SMALL, model_type="llama", num_key_value_heads=2, intermediate_size=704),
    "qwen2": dict(
        SMALL,
        model_type="qwen2",
        num_key_value_heads=2,
        intermediate_size=704,
        tie_word_embeddings=True,
    ),  # fmt: skip
    "qwen3": dict(
        SMALL, model_type="qwen3", num_key_value_heads=2, intermediate_size=704, head_dim=64
    ),  # fmt: skip
    "mixtral": dict(
        SMALL,
        model_type="mixtral",
        num_key_value_heads=2,
        intermediate_size=352,
        num_local_experts=4,
        num_experts_per_tok=2,
    ),  # fmt: skip
    "gpt2": dict(
        model_type="gpt2", n_embd=256, n_layer=4, n_head=4, vocab_size=8192, n_positions=1024
    ),  # fmt: skip
}

#: (label, TrainingSetup fields)
SHARDINGS = [
    ("DDP", dict(sharding="ddp")),
    ("ZeRO-1", dict(sharding="zero", zero_stage=1)),
    ("FSDP2", dict(sharding="fsdp")),
    ("FSDP2 no-reshard", dict(sharding="fsdp", reshard_after_forward=False)),
    ("FSDP2 mixed", dict(sharding="fsdp", precision="mixed")),
]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args()

    from introspect.adapters.hf_config import spec_from_config

    from introspect import report
    from introspect.measure.distributed import measure_many
    from introspect.refined import estimate
    from introspect.refined.causes import tracker_phase
    from introspect.setup import TrainingSetup

    start, rows = time.perf_counter(), []
    for family, config in CONFIGS.items():
        spec = spec_from_config(config, source=family)
        jobs = [
            (label, loop, TrainingSetup(batch_size=2, seq_len=256, devices=2, device="cpu",
                                        implementation="transformers", loop=loop,
                                        attention="memory_efficient", **fields))
            for label, fields in SHARDINGS
            for loop in ("labels", "logits")
        ]  # fmt: skip
        measured = measure_many(
            [(spec, s) for _, _, s in jobs], timeout=900, configs=[config] * len(jobs)
        )
        for (label, loop, setup), m in zip(jobs, measured, strict=True):
            est = estimate(spec, setup)
            big = m.largest
            rows.append([
                family, label, loop, f"{big.peak_bytes / 1e6:.2f}", f"{est.total / 1e6:.2f}",
                f"{est.total / big.peak_bytes:.4f}",
                f"{big.peak_phase} / {tracker_phase(est.peak_phase)}",
            ])  # fmt: skip
            print(*rows[-1], flush=True)
    ratios = [float(r[5]) for r in rows]
    agree = sum(r[6].split(" / ")[0] == r[6].split(" / ")[1] for r in rows)
    lines = [
        "# transformers' classes sharded: refined vs the largest rank",
        "",
        "    python benchmarks/sharded_transformers.py",
        "",
        f"{len(rows)} rows, {(time.perf_counter() - start) / 60:.1f} minutes; d=256, L=4, "
        "V=8192, B=2 per rank, T=256, D=2 gloo processes on 127.0.0.1, SDPA, Adam. "
        "Decimal MB.",
        "",
        f"- refined within ±1%: **{sum(abs(r - 1) <= 0.01 for r in ratios)} of {len(rows)}**; "
        f"within ±3%: {sum(abs(r - 1) <= 0.03 for r in ratios)}; range "
        f"{min(ratios):.4f} to {max(ratios):.4f}; peak phase right: {agree} of {len(rows)}.",
        "",
        report.table(
            rows,
            [
                "family",
                "sharding",
                "loop",
                "measured MB",
                "refined MB",
                "refined/measured",
                "phase (meas / ref)",
            ],
            "markdown",
        ),  # fmt: skip
        "",
    ]
    args.out.write_text("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
