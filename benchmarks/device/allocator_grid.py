"""On a CUDA GPU: the allocator replay beside what the device measures, for a grid of steps.

Run (on a machine with one NVIDIA GPU; about ten minutes on an H200):

    .venv/bin/python benchmarks/device/allocator_grid.py [--out DIR] [--quick]

For every cell of the grid — dense and mixture-of-experts (transformers' own classes,
built from bundled configs with a few layers), full training and LoRA, with and without
activation checkpointing, two batch sizes and two lengths, expandable segments off and
on — three things run, each in a fresh process (``PYTORCH_CUDA_ALLOC_CONF`` is read once,
when CUDA starts):

1. the real step: ``introspect measure … --device cuda --json`` inside a child that,
   once the command returns, reads ``torch.cuda.max_memory_allocated()``,
   ``torch.cuda.max_memory_reserved()`` (both reset after the warm-up step, by
   ``torch_step.measure_step``) and the process's used memory from NVML
   (``nvidia-smi --query-compute-apps=pid,used_memory``, the figure nvidia-smi shows);
2. the dry run with its allocation stream replayed (``introspect measure … --device fake
   --json``, same ``PYTORCH_CUDA_ALLOC_CONF``): the replayed allocated and reserved peaks;
3. the closed form, as ``introspect profile`` prices it, the model cut to the cell's
   layers as ``measure --layers`` cuts it: allocated peak, reserved, what nvidia-smi
   would show.

Writes ``allocator-grid.md`` and ``allocator-grid.json`` to ``--out`` (default
``benchmarks/results``): each cell's measured figures beside the replayed and closed-form
ones, and their ratios. Without a GPU it writes nothing and says so. Not run yet: no GPU
was lent to the work that wrote it (benchmarks/results/allocator-grid.md says pending).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
#: (label, config.json): transformers' own classes, small enough for minutes.
MODELS = (
    (
        "dense",
        {
            "model_type": "llama",
            "hidden_size": 2048,
            "intermediate_size": 5632,
            "num_hidden_layers": 8,
            "num_attention_heads": 16,
            "num_key_value_heads": 4,
            "vocab_size": 32000,
            "max_position_embeddings": 4096,
            "rms_norm_eps": 1e-5,
            "tie_word_embeddings": False,
        },
    ),
    (
        "moe",
        {
            "model_type": "mixtral",
            "hidden_size": 1024,
            "intermediate_size": 2816,
            "num_hidden_layers": 4,
            "num_attention_heads": 16,
            "num_key_value_heads": 4,
            "num_local_experts": 8,
            "num_experts_per_tok": 2,
            "vocab_size": 32000,
            "max_position_embeddings": 4096,
            "rms_norm_eps": 1e-5,
            "tie_word_embeddings": False,
        },
    ),
)
CONFIGS = Path(tempfile.gettempdir()) / "introspect-allocator-grid"
FINETUNE = (("full", ()), ("lora", ("--finetune", "lora", "--lora-rank", "16")))
CHECKPOINTING = ((False, ()), (True, ("--checkpointing",)))
BATCH = (1, 4)
SEQ = (512, 2048)
EXPANDABLE = (False, True)

CHILD = r"""
import json, os, subprocess, sys
import torch
from introspect.cli import main
code = main(sys.argv[1:])
torch.cuda.synchronize()
used = None
out = subprocess.run(
    ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
    capture_output=True, text=True,
).stdout
for line in out.splitlines():
    pid, mib = (x.strip() for x in line.split(","))
    if int(pid) == os.getpid():
        used = int(mib) * 2**20
print("GRID " + json.dumps({
    "rc": code,
    "max_memory_allocated": torch.cuda.max_memory_allocated(),
    "max_memory_reserved": torch.cuda.max_memory_reserved(),
    "nvml_used": used,
    "device": torch.cuda.get_device_name(),
    "torch": torch.__version__,
}))
"""


def cells(quick: bool):
    grid = itertools.product(MODELS, FINETUNE, CHECKPOINTING, BATCH, SEQ, EXPANDABLE)
    for n, cell in enumerate(grid):
        if quick and n % 7:
            continue
        yield cell


def _env(expandable: bool) -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    env["PYTORCH_CUDA_ALLOC_CONF"] = f"expandable_segments:{expandable}"
    return env


def _json_tail(text: str) -> dict:
    return json.loads(text[text.index("{") :])


def config_path(label: str, config: dict) -> str:
    """The cell's model as a config.json both measure and profile read."""
    path = CONFIGS / label / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config))
    return str(path)


