"""Real-implementation rows of the accuracy grid: transformers' classes (dry runs under
FakeTensorMode: exact live bytes of the CPU step, nothing allocated) and mlx-lm's
classes (real MLX steps, ≤ 150M parameters), each trained as its users write it.

A cell is a dict: source (a bundled Hub id or a config in benchmarks/configs/), label,
impl, framework, device, batch, seq, attention, precision, checkpointing, loop. The
default set covers the nine families (llama, mistral, qwen2, qwen3, gemma, phi, olmo2,
gpt2, mixtral), 0.1B–14B, T = 256–8192, B = 1 and 4, eager and memory-efficient
attention, fp32 / bf16 / mixed (and amp), with and without checkpointing, both loops.
``--quick`` runs four of them; ``--full`` adds more and every family × attention ×
precision × checkpointing × loop at one T.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Stored relative to the repository (results files carry no checkout's path).
CONFIGS = "benchmarks/configs"

#: label → source: bundled Hub ids, or configs written in benchmarks/configs/.
SOURCES = {
    "Qwen2.5-0.5B": "Qwen/Qwen2.5-0.5B",
    "Qwen3-0.6B": "Qwen/Qwen3-0.6B",
    "Qwen2.5-14B": "Qwen/Qwen2.5-14B",
    "Llama-3.2-1B": "meta-llama/Llama-3.2-1B",
    "gemma-2b": "google/gemma-2b",
    "GPT-2 124M": f"{CONFIGS}/gpt2-124m/config.json",
    "phi 1.4B": f"{CONFIGS}/phi-1.4b/config.json",
    "OLMo-2 1.5B": f"{CONFIGS}/olmo2-1b/config.json",
    "Mistral 7B": f"{CONFIGS}/mistral-7b/config.json",
    "Mixtral 0.2B": f"{CONFIGS}/mixtral-0.2b/config.json",
    "Llama 134M": f"{CONFIGS}/llama-110m/config.json",
    "Qwen2 7M": f"{CONFIGS}/qwen2-7m/config.json",
    "GPT-2 8M": f"{CONFIGS}/gpt2-8m/config.json",
}


def cell(label, seq, *, batch=1, attention="memory_efficient", precision="fp32",
         checkpointing=False, loop="labels", impl="transformers", framework="torch",
         device="fake") -> dict:  # fmt: skip
    return dict(
        kind="impl", label=label, source=SOURCES[label], impl=impl, framework=framework,
        device=device, batch=batch, seq=seq, attention=attention, precision=precision,
        checkpointing=checkpointing, loop=loop,
    )  # fmt: skip


def mlx_cell(label, seq, framework, *, batch=1, checkpointing=False) -> dict:
    return cell(label, seq, batch=batch, checkpointing=checkpointing, loop="logits",
                impl="mlx_lm", framework=framework, device="cpu")  # fmt: skip


#: The default set: every family, every setting at least once, 0.1B–14B, T = 256–8192.
DEFAULT = [
    cell("Qwen2.5-0.5B", 2048, attention="eager", loop="labels"),
    cell("Qwen2.5-0.5B", 2048, attention="eager", loop="logits"),
    cell("Qwen3-0.6B", 2048, precision="amp", checkpointing=True),
    cell("gemma-2b", 1024, precision="bf16"),
    cell("phi 1.4B", 2048, attention="eager"),
    cell("GPT-2 124M", 1024, batch=4, attention="eager"),
    cell("Mixtral 0.2B", 2048),
    cell("OLMo-2 1.5B", 1024, precision="mixed", loop="logits"),
    cell("Mistral 7B", 4096, precision="bf16", checkpointing=True),
    cell("Llama-3.2-1B", 8192, precision="mixed", checkpointing=True),
    cell("Qwen2.5-14B", 256, precision="bf16"),
    cell("Llama 134M", 256, batch=4, attention="eager", loop="logits"),
    mlx_cell("Qwen2 7M", 256, "mlx"),
    mlx_cell("GPT-2 8M", 256, "mlx_compiled", checkpointing=True),
]

#: ``--quick``: a few of them.
QUICK = [DEFAULT[i] for i in (1, 6, 11, 12)]

#: ``--full`` adds B = 4, the other loop and precision per family, and the product below.
MORE = [
    cell("Qwen2.5-0.5B", 512, batch=4, precision="mixed", checkpointing=True),
    cell("Qwen3-0.6B", 4096, attention="eager", loop="logits"),
    cell("gemma-2b", 2048, precision="mixed", checkpointing=True, loop="logits"),
    cell("phi 1.4B", 1024, batch=4, precision="bf16"),
    cell("GPT-2 124M", 1024, precision="mixed", checkpointing=True),
    cell("Mixtral 0.2B", 1024, batch=4, attention="eager", precision="bf16", loop="logits"),
    cell("Mistral 7B", 1024, attention="eager"),
    cell("Llama-3.2-1B", 2048, attention="eager", precision="amp"),
    mlx_cell("Qwen2 7M", 512, "mlx_compiled", checkpointing=True),
    mlx_cell("GPT-2 8M", 256, "mlx", batch=4),
    mlx_cell("Llama 134M", 128, "mlx"),
]


def full() -> list[dict]:
    """Every family × attention × precision × checkpointing × loop, B = 1, T = 1024."""
    families = ["Qwen2.5-0.5B", "Qwen3-0.6B", "Llama-3.2-1B", "gemma-2b", "GPT-2 124M",
                "phi 1.4B", "OLMo-2 1.5B", "Mistral 7B", "Mixtral 0.2B"]  # fmt: skip
    grid = itertools.product(
        families, ("eager", "memory_efficient"), ("fp32", "bf16", "amp", "mixed"),
        (False, True), ("labels", "logits"),
    )  # fmt: skip
    rows = [
        cell(f, 1024, attention=a, precision=p, checkpointing=c, loop=lp) for f, a, p, c, lp in grid
    ]
    return DEFAULT + MORE + [r for r in rows if r not in DEFAULT + MORE]


def setup_of(c: dict):
    from introspect.setup import TrainingSetup

    return TrainingSetup(
        batch_size=c["batch"],
        seq_len=c["seq"],
        precision=c["precision"],
        activation_dtype="bf16" if c["precision"] != "fp32" else "fp32",
        attention="memory_efficient" if c["impl"] == "mlx_lm" else c["attention"],
        activation_checkpointing=c["checkpointing"],
        framework=c["framework"],
        device="cpu",
        implementation=c["impl"],
        loop=c["loop"],
    )


def source_path(source: str) -> str:
    """A bundled Hub id as it is; a config under benchmarks/configs/ (stored relative to
    the repository, or as an older results file's absolute path) in this checkout."""
    if "benchmarks/configs/" in source:
        return str(ROOT / CONFIGS / source.split("benchmarks/configs/", 1)[1])
    return source


def spec_of(c: dict):
    from introspect.adapters import resolve

    return resolve(source_path(c["source"])).spec


def run_cell(c: dict) -> dict:
    """One implementation row: measured peak, both estimates, the category split."""
    from introspect.measure import runner
    from introspect.measure.hf_models import source_config

    spec = spec_of(c)
    start = time.perf_counter()
    row = runner.run_one(
        spec,
        setup_of(c),
        device=c["device"],
        impl=c["impl"],
        census=c["framework"] == "torch",
        repeats=2 if c["framework"].startswith("mlx") else 1,
        config=source_config(source_path(c["source"]), spec),
    )
    m = row.comparison.measurement
    return {
        **c,
        "implementation": c["impl"],
        "variant": setup_label(c),
        "size": c["label"],
        "seq_len": c["seq"],
        **measured_fields(m, time.perf_counter() - start),
        "notes": list(m.notes),
    }, row.comparison


def measured_fields(m, wall_seconds: float) -> dict:
    """What a results row keeps of one Measurement (both accuracy scripts' rows)."""
    return {
        "n_params": m.n_params,
        "measured_bytes": m.peak_bytes,
        "peak_phase": m.peak_phase,
        "categories": m.categories,
        "census": m.census,
        "census_total_bytes": sum(m.census.values()) if m.census else None,
        "peak_samples": list(m.peak_samples),
        "phase_peaks": m.phase_peaks,
        "active_bytes": m.active_bytes,
        "cache_bytes": m.cache_bytes,
        "step_seconds": m.step_seconds,
        "tokens_per_second": m.tokens_per_second,
        "wall_seconds": wall_seconds,
        "versions": m.versions,
    }


def setup_label(c: dict) -> str:
    """``B4 sdpa bf16 ckpt labels``: the setup of a row in a few words."""
    attention = "sdpa" if c["attention"] == "memory_efficient" else "eager"
    if c["impl"] == "mlx_lm":
        attention = "sdpa"
    parts = [f"B{c['batch']}", attention, c["precision"]]
    if c["checkpointing"]:
        parts.append("ckpt")
    parts.append(c["loop"])
    return " ".join(parts)


def reestimate(row: dict):
    """Both estimates for a stored implementation row (no step is run)."""
    from introspect.measure.compare import compare
    from introspect.measure.record import Measurement

    fw = row["framework"]
    m = Measurement(
        peak_bytes=row["measured_bytes"],
        categories=row["categories"],
        peak_phase=row["peak_phase"],
        backend="mlx" if fw.startswith("mlx") else "torch",
        compiled=fw == "mlx_compiled",
        device=row["device"],
        census=row.get("census") or {},
        n_params=row["n_params"],
    )
    return compare(spec_of(row), setup_of(row), m)
