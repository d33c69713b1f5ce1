"""The MLX closed form's mixture-of-experts structures against measured mlx-lm steps.

    python benchmarks/mlx_moe.py          # writes benchmarks/results/mlx-moe.md, mlx-moe.json
    python benchmarks/mlx_moe.py --again  # measure every row again (else only new rows)

Each row is a real step of mlx-lm's ``qwen3_moe`` or ``mixtral`` class on the CPU
(:func:`introspect.measure.mlx_lm_models.measure`: the largest of ``MLX_STEPS`` steps
after a warm-up), FP32 full fine-tuning with Adam, eager and compiled, beside the replay
of the same step (:mod:`introspect.measure.mlx_replay`, whose sorted-expert weight
gradients :mod:`introspect.measure.mlx_replay_moe` rebuilds) and two closed forms:
*now* (``refined.estimate``: the MoE counts of ``benchmarks/mlx_derive.py``) and
*before* (the same estimate with :func:`introspect.refined.mlx.moe_structure` off — the
dense counts ``structure_of`` gave a MoE spec before: ``qwen3`` for qwen3_moe,
``llama-untied`` for mixtral). Every row is held out: the counts come from replays at
B=3, d=128, 8 heads (2 K/V), E=12, k=4, expert width 216, T ∈ {44, 176, 704},
V ∈ {1000, 4000, 16000}, L = 2–16, 24, 32; no row has that shape. Replay-only rows
(:data:`BIG`: Qwen3-30B-A3B's and Mixtral-8x7B's shapes, lazy weights, nothing
allocated) check the closed form against the replay at sizes no step here can run. BF16 has no row:
MLX's CPU ``GatherMM`` runs FP32 only (``mlx/backend/cpu/masked_mm.cpp``).
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

RESULTS = ROOT / "benchmarks" / "results"
REPORT = RESULTS / "mlx-moe.md"
DATA = RESULTS / "mlx-moe.json"
BAND = 0.05
#: (family, label, d, L, heads, kv heads, V, E, k, expert width, B, T). The first two
#: are the lead's ad hoc qwen3_moe config (the issue's figures).
ROWS = (
    ("qwen3_moe", "issue", 256, 4, 8, 2, 4000, 16, 4, 256, 1, 256),
    ("qwen3_moe", "issue", 256, 4, 8, 2, 4000, 16, 4, 256, 1, 1024),
    ("qwen3_moe", "small-mha", 128, 2, 4, 4, 2000, 8, 2, 96, 2, 128),
    ("qwen3_moe", "many-experts", 192, 6, 6, 2, 3000, 32, 8, 64, 1, 512),
    ("qwen3_moe", "top-1", 128, 3, 8, 2, 8000, 4, 1, 320, 4, 64),
    ("qwen3_moe", "deep", 96, 12, 4, 1, 1500, 8, 2, 128, 2, 96),
    ("mixtral", "gqa", 128, 4, 8, 2, 2000, 8, 2, 160, 2, 128),
    ("mixtral", "wide-k", 192, 6, 6, 3, 3000, 16, 4, 96, 1, 384),
    ("mixtral", "mha-long", 256, 2, 4, 4, 4000, 4, 2, 256, 1, 1024),
)


#: Replay-only rows at published shapes no step here can run: (label, config, T, compiled).
QWEN3_30B = dict(
    model_type="qwen3_moe", hidden_size=2048, num_hidden_layers=48, intermediate_size=6144,
    num_attention_heads=32, num_key_value_heads=4, head_dim=128, vocab_size=151936,
    num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768, decoder_sparse_step=1,
    mlp_only_layers=[], rms_norm_eps=1e-6, rope_theta=1e6, max_position_embeddings=40960,
    tie_word_embeddings=False, norm_topk_prob=True,
)  # fmt: skip
MIXTRAL_8X7B = dict(
    model_type="mixtral", hidden_size=4096, num_hidden_layers=32, intermediate_size=14336,
    num_attention_heads=32, num_key_value_heads=8, vocab_size=32000, num_local_experts=8,
    num_experts_per_tok=2, rms_norm_eps=1e-5, rope_theta=1e6, tie_word_embeddings=False,
)  # fmt: skip
BIG = (
    ("Qwen3-30B-A3B shape (L=48, beyond the deepest count)", QWEN3_30B, 2048, False),
    ("Qwen3-30B-A3B shape (L=48, beyond the deepest count)", QWEN3_30B, 2048, True),
    ("Qwen3-30B-A3B shape at L=20 (between counts)", dict(QWEN3_30B, num_hidden_layers=20),
     1024, False),
    ("Mixtral-8x7B shape", MIXTRAL_8X7B, 1024, False),
    ("Mixtral-8x7B shape", MIXTRAL_8X7B, 1024, True),
)  # fmt: skip


def big_rows() -> list[dict]:
    """The replay and the closed form at :data:`BIG`'s shapes (lazy weights: nothing
    allocated)."""
    from mlx_closed_form import replay_config, setup_of, spec_of_config

    from introspect.refined import estimate

    out = []
    for label, cfg, seq, compiled in BIG:
        setup = setup_of("mlx_lm", "fp32", 1, seq, compiled)
        out.append(
            dict(label=label, T=seq, compiled=compiled, replay=replay_config(cfg, setup),
                 estimate=estimate(spec_of_config(cfg), setup).total)
        )  # fmt: skip
    return out


def config(family, d, layers, heads, kv, vocab, experts, top_k, width) -> dict:
    from introspect.measure import mlx_replay as mr

    return mr.family_config(
        family, d, layers, width, heads, kv, vocab, experts=experts, top_k=top_k
    )


@contextmanager
def before():
    """The estimate without the MoE structures (the dense counts)."""
    from introspect.refined import mlx

    original = mlx.moe_structure
    mlx.moe_structure = lambda spec, setup: None
    try:
        yield
    finally:
        mlx.moe_structure = original


def caught_up(r: dict) -> int:
    """The replay's other bound for a row: the worker running each task at once."""
    import mlx.core as mx
    import mlx.optimizers as optim

    from introspect.measure import mlx_replay as mr

    cfg = config(r["family"], r["d"], r["L"], r["h"], r["kv"], r["V"], r["E"], r["k"], r["fe"])
    model = mr.mlx_lm_model(cfg, mx.float32, evaluate=False)
    optimizer = optim.Adam(learning_rate=1e-4)
    optimizer.init(model.trainable_parameters())
    batch = mr.mlx_lm_batch(r["V"], r["B"], r["T"], evaluate=False)
    step = mr.make_step(model, optimizer, mr.mlx_lm_loss, r["compiled"])
    graph = mr.graph_of(model, optimizer, step, batch, r["compiled"])
    return mr.replay(graph, worker="caught_up").peak_bytes


