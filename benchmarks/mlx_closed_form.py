"""The MLX closed form (:mod:`introspect.refined.mlx`) against measured MLX CPU peaks and
the MLX replay.

    python benchmarks/mlx_closed_form.py     # writes benchmarks/results/mlx_closed_form.md

The closed form's counts are derived from replays at tiny shapes only
(``benchmarks/mlx_derive.py``: B=3, d=128, 8 heads, f=216, T ∈ {44, 176},
V ∈ {1000, 4000, 16000}, L ∈ {4, 10, 16, 32}); every row here is held out — no measured row
and no row's shape was used. Sources: ``results/mlx_replay_measured.json`` (84 measured
steps, d=256 L=4 V=8192, seven classes), ``results/accuracy.json`` (the seed's 10M/40M/
100M shapes, mlx-lm's Llama, Qwen2 7M, GPT-2 8M with checkpointing) and replay-only rows
at sizes no step here can run (a 1B Llama at T=2048).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

RESULTS = ROOT / "benchmarks" / "results"
REPORT = RESULTS / "mlx_closed_form.md"
CONFIGS = ROOT / "benchmarks" / "configs"
BAND = 0.05
#: mlx-lm's ``tie_word_embeddings`` default for the classes whose config may omit it.
MLX_LM_TIED = {"llama": True, "qwen2": True}
#: Replay-only rows: (label, config, T, dtype, compiled).
BIG_LLAMA = dict(
    model_type="llama", hidden_size=2048, num_hidden_layers=16, num_attention_heads=32,
    num_key_value_heads=8, intermediate_size=8192, vocab_size=128256,
    tie_word_embeddings=True, rms_norm_eps=1e-5, max_position_embeddings=4096, head_dim=64,
)  # fmt: skip
#: Between derivation depths (L = 24; the counts were read at 4, 10, 16 and 32).
BIG_QWEN = dict(
    model_type="qwen2", hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
    num_key_value_heads=2, intermediate_size=4864, vocab_size=151936,
    tie_word_embeddings=True, rms_norm_eps=1e-6, max_position_embeddings=32768,
)  # fmt: skip
#: Deeper than any derivation depth (L = 48).
DEEP_LLAMA = dict(
    model_type="llama", hidden_size=512, num_hidden_layers=48, num_attention_heads=8,
    num_key_value_heads=2, intermediate_size=1408, vocab_size=32000,
    tie_word_embeddings=False, rms_norm_eps=1e-5, max_position_embeddings=4096,
)  # fmt: skip
BIG = (
    ("Llama 48 layers d=512 (untied)", DEEP_LLAMA, 1024, "fp32", False),
    ("Llama 48 layers d=512 (untied)", DEEP_LLAMA, 1024, "bf16", True),
    ("Qwen2 0.5B (Qwen2.5-0.5B shape)", BIG_QWEN, 2048, "fp32", False),
    ("Qwen2 0.5B (Qwen2.5-0.5B shape)", BIG_QWEN, 2048, "bf16", True),
    ("Llama 1.2B (Llama-3.2-1B shape)", BIG_LLAMA, 2048, "fp32", False),
    ("Llama 1.2B (Llama-3.2-1B shape)", BIG_LLAMA, 2048, "bf16", True),
    ("Llama 1.2B (Llama-3.2-1B shape)", BIG_LLAMA, 512, "bf16", False),
)


def setup_of(impl: str, dtype: str, batch: int, seq: int, compiled: bool, ckpt: bool = False):
    from introspect.setup import TrainingSetup

    return TrainingSetup(
        batch_size=batch,
        seq_len=seq,
        activation_dtype=dtype,
        weights_dtype=dtype,
        precision="bf16" if dtype == "bf16" else "fp32",
        attention="eager" if impl == "reference" else "memory_efficient",
        framework="mlx_compiled" if compiled else "mlx",
        implementation=impl,
        activation_checkpointing=ckpt,
        loop="logits",
        device="cpu",
    )


def spec_of_config(cfg: dict):
    from introspect.adapters.hf_config import spec_from_config

    cfg = dict(cfg)
    if cfg["model_type"] in MLX_LM_TIED:
        cfg.setdefault("tie_word_embeddings", MLX_LM_TIED[cfg["model_type"]])
    return spec_from_config(cfg, use_transformers=False)


def closed_form(spec, setup) -> tuple[int, str]:
    from introspect import refined

    est = refined.estimate(spec, setup)
    return est.total, est.peak_phase


def grid_rows() -> list[dict]:
    """The 84 measured steps of ``mlx_replay.py``."""
    import mlx_replay as bench

    from introspect.measure import mlx_replay as mr

    measured = json.loads((RESULTS / "mlx_replay_measured.json").read_text())
    s = bench.SHAPE
    out = []
    for key, r in measured.items():
        family, dtype, b, t, mode = key.split("/")[:5]
        if family == "reference":
            spec, impl = bench.spec_of({"family": "reference"}), "reference"
        else:
            kv = s["heads"] if family in ("phi", "gpt2") else s["kv"]
            cfg = mr.family_config(
                family, s["d"], s["layers"], s["ffn"], s["heads"], kv, s["vocab"]
            )
            spec, impl = spec_of_config(cfg), "mlx_lm"
        setup = setup_of(impl, dtype, int(b[1:]), int(t[1:]), mode == "compiled")
        total, phase = closed_form(spec, setup)
        out.append(
            dict(source="grid", row=key, impl=impl, measured=max(r["measured_peaks"]),
                 replay=r["replay_peak"], closed=total, phase=phase, params=r["n_params"])
        )  # fmt: skip
    return out


def accuracy_rows() -> list[dict]:
    """The MLX rows of ``accuracy.json``, each with the replay where it can be traced."""
    from introspect.measure.shapes import llama_style, nominal_spec

    data = json.loads((RESULTS / "accuracy.json").read_text())
    out = []
    for r in data["rows"]:
        if not r["framework"].startswith("mlx"):
            continue
        compiled = r["framework"] == "mlx_compiled"
        ckpt = "ckpt" in r["variant"]
        if r["size"] in ("10M", "40M", "100M"):
            spec = nominal_spec(r["size"])
            spec = llama_style(spec) if r["variant"] == "llama" else spec
            label = f"{r['implementation']} {r['size']} {r['variant']}"
        else:
            folder = {"Qwen2 7M": "qwen2-7m", "GPT-2 8M": "gpt2-8m"}[r["size"]]
            cfg = json.loads((CONFIGS / folder / "config.json").read_text())
            spec = spec_of_config(cfg)
            label = f"mlx_lm {r['size']}{' ckpt' if ckpt else ''}"
        setup = setup_of(r["implementation"], "fp32", 1, r["seq_len"], compiled, ckpt)
        total, phase = closed_form(spec, setup)
        replay = None if ckpt else replay_of(spec, setup, r)
        out.append(
            dict(source="accuracy", row=f"{label} {r['framework']} T={r['seq_len']}",
                 impl=r["implementation"], measured=r["measured_bytes"], replay=replay,
                 closed=total, phase=phase, ckpt=ckpt)
        )  # fmt: skip
    return out


def replay_of(spec, setup, r: dict) -> int | None:
    from introspect.measure import mlx_replay as mr

    if r["implementation"] == "reference" or r["size"] in ("10M", "40M", "100M"):
        return mr.dry_run(spec, setup, impl=r["implementation"]).peak_bytes
    folder = {"Qwen2 7M": "qwen2-7m", "GPT-2 8M": "gpt2-8m"}[r["size"]]
    cfg = json.loads((CONFIGS / folder / "config.json").read_text())
    return replay_config(cfg, setup)


def replay_config(cfg: dict, setup) -> int:
    """The replay of mlx-lm's class for ``cfg`` (lazy weights, nothing evaluated)."""
    import mlx.core as mx
    import mlx.optimizers as optim

    from introspect.measure import mlx_replay as mr

    dtype = mx.bfloat16 if setup.precision == "bf16" else mx.float32
    model = mr.mlx_lm_model(cfg, dtype, evaluate=False)
    optimizer = optim.Adam(learning_rate=1e-4)
    optimizer.init(model.trainable_parameters())
    batch = mr.mlx_lm_batch(cfg["vocab_size"], setup.batch_size, setup.seq_len, evaluate=False)
    compiled = setup.framework == "mlx_compiled"
    step = mr.make_step(model, optimizer, mr.mlx_lm_loss, compiled)
    return mr.predict(model, optimizer, step, batch, compiled).peak_bytes


