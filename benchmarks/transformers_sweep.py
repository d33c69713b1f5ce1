"""The refined estimate against dry runs of transformers' own classes at realistic ratios.

Run:  .venv/bin/python benchmarks/transformers_sweep.py    # 4 × 150 draws, about 8 minutes

The grid of ``transformers_terms.py`` uses width 64 and a 1,000-token vocabulary, where
the logits hide what a wide feed-forward or a deep stack does to the peak. This sweep
draws setups the way published models are shaped — d = 256 or 512 (heads of 64),
feed-forward 2.75–8·d, vocabulary 8k–150k, 2–16 layers, B = 1–4, T = 128–1024 — over
ten families (two of them mixtures of experts), both attention kernels, both loops,
fp32 / bf16 / amp / mixed, with and without checkpointing, attention dropout 0.1 on a
quarter of the rows that have it, torch's single-tensor, foreach and fused Adam, and
dry-runs each (``introspect.measure.hf_models.measure``,
``device="fake"``: FakeTensorMode, byte for byte the CPU step) beside
``refined.execution_estimate``. The draw is seeded and the rows are the draw. Seeds 9
and 2027 were development sets: their misses (autocast's cache and the FP32 upcast in
the loss's forward, the gated FFN's backward order, MoE's grouped matmuls under
autocast, the dropout mask's dtype after rotary or an FP32-promoting q norm, the
master-gradient copy, fused expert tensors in the update) were found on them and fixed
in the execution layer; seed 4242 was drawn once, after those fixes, and is reported as
held out. Seed 77 draws Gemma 2 and 3 alone (:data:`GEMMA_FAMILIES`, windows of 64, 128
or 4096 tokens), drawn once after their terms were written from small test configs.
Writes ``benchmarks/results/transformers-sweep.md``.
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

OUT = Path(__file__).parent / "results" / "transformers-sweep.md"

FAMILIES = (
    "llama", "qwen2", "qwen3", "gemma", "phi", "gpt2", "mistral", "olmo2", "mixtral",
    "qwen3_moe",
)  # fmt: skip


#: Drawn under their own seed (:data:`GEMMA_SEED`), so the other seeds' draws stay as
#: they were: Gemma 2 (soft-capping, sandwich norms, alternating windows; eager only, as
#: transformers runs it) and Gemma 3 (per-head q/k norms, five sliding layers in six).
GEMMA_FAMILIES = ("gemma2", "gemma3_text")
#: The families whose drawn attention dropout is set (``attention_dropout``).
DROPOUT_FAMILIES = ("llama", "qwen2", "qwen3", "mistral", "olmo2")
GEMMA_SEED = 77


def config(
    family: str,
    d: int,
    layers: int,
    ffn: int,
    vocab: int,
    tied: bool,
    dropout: float = 0.0,
    window: int | None = None,
) -> dict:
    """A config in Hugging Face's keys for ``family`` at this shape (heads of 64)."""
    heads = d // 64
    if family == "gpt2":
        return dict(model_type="gpt2", n_embd=d, n_layer=layers, n_head=heads,
                    vocab_size=vocab, n_positions=2048)  # fmt: skip
    raw = dict(model_type=family, hidden_size=d, num_hidden_layers=layers,
               num_attention_heads=heads, intermediate_size=ffn, vocab_size=vocab,
               max_position_embeddings=4096, tie_word_embeddings=tied)  # fmt: skip
    if family != "phi":
        raw["num_key_value_heads"] = max(1, heads // 2)
    if family == "qwen3":
        raw["head_dim"] = 64
    if family in ("gemma", *GEMMA_FAMILIES):
        raw["head_dim"] = 64
    if family in GEMMA_FAMILIES:
        raw["sliding_window"] = window
    if family == "gemma3_text":
        raw["layer_types"] = [
            "full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(layers)
        ]
    if dropout and family in DROPOUT_FAMILIES:
        raw["attention_dropout"] = dropout
    if family == "phi":
        raw["partial_rotary_factor"] = 0.5
    if family == "mistral":
        raw["sliding_window"] = None
    if family == "mixtral":
        raw.update(num_local_experts=4, num_experts_per_tok=2, intermediate_size=ffn // 2)
    if family == "qwen3_moe":
        raw.update(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=ffn // 4,
                   decoder_sparse_step=1, mlp_only_layers=[])  # fmt: skip
    return raw


def draw(rng: random.Random) -> dict:
    d = rng.choice((256, 512))
    return dict(
        family=rng.choice(FAMILIES),
        d=d,
        dropout=rng.choice((0.0, 0.0, 0.0, 0.1)),
        optimizer_impl=rng.choice(("auto", "foreach", "fused")),
        layers=rng.choice((2, 4, 8, 16)),
        ffn=int(d * rng.choice((2.75, 4, 5.375, 8))),
        vocab=rng.choice((8192, 32000, 151936)),
        tied=rng.random() < 0.5,
        batch=rng.choice((1, 2, 4)),
        seq=rng.choice((128, 256, 512, 1024)),
        attention=rng.choice(("eager", "memory_efficient")),
        precision=rng.choice(("fp32", "bf16", "amp", "mixed")),
        checkpointing=rng.random() < 0.4,
        loop=rng.choice(("labels", "logits")),
    )


def draw_gemma(rng: random.Random) -> dict:
    """A :func:`draw` for a Gemma family, with a sliding window shorter or longer than T."""
    c = draw(rng)
    c["family"] = rng.choice(GEMMA_FAMILIES)
    c["window"] = rng.choice((64, 128, 4096))
    if c["family"] == "gemma2":
        c["attention"] = "eager"  # Gemma2ForCausalLM has no SDPA path (soft-capping)
    return c


def run_row(c: dict) -> dict:
    from introspect.adapters.hf_config import spec_from_config

    from introspect.measure import hf_models
    from introspect.refined import execution_estimate
    from introspect.refined.causes import tracker_phase
    from introspect.setup import TrainingSetup

    raw = config(
        c["family"], c["d"], c["layers"], c["ffn"], c["vocab"], c["tied"], c["dropout"],
        c.get("window"),
    )  # fmt: skip
    spec = spec_from_config(raw, source=c["family"])
    setup = TrainingSetup(
        batch_size=c["batch"], seq_len=c["seq"], precision=c["precision"],
        attention=c["attention"], activation_checkpointing=c["checkpointing"],
        implementation="transformers", loop=c["loop"], device="cpu",
        optimizer_impl=c["optimizer_impl"],
    )  # fmt: skip
    m = hf_models.measure(raw, c["family"], spec, setup, device="fake", census=False)[0]
    est = execution_estimate(spec, setup)
    return c | {
        "measured": m.peak_bytes,
        "refined": est.total,
        "phase": m.peak_phase,
        "refined_phase": tracker_phase(est.meta["peak_phase"]),
        "moment": est.meta["peak_phase"],
    }


def label(r: dict) -> str:
    return (
        f"{r['family']} d{r['d']} L{r['layers']} f{r['ffn']} V{r['vocab']}"
        f"{' tied' if r['tied'] else ''}"
        f"{' drop' if r['dropout'] and r['family'] in DROPOUT_FAMILIES else ''}"
        f"{' W' + str(r['window']) if r.get('window') else ''} B{r['batch']} T{r['seq']} "
        f"{'sdpa' if r['attention'] != 'eager' else 'eager'} "
        f"{r['precision']}{' ckpt' if r['checkpointing'] else ''} {r['loop']} "
        f"{r['optimizer_impl'].replace('_', '-')}"
    )


def summary(rows: list[dict]) -> str:
    errs = [r["refined"] / r["measured"] - 1 for r in rows]
    ok3 = sum(abs(e) <= 0.03 for e in errs)
    ok5 = sum(abs(e) <= 0.05 for e in errs)
    ok1 = sum(abs(e) <= 0.01 for e in errs)
    agree = sum(r["phase"] == r["refined_phase"] for r in rows)
    return (
        f"refined within ±3%: **{ok3} of {len(rows)}** (±1%: {ok1}; ±5%: {ok5}); range "
        f"{min(errs):+.2%} to {max(errs):+.2%}; peak phase right (the tracker's names): "
        f"{agree} of {len(rows)}"
    )


def write(by_seed: dict[int, list[dict]], skipped: list[str], command: str, seconds: float):
    from introspect import report

    held = {
        9: "development set",
        2027: "development set",
        4242: "held out",
        GEMMA_SEED: "Gemma 2 and 3, held out",
    }
    lines = [
        "# transformers' classes at realistic ratios: refined vs dry run",
        "",
        f"    {command}",
        "",
        f"{sum(map(len, by_seed.values()))} seeded draws, {seconds / 60:.1f} minutes. Each "
        "row: the family's own `*ForCausalLM` class from a config at that shape, stepped "
        "as its users step it (labels: `model(input_ids=x, labels=x).loss`; logits: "
        "cross-entropy on the held logits), Adam after a warm-up step, FakeTensorMode (the "
        "CPU step's exact live storages). Error = refined / measured − 1. Seeds 9 and "
        "2027 are the sets the execution layer's last fixes were found on; seed 4242 was "
        "drawn once, after them.",
        "",
    ]
    for seed, rows in by_seed.items():
        lines.append(f"- seed {seed} ({held.get(seed, 'drawn')}): {summary(rows)}.")
    if skipped:
        lines.append(f"- skipped (the class refused the config): {len(skipped)}.")
    for seed, rows in by_seed.items():
        table = [
            [label(r), f"{r['measured'] / 1e9:.4f}", f"{r['refined'] / 1e9:.4f}",
             f"{r['refined'] / r['measured'] - 1:+.2%}",
             f"{r['phase']} / {r['refined_phase']} ({r['moment']})"]
            for r in rows
        ]  # fmt: skip
        headers = ["setup", "measured GB", "refined GB", "error", "phase (meas / ref, moment)"]
        lines += ["", f"## Seed {seed}", "", report.table(table, headers, "markdown")]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=150, help="draws per seed (default 150)")
    p.add_argument(
        "--seed", type=int, action="append", help="repeatable; default 9, 2027, 4242, 77 (Gemma)"
    )
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args()
    seeds = args.seed or [9, 2027, 4242, GEMMA_SEED]
    start, by_seed, skipped = time.perf_counter(), {}, []
    for seed in seeds:
        rng = random.Random(seed)
        rows = by_seed.setdefault(seed, [])
        pick = draw_gemma if seed == GEMMA_SEED else draw
        for c in [pick(rng) for _ in range(args.rows)]:
            try:
                r = run_row(c)
            except Exception as err:  # a refusal is reported, not fatal
                skipped.append(f"{label(c)}: {str(err).splitlines()[0]}")
                print(f"skip {skipped[-1]}")
                continue
            e = r["refined"] / r["measured"] - 1
            print(f"{seed} {label(r):76s} {e:+.2%} {r['phase']}/{r['refined_phase']}", flush=True)
            rows.append(r)
    flags = " ".join(f"--seed {s}" for s in seeds)
    command = f"python benchmarks/transformers_sweep.py --rows {args.rows} {flags}"
    args.out.write_text(write(by_seed, skipped, command, time.perf_counter() - start))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