def key(r: dict) -> tuple:
    return tuple(r[k] for k in ("family", "label", "d", "L", "T", "B", "compiled"))


def rows(done: list[dict]) -> list[dict]:
    """Every row of :data:`ROWS`, eager and compiled: measured and replayed unless
    ``done`` (an earlier run's rows) has it."""
    from mlx_closed_form import replay_config, setup_of, spec_of_config

    from introspect.measure import mlx_lm_models

    have = {key(r): r for r in done}
    out = []
    for family, label, d, layers, heads, kv, vocab, experts, top_k, width, batch, seq in ROWS:
        cfg = config(family, d, layers, heads, kv, vocab, experts, top_k, width)
        spec = spec_of_config(cfg)
        for compiled in (False, True):
            row = dict(
                family=family, label=label, d=d, L=layers, h=heads, kv=kv, V=vocab,
                E=experts, k=top_k, fe=width, B=batch, T=seq, compiled=compiled,
            )  # fmt: skip
            if key(row) in have:
                out.append(have[key(row)])
                continue
            setup = setup_of("mlx_lm", "fp32", batch, seq, compiled)
            m = mlx_lm_models.measure(cfg, label, spec, setup, compiled=compiled)
            row.update(measured=m.peak_bytes, replay=replay_config(cfg, setup))
            out.append(row)
            print(
                f"{family} {label} d={d} L={layers} E={experts} k={top_k} B={batch} T={seq} "
                f"{'compiled' if compiled else 'eager'}: measured {m.peak_bytes / 1e6:.2f} MB, "
                f"replay {row['replay'] / 1e6:.2f}",
                flush=True,
            )
    return out


def reestimate(rows: list[dict]) -> list[dict]:
    """The closed forms, now and before, for measured rows."""
    from mlx_closed_form import setup_of, spec_of_config

    from introspect.refined import estimate

    for r in rows:
        spec = spec_of_config(
            config(r["family"], r["d"], r["L"], r["h"], r["kv"], r["V"], r["E"], r["k"], r["fe"])
        )
        setup = setup_of("mlx_lm", "fp32", r["B"], r["T"], r["compiled"])
        now = estimate(spec, setup)
        with before():
            r["before"] = estimate(spec, setup).total
        r["estimate"], r["phase"] = now.total, now.execution.meta.get("peak_phase")
    return rows


def within(rows: list[dict], key: str) -> int:
    return sum(abs(r[key] / r["measured"] - 1) <= BAND for r in rows)


def span(rows: list[dict], key: str) -> str:
    ratios = [r[key] / r["measured"] for r in rows]
    return f"{min(ratios):.3f} to {max(ratios):.3f}"