def big_rows() -> list[dict]:
    out = []
    for label, cfg, seq, dtype, compiled in BIG:
        spec = spec_of_config(cfg)
        setup = setup_of("mlx_lm", dtype, 1, seq, compiled)
        start = time.perf_counter()
        replay = replay_config(cfg, setup)
        seconds = time.perf_counter() - start
        total, phase = closed_form(spec, setup)
        out.append(
            dict(source="big", row=f"{label} {dtype} {'compiled' if compiled else 'eager'} "
                 f"T={seq}", impl="mlx_lm", measured=None, replay=replay, closed=total,
                 phase=phase, seconds=seconds)
        )  # fmt: skip
    return out


def fmt(x, scale=1e6, digits=2) -> str:
    return "–" if x is None else f"{x / scale:,.{digits}f}"


def ratio(a, b) -> str:
    return "–" if a is None or b is None else f"{a / b:.3f}"


def write(rows: list[dict], seconds: float) -> None:
    import mlx.core as mx

    from introspect.refined import mlx as closed

    lines = [
        "# MLX closed form vs measured MLX CPU peaks and the MLX replay",
        "",
        "    python benchmarks/mlx_derive.py        # the counts, from tiny replays",
        "    python benchmarks/mlx_closed_form.py   # this file",
        "",
        f"mlx {mx.__version__}, CPU; {seconds:.0f} s. *closed form*: `refined.estimate` "
        "(`introspect.refined.mlx`: 3·N·s for the weights and Adam's moments plus c(L) "
        "bytes per element of each shape kind — counted at L = 4, 10, 16, 32, straight "
        "lines between — at the largest of the derived moments). **Derived from** "
        "replays only, at B=3, d=128, 8 heads (2 K/V), f=216, "
        "T ∈ {44, 176}, V ∈ {1000, 4000, 16000}, L ∈ {4, 10, 16, 32} "
        f"({len(closed.STRUCTURES)} structures × FP32/BF16 × eager/compiled). "
        "**Held out**: every row below — no measured step and no row's shape was used. "
        "*replay*: `introspect.measure.mlx_replay` on the same step (the oracle the "
        "counts come from).",
        "",
    ]
    sections = (
        ("Measured grid (mlx_replay_measured.json: d=256, L=4, V=8192)", "grid"),
        ("accuracy.json's MLX rows (B=1, FP32)", "accuracy"),
        ("Replay only (no step of this size runs here)", "big"),
    )
    for title, source in sections:
        sel = [r for r in rows if r["source"] == source]
        lines += [f"## {title}", ""]
        lines.append(
            "| row | split | measured MB | replay MB | closed form MB | closed/measured "
            "| closed/replay | phase |"
        )
        lines.append("|---|:-:|---:|---:|---:|---:|---:|---|")
        for r in sel:
            lines.append(
                f"| {r['row']} | held out | {fmt(r['measured'])} | {fmt(r['replay'])} | "
                f"{fmt(r['closed'])} | {ratio(r['closed'], r['measured'])} | "
                f"{ratio(r['closed'], r['replay'])} | {r['phase']} |"
            )
        lines.append("")
    lines += ["## Summary", ""]
    for label, pick in (
        ("mlx-lm rows", lambda r: r["impl"] == "mlx_lm" and r["measured"]),
        ("reference rows", lambda r: r["impl"] == "reference" and r["measured"]),
    ):
        sel = [r for r in rows if pick(r)]
        within = [r for r in sel if abs(r["closed"] / r["measured"] - 1) <= BAND]
        worst = max(sel, key=lambda r: abs(r["closed"] / r["measured"] - 1))
        lines.append(
            f"- {label}: closed form within ±5% of the measured peak on {len(within)} of "
            f"{len(sel)}; worst {worst['row']} at {worst['closed'] / worst['measured']:.3f}."
        )
    rep = [r for r in rows if r["replay"]]
    close = [r for r in rep if abs(r["closed"] / r["replay"] - 1) <= 0.02]
    worst = max(rep, key=lambda r: abs(r["closed"] / r["replay"] - 1))
    lines.append(
        f"- against the replay: within ±2% on {len(close)} of {len(rep)} rows; worst "
        f"{worst['row']} at {worst['closed'] / worst['replay']:.3f}."
    )
    misses = [r for r in rows if r["measured"] and abs(r["closed"] / r["measured"] - 1) > BAND]
    if misses:
        lines += ["", "Rows outside ±5% of the measured peak, and why:", ""]
        for r in misses:
            lines.append(f"- {r['row']}: {r['closed'] / r['measured']:.3f} — {cause(r)}")
    lines.append("")
    REPORT.write_text("\n".join(lines))


