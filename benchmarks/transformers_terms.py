"""The refined estimate of transformers' own classes against their real steps.

Run:  .venv/bin/python benchmarks/transformers_terms.py grid      # real CPU steps, ~2 min
      .venv/bin/python benchmarks/transformers_terms.py qwen      # Qwen2.5-0.5B, T=2048
      .venv/bin/python benchmarks/transformers_terms.py mistral   # Mistral-7B, T=2048

``grid``: every family of ``tests/hf_steps.py`` (llama, qwen2, qwen3, gemma, phi, gpt2,
mistral, olmo2), eager and SDPA, labels and logits loops, FP32 / pure BF16 / autocast,
B=2, T=256, and eager with gradient checkpointing, one real CPU step each after a
warm-up (live-storage tracker). ``qwen`` and
``mistral``: the real class built inside FakeTensorMode (no memory allocated, the same
storages), labels loop, eager and SDPA, FP32 and pure BF16 — the refined execution terms
grouped into the tracker's categories beside the measured ones, and the saved set at the
end of forward beside the census. Prints the ratio refined / measured per row.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import hf_steps  # noqa: E402

from introspect import refined  # noqa: E402
from introspect.refined import execution  # noqa: E402
from introspect.setup import TrainingSetup  # noqa: E402

QWEN25_05B = dict(
    model_type="qwen2",
    hidden_size=896,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    intermediate_size=4864,
    vocab_size=151936,
    tie_word_embeddings=True,
    max_position_embeddings=32768,
    rope_theta=1000000.0,
)
MISTRAL_7B = dict(
    model_type="mistral",
    hidden_size=4096,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    intermediate_size=14336,
    vocab_size=32000,
    max_position_embeddings=32768,
    sliding_window=None,
    rope_theta=1000000.0,
)


def setup_for(precision: str, attention: str, loop: str, T: int, B: int, **kw) -> TrainingSetup:
    return TrainingSetup(
        batch_size=B,
        seq_len=T,
        device="cpu",
        attention=attention,
        loop=loop,
        precision=precision,
        activation_dtype="fp32" if precision == "fp32" else "bf16",
        implementation="transformers",
        optimizer="adamw",
        **kw,
    )


def category(term: str) -> str:
    """The tracker category a refined term's bytes fall in: made in forward =
    activations; made in backward or the update before becoming a gradient = temporary."""
    if term == "weights" or term.startswith("weights/"):
        return "parameters"
    if term == "optimizer/temporaries" or term.startswith("grads/"):
        return "temporary"
    if term.startswith("optimizer/"):
        return "optimizer_state"
    if term == "grads":
        return "gradients"
    return "temporary" if term.endswith("/grad") else "activations"


def grid() -> None:
    rows = 0
    worst = (1.0, "")
    for family in hf_steps.CONFIGS:
        spec = hf_steps.spec_for(hf_steps.CONFIGS[family])
        for attention, ckpt in (("eager", False), ("memory_efficient", False), ("eager", True)):
            for loop in ("labels", "logits"):
                for precision in ("fp32", "bf16", "amp"):
                    setup = setup_for(
                        precision, attention, loop, 256, 2, activation_checkpointing=ckpt
                    )
                    m = hf_steps.measure_family(family, setup)
                    r = refined.estimate(spec, setup)
                    ratio = r.total / m.peak_bytes
                    name = f"{family} {attention}{' ckpt' if ckpt else ''} {loop} {precision}"
                    print(
                        f"{name:36} measured {m.peak_bytes / 1e6:8.3f} MB  refined "
                        f"{r.total / 1e6:8.3f} MB  {ratio:.4f}  {r.peak_phase}",
                        flush=True,
                    )
                    rows += 1
                    if abs(ratio - 1) > abs(worst[0] - 1):
                        worst = (ratio, name)
    print(f"{rows} rows; worst {worst[1]}: {worst[0]:.4f}")


def dry(config: dict, label: str, T: int = 2048, B: int = 1) -> None:
    spec = hf_steps.spec_for(config)
    for precision in ("fp32", "bf16"):
        for attention in ("eager", "memory_efficient"):
            setup = setup_for(precision, attention, "labels", T, B)
            m = hf_steps.dry_run(config, setup)
            r = refined.estimate(spec, setup)
            est: dict[str, int] = {}
            for term, value in r.execution.terms.items():
                est[category(term)] = est.get(category(term), 0) + value
            print(
                f"\n{label} T={T} B={B} {precision} {attention} labels loop: measured "
                f"{m.peak_bytes / 1e9:.3f} GB ({m.peak_phase}), refined "
                f"{r.total / 1e9:.3f} GB ({r.peak_phase}), ratio {r.total / m.peak_bytes:.4f}"
            )
            for cat in ("parameters", "gradients", "optimizer_state", "activations", "temporary"):
                print(
                    f"  {cat:16} measured {m.categories.get(cat, 0) / 1e9:8.3f}  refined "
                    f"{est.get(cat, 0) / 1e9:8.3f}"
                )
            top = sorted(r.execution.terms.items(), key=lambda kv: -kv[1])[:8]
            for term, value in top:
                print(f"    {term:52} {value / 1e9:8.3f} GB")
            saved = sum(execution.saved_terms(spec, setup).values())
            print(f"  saved at the end of forward (refined): {saved / 1e9:.3f} GB")


def header(what: str, seq: int) -> str:
    """The first line of a results file: the command, the date and the versions."""
    import datetime

    import torch
    import transformers

    seq_flag = f" --seq {seq}" if seq != 2048 else ""
    today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    return (
        f"# python benchmarks/transformers_terms.py {what}{seq_flag} — {today}, torch "
        f"{torch.__version__}, transformers {transformers.__version__}; FakeTensorMode dry runs"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("grid", "qwen", "mistral"))
    p.add_argument("--seq", type=int, default=2048)
    args = p.parse_args()
    if args.what != "grid":  # the results file says how it was made (the grid's is written by hand)
        print(header(args.what, args.seq))
    if args.what == "grid":
        grid()
    elif args.what == "qwen":
        dry(QWEN25_05B, "Qwen2.5-0.5B", args.seq)
    else:
        dry(MISTRAL_7B, "Mistral-7B", args.seq)


if __name__ == "__main__":
    main()