def run_cell(cell) -> dict:
    (label, config), (ft, ft_flags), (ckpt, ck_flags), batch, seq, exp = cell
    source = config_path(label, config)
    flags = [*ft_flags, *ck_flags, "--batch", str(batch), "--seq", str(seq)]
    flags += ["--precision", "bf16", "--impl", "transformers", "--no-census"]
    argv = ["measure", source, *flags, "--json"]
    row = {"model": label, "finetune": ft, "checkpointing": ckpt, "batch": batch, "seq": seq}
    row["expandable_segments"] = exp
    real = subprocess.run(
        [PY, "-c", CHILD, *argv, "--device", "cuda"],
        capture_output=True,
        text=True,
        env=_env(exp),
        cwd=ROOT,
    )
    line = [x for x in real.stdout.splitlines() if x.startswith("GRID ")]
    row["measured"] = json.loads(line[-1][5:]) if line else {"error": real.stderr[-400:]}
    fake = subprocess.run(
        [PY, "-m", "introspect", *argv, "--device", "fake"],
        capture_output=True,
        text=True,
        env=_env(exp),
        cwd=ROOT,
    )
    try:
        m = _json_tail(fake.stdout)["rows"][0]["measurement"]
        (rep,) = m["allocator_replay"].values()
        row["replayed"] = rep["expandable_on" if exp else "expandable_off"]
    except (ValueError, KeyError, IndexError):
        row["replayed"] = {"error": fake.stderr[-400:]}
    try:
        row["closed_form"] = closed_form(source, [*ft_flags, *ck_flags], batch, seq, exp)
    except Exception as e:  # a cell the closed form refuses says why, the grid goes on
        row["closed_form"] = {"error": str(e)[:400]}
    return row


def closed_form(source: str, flags: list[str], batch: int, seq: int, exp: bool):
    """introspect's closed form for the cell, as ``profile`` prices it
    (:func:`overhead.device_view`)."""
    sys.path.insert(0, str(ROOT))
    from introspect.adapters import resolve

    from introspect import overhead
    from introspect.allocator.config import AllocatorConfig
    from introspect.cli import build_parser
    from introspect.commands._args import setup_from_args
    from introspect.refined.implementations import resolve_attention

    argv = ["profile", source, *flags, "--batch", str(batch), "--seq", str(seq)]
    setup = setup_from_args(build_parser("profile").parse_args([*argv, "--precision", "bf16"]))
    spec = resolve(source).spec
    setup = resolve_attention(spec, setup)
    view = overhead.device_view(spec, setup, None, AllocatorConfig(expandable_segments=exp))
    return view.to_json()


def _ratio(a, b) -> str:
    return f"{a / b:.3f}" if isinstance(a, int) and isinstance(b, int) and b else "n/a"


def render(rows: list[dict]) -> str:
    head = (
        "| model | ft | ckpt | B | T | exp | measured alloc | replay alloc | measured "
        "reserved | replay reserved | replay/meas | closed reserved | closed/meas | NVML used "
        "| closed shown/NVML |"
    )
    lines = ["# Allocator replay on a GPU", "", head, "|" + "---|" * 15]
    for r in rows:
        m, p, c = r["measured"], r["replayed"], r["closed_form"]
        closed_reserved = c.get("reserved_peak_bytes") if "error" not in c else None
        lines.append(
            f"| {r['model']} | {r['finetune']} | {r['checkpointing']} | {r['batch']} | "
            f"{r['seq']} | {r['expandable_segments']} | {m.get('max_memory_allocated')} | "
            f"{p.get('allocated_peak_bytes')} | {m.get('max_memory_reserved')} | "
            f"{p.get('reserved_peak_bytes')} | "
            f"{_ratio(p.get('reserved_peak_bytes'), m.get('max_memory_reserved'))} | "
            f"{closed_reserved} | {_ratio(closed_reserved, m.get('max_memory_reserved'))} | "
            f"{m.get('nvml_used')} | {_ratio(c.get('shown_bytes'), m.get('nvml_used'))} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    p.add_argument("--quick", action="store_true", help="every 7th cell only")
    args = p.parse_args(argv)
    probe = subprocess.run(
        [PY, "-c", "import torch; print(torch.cuda.is_available())"], capture_output=True, text=True
    )
    if probe.stdout.strip() != "True":
        print("no CUDA device: the allocator grid stays pending (nothing written)")
        return 0
    rows = []
    for cell in cells(args.quick):
        rows.append(run_cell(cell))
        print(json.dumps(rows[-1]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "allocator-grid.json").write_text(json.dumps(rows, indent=1) + "\n")
    (args.out / "allocator-grid.md").write_text(render(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
