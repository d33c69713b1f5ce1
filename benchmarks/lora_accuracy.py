"""LoRA and QLoRA: estimate vs measured peak of real peft steps (torch CPU).

Run:  .venv/bin/python benchmarks/lora_accuracy.py          # about two minutes here
      .venv/bin/python benchmarks/lora_accuracy.py --quick  # T = 256 only

Each row is one real step of Hugging Face's LlamaForCausalLM wrapped by peft's
get_peft_model (QLoRA: its block linears as bitsandbytes' NF4 Linear4bit, quantized on
CPU), after a warm-up step, peak from the live-storage tracker
(introspect.measure.peft_step). Beside it: the seed's simplified estimate (which knows no
LoRA: it prices a full fine-tune) and the refined estimate with the LoRA terms
(introspect.refined.lora); both as estimate / measured. The shape is the seed's 10M in
its Llama-style variant (RMSNorm, SwiGLU, GQA), B = 1, Adam, SDPA attention. A full
fine-tune of the same shape is the first row of each T for reference. QLoRA rows are
measured when bitsandbytes imports; otherwise they say pending.

Writes benchmarks/results/lora.md and lora.json.
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

from introspect import refined, report, simplified
from introspect.measure.shapes import llama_style, nominal_spec
from introspect.refined.causes import tracker_phase
from introspect.setup import TrainingSetup

RESULTS = Path(__file__).parent / "results"
BF16 = dict(precision="bf16", weights_dtype="bf16", activation_dtype="bf16")
#: (label, TrainingSetup fields)
ROWS = (
    ("full fine-tune, FP32", dict()),
    ("LoRA r=16 q,v, FP32", dict(finetune="lora", lora_targets=("q_proj", "v_proj"))),
    ("LoRA r=16 all-linear, FP32", dict(finetune="lora")),
    ("LoRA r=16 all-linear, dropout 0.05", dict(finetune="lora", lora_dropout=0.05)),
    ("LoRA (emb) r=16, FP32", dict(finetune="lora", train_embeddings=True)),
    ("LoRA r=64 all-linear, FP32", dict(finetune="lora", lora_rank=64)),
    ("LoRA r=16 all-linear, BF16 base", dict(finetune="lora", **BF16)),
    ("QLoRA r=16 all-linear, NF4 + double quant", dict(finetune="qlora", **BF16)),
    ("QLoRA r=16, NF4 without double quant", dict(finetune="qlora", double_quant=False, **BF16)),
)


def bnb_available() -> bool:
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        return False
    return True


def run(seqs: list[int]) -> list[dict]:
    from introspect.measure import peft_step, torch_step
    from introspect.measure.implementations import transformers_llama

    spec = llama_style(nominal_spec("10M"))
    spec = spec.replace(num_parameters=None)
    from introspect.params import parameter_count

    spec = spec.replace(num_parameters=parameter_count(spec))
    bnb = bnb_available()
    rows = []
    for T in seqs:
        for label, fields in ROWS:
            fields = dict(fields)
            fields.setdefault("lora_rank", 16)
            setup = TrainingSetup(seq_len=T, attention="memory_efficient", device="cpu", **fields)
            seed = simplified.estimate(spec, setup).total
            est = refined.estimate(spec, setup)
            row = {
                "setup": label,
                "seq": T,
                "seed_bytes": seed,
                "refined_bytes": est.total,
                "refined_phase": est.peak_phase,
                "measured_bytes": None,
                "measured_phase": None,
            }
            if setup.finetune == "qlora" and not bnb:
                row["status"] = "pending (bitsandbytes does not import here)"
            else:
                if setup.finetune == "full":
                    model = transformers_llama(spec, setup.attention)
                    m = torch_step.measure_step(
                        model, setup, vocab=spec.vocab_size, forward=torch_step.hf_forward,
                        implementation="transformers", loop=setup.loop,
                    )  # fmt: skip
                else:
                    m = peft_step.measure(spec, setup)
                row.update(measured_bytes=m.peak_bytes, measured_phase=m.peak_phase)
                row["status"] = "measured"
            rows.append(row)
            print(label, T, row["measured_bytes"], est.total, flush=True)
    return rows


def ratio(est: int, measured: int | None) -> str:
    return f"{est / measured:.3f}" if measured else "pending"


def render(rows: list[dict]) -> str:
    body = [
        (
            r["setup"],
            r["seq"],
            report.gb(r["measured_bytes"]) if r["measured_bytes"] else r["status"],
            report.gb(r["seed_bytes"]),
            ratio(r["seed_bytes"], r["measured_bytes"]),
            report.gb(r["refined_bytes"]),
            ratio(r["refined_bytes"], r["measured_bytes"]),
            f"{r['measured_phase'] or '-'} / {tracker_phase(r['refined_phase'])} "
            f"({r['refined_phase']})",
        )
        for r in rows
    ]
    head = [
        "setup",
        "T",
        "measured GB",
        "seed GB",
        "seed / measured",
        "refined GB",
        "refined / measured",
        "peak phase (measured / refined)",
    ]
    import peft
    import torch
    import transformers

    versions = f"torch {torch.__version__}, transformers {transformers.__version__}, "
    versions += f"peft {peft.__version__}"
    if bnb_available():
        import bitsandbytes

        versions += f", bitsandbytes {bitsandbytes.__version__}"
    return "\n".join(
        [
            "# LoRA and QLoRA: estimate vs measured peak",
            "",
            "`python benchmarks/lora_accuracy.py` — real peft steps of Hugging Face's "
            "LlamaForCausalLM (torch CPU, after a warm-up step, live-storage tracker), the "
            "seed's 10M shape in its Llama-style variant, B = 1, Adam, SDPA. Decimal GB. "
            "The seed's formula prices a full fine-tune whatever is trained; the refined "
            "estimate has the LoRA terms (introspect/refined/lora.py).",
            "",
            f"{versions}; {platform.platform(terse=True)}",
            "",
            report.table(body, head, "markdown"),
            "",
            "Reading it: what LoRA changes — the frozen base's storage, the adapters' "
            "parameters, gradients and Adam state, the tensors a frozen base still keeps "
            "for the adapters — is exact against peft (tests/test_lora.py: trainable "
            "counts, NF4 bytes, QLoRA − LoRA difference), on top of the estimate of "
            "transformers' own class stepped as its users step it (the loss inside the "
            "model: `model(input_ids=x, labels=x).loss`, every row, the full fine-tune "
            "included). The phase column gives the estimate's moment in the tracker's names "
            "(the loss's own backward, forward_end, is the tracker's backward).",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="T = 256 only")
    parser.add_argument(
        "--rerender", action="store_true", help="rewrite lora.md from lora.json (no steps run)"
    )
    args = parser.parse_args()
    if args.rerender:
        rows = json.loads((RESULTS / "lora.json").read_text())
        (RESULTS / "lora.md").write_text(render(rows) + "\n")
        return
    rows = run([256] if args.quick else [256, 512])
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "lora.json").write_text(json.dumps(rows, indent=2) + "\n")
    (RESULTS / "lora.md").write_text(render(rows) + "\n")
    print(render(rows))


if __name__ == "__main__":
    main()