def cause(r: dict) -> str:
    if r.get("ckpt"):
        return (
            "mlx-lm's grad_checkpoint (mx.checkpoint) cannot be traced, so its counts are "
            "not derived from a replay but from the source (introspect.refined.mlx."
            "checkpointed_counts: each layer keeps its input, one layer is recomputed); "
            "what MLX's breadth-first order keeps of the recomputed layers is not modelled"
        )
    if r["replay"] and abs(r["replay"] / r["measured"] - 1) > BAND:
        return (
            f"the replay misses by the same ({r['replay'] / r['measured']:.3f}): at B·T = "
            "128 the CPU worker keeps up with the main thread, so fewer tasks are pending "
            "than the scheduler allows (mlx_replay.md); the closed form follows the replay"
        )
    if r["impl"] == "reference" and r["replay"]:
        return (
            f"the replay is within {abs(r['replay'] / r['measured'] - 1):.1%} of the step, "
            f"the closed form {r['closed'] / r['replay']:.3f} of the replay: in the compiled "
            "Llama-style reference graph the largest moment moves between ops as layers "
            "are added (the fused update kernels interleave with the backward differently "
            "at each depth), so a count per layer fitted over L = 4–16 at the derivation "
            "shape is off at L = 8–12 by a few B·T·d/B·T·f tensors per layer"
        )
    return "not attributed"


def main() -> None:
    start = time.perf_counter()
    rows = grid_rows() + accuracy_rows() + big_rows()
    write(rows, time.perf_counter() - start)
    print(REPORT.read_text())


if __name__ == "__main__":
    main()
