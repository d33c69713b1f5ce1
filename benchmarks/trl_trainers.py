"""TRL's trainers as they run, against the closed form: the real ``SFTTrainer`` and
``DPOTrainer`` (TRL 1.16.0) stepped on CPU with a tiny Llama (d = 64, L = 2, V = 8000;
``tests/trl_steps.py``), each config read by the project's own reader
(``introspect.adapters.trainers.hf_trainer``) into the setup the closed form prices, the
live-storage peak of the second step (Adam's state allocated) beside the estimate.

    python benchmarks/trl_trainers.py [--out benchmarks/results/trl-trainers.md]

The rows are the cases of ``tests/test_trl_trainers.py`` (which asserts each within
0.5%); here they are printed with their figures. Takes about three minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def rows() -> list[dict]:
    import test_trl_trainers as t
    import trl_steps
    from introspect.adapters.hf_config import spec_from_config

    from introspect.refined import execution_estimate
    from introspect.refined.causes import tracker_phase

    out = []
    sft = {f"SFT {k}": dict(t.BASE, **v) for k, v in t.CASES.items()}
    packing = {
        "SFT packing bfd (eager)": dict(packing=True),
        "SFT packing wrapped (eager)": dict(packing=True, packing_strategy="wrapped"),
        "SFT padding_free + wrapped (eager)": dict(
            padding_free=True, packing=True, packing_strategy="wrapped"
        ),
    }
    for name, config in sft.items():
        spec, setup, step = t.run_sft(config)
        out.append(_row(name, config, spec, setup, step, execution_estimate, tracker_phase))
    for name, extra in packing.items():
        config = dict(per_device_train_batch_size=2, max_length=256, bf16=False, **extra)
        config["gradient_checkpointing"] = False
        spec = spec_from_config(t.SMALL_VOCAB, source="llama-small")
        setup, _ = trl_steps.setup_from_config(config, attention="eager")
        step = trl_steps.sft_step(
            t.SMALL_VOCAB, trl_steps.rows(2000, [256] * 8), batch=2, attention="eager", **config
        )
        out.append(_row(name, config, spec, setup, step, execution_estimate, tracker_phase))
    for bf16 in (False, True):
        for ckpt in (False, True):
            config = dict(per_device_train_batch_size=2, max_length=512, packing=True)
            config.update(bf16=bf16, gradient_checkpointing=ckpt)
            spec = spec_from_config(t.SMALL_VOCAB, source="llama-small")
            setup, _ = trl_steps.setup_from_config(config)
            step = trl_steps.sft_step(
                t.SMALL_VOCAB, trl_steps.rows(2000, [512] * 8), batch=2, **config
            )
            name = f"SFT packing bfd (SDPA){' bf16' if bf16 else ''}{' ckpt' if ckpt else ''}"
            out.append(_row(name, config, spec, setup, step, execution_estimate, tracker_phase))
    for name, extra in t.DPO_CASES.items():
        config = dict(per_device_train_batch_size=2, max_length=64, **extra)
        spec = spec_from_config(t.LLAMA, source="llama-small")
        setup, _ = trl_steps.setup_from_config(config, kind="dpo")
        step = trl_steps.dpo_step(
            t.LLAMA,
            trl_steps.preference_rows(t.LLAMA["vocab_size"], 16, 40, 40),
            batch=2,
            reference=setup.finetune == "full" and setup.dpo_reference == "model",
            peft_config=trl_steps.peft_config(spec, setup),
            **trl_steps.sft_config_keys(config),
        )
        name = f"DPO {name}"
        out.append(_row(name, config, spec, setup, step, execution_estimate, tracker_phase))
    return out


def _row(name, config, spec, setup, step, execution_estimate, tracker_phase) -> dict:
    est = execution_estimate(spec, setup)
    return {
        "case": name,
        "config": ", ".join(f"{k}={v}" for k, v in config.items()),
        "setup": f"B={setup.batch_size} T={setup.seq_len} {setup.precision} "
        f"{setup.finetune}{' ckpt' if setup.activation_checkpointing else ''} "
        f"{setup.trainer}{' packed' if setup.packed_sequences else ''}",
        "real": step.peak_bytes,
        "closed": est.total,
        "error": est.total / step.peak_bytes - 1,
        "phase": f"{step.phase} / {tracker_phase(est.meta['peak_phase'])}",
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=None, help="also write the table here")
    args = p.parse_args()
    import torch
    import transformers
    import trl

    start = time.perf_counter()
    table = rows()
    lines = [
        "# TRL trainers: the real step against the closed form",
        "",
        f"`python benchmarks/trl_trainers.py` — {datetime.date.today()}, "
        f"{platform.machine()} CPU, torch {torch.__version__}, transformers "
        f"{transformers.__version__}, TRL {trl.__version__}; "
        f"{time.perf_counter() - start:.0f} s. Peak: live tensor storages over the second "
        "optimizer step (the Trainer's whole step: collator batch, compute_loss, backward, "
        "clipping, AdamW, zero_grad); DPO's reference copy counted as an external tensor.",
        "",
        "| case | setup read from the config | real (bytes) | closed form (bytes) | error | "
        "phase (real / closed) |",
        "|---|---|---:|---:|---:|---|",
    ]
    for r in table:
        lines.append(
            f"| {r['case']} | {r['setup']} | {r['real']:,} | {r['closed']:,} | "
            f"{100 * r['error']:+.2f}% | {r['phase']} |"
        )
    worst = max(table, key=lambda r: abs(r["error"]))
    lines += ["", f"Worst row: {worst['case']}, {100 * worst['error']:+.2f}%."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