def write(rows: list[dict], big: list[dict], seconds: float) -> None:
    import mlx.core as mx

    lines = [
        "# MLX closed form: mlx-lm's qwen3_moe and mixtral, measured on the CPU",
        "",
        "    python benchmarks/mlx_derive.py --from qwen3_moe   # the counts, from replays",
        "    python benchmarks/mlx_moe.py                       # this file",
        "",
        f"mlx {mx.__version__}, CPU, FP32 Adam full fine-tuning; {seconds:.0f} s. "
        "*measured*: the largest of 3 steps after a warm-up. *replay*: the traced step "
        "replayed. *now*: `refined.estimate` with the MoE structures' counts; *before*: "
        "the dense counts a MoE spec got before (qwen3 for qwen3_moe, llama-untied for "
        "mixtral). All rows held out (derivation: replays at B=3, d=128, 8 heads (2 K/V), "
        "E=12, k=4, expert width 216, T ∈ {44, 176, 704}, L = 2–16, 24, 32).",
        "",
        "| family | row | d | L | h/kv | V | E | k | fe | B | T | mode | measured MB | replay/meas "
        "| now/meas | before/meas |",
        "|---|---|--:|--:|:-:|--:|--:|--:|--:|--:|--:|---|--:|--:|--:|--:|",
    ]
    for r in rows:
        m = r["measured"]
        lines.append(
            f"| {r['family']} | {r['label']} | {r['d']} | {r['L']} | {r['h']}/{r['kv']} | "
            f"{r['V']} | {r['E']} | {r['k']} | {r['fe']} | {r['B']} | {r['T']} | "
            f"{'compiled' if r['compiled'] else 'eager'} | {m / 1e6:.2f} | "
            f"{r['replay'] / m:.3f} | {r['estimate'] / m:.3f} | {r['before'] / m:.3f} |"
        )
    lines += [
        "",
        "## Replay only (published shapes; FP32, B=1)",
        "",
        "| shape | T | mode | replay GB | closed form GB | closed/replay |",
        "|---|--:|---|--:|--:|--:|",
    ]
    for r in big:
        lines.append(
            f"| {r['label']} | {r['T']} | {'compiled' if r['compiled'] else 'eager'} | "
            f"{r['replay'] / 1e9:.2f} | {r['estimate'] / 1e9:.2f} | "
            f"{r['estimate'] / r['replay']:.3f} |"
        )
    lines += ["", "## Summary", ""]
    for title, sel in (
        ("all rows", rows),
        *((f, [r for r in rows if r["family"] == f]) for f in ("qwen3_moe", "mixtral")),
    ):
        if not sel:
            continue
        n = len(sel)
        lines += [
            f"- {title}: now {within(sel, 'estimate')} of {n} within ±5% "
            f"({span(sel, 'estimate')}); before {within(sel, 'before')} of {n} "
            f"({span(sel, 'before')}); the replay {within(sel, 'replay')} of {n} "
            f"({span(sel, 'replay')}).",
        ]
    lines.append("")
    misses = [r for r in rows if abs(r["estimate"] / r["measured"] - 1) > BAND]
    if misses:
        lines += ["Rows outside ±5% now:", ""]
        for r in misses:
            if abs(r["replay"] / r["measured"] - 1) > BAND:
                low = caught_up(r) / r["measured"]
                why = (
                    f" — the replay's own miss: the measured peak lies between its two "
                    f"worker bounds ({low:.3f} caught up, {r['replay'] / r['measured']:.3f} "
                    f"behind); a step of few ops (here B={r['B']}, L={r['L']}) lets the CPU "
                    "worker keep up, so fewer tasks are pending than the scheduler allows, "
                    "as in the dense grid's four misses (mlx_replay.md)"
                )
            else:
                why = ""
            lines.append(
                f"- {r['family']} {r['label']} T={r['T']} "
                f"{'compiled' if r['compiled'] else 'eager'}: "
                f"{r['estimate'] / r['measured']:.3f} "
                f"(replay {r['replay'] / r['measured']:.3f}){why}"
            )
        lines.append("")
    REPORT.write_text("\n".join(lines))


def main() -> None:
    start = time.perf_counter()
    done = json.loads(DATA.read_text()) if DATA.exists() and "--again" not in sys.argv else []
    measured = rows(done)
    DATA.write_text(json.dumps(measured, indent=1) + "\n")
    out = reestimate(measured)
    DATA.write_text(json.dumps(out, indent=1) + "\n")
    write(out, big_rows(), time.perf_counter() - start)
    print(REPORT.read_text())


if __name__ == "__main__":
    main()
