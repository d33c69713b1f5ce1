"""Check the device-overhead model on a CUDA GPU: allocated peak, the caching allocator's
reserve and the CUDA context, measured, beside introspect.overhead's figures.

Run (on a machine with a GPU):  .venv/bin/python benchmarks/cuda_overhead.py
Writes benchmarks/results/cuda_overhead.md. Without a GPU it writes nothing and says so:
the rows stay pending.

For each row: one real step of the reference model (introspect.measure.torch_step, FP32
Adam, after a warm-up step) on CUDA; torch.cuda.max_memory_allocated() (allocated peak),
torch.cuda.max_memory_reserved() (the allocator's reserve at its peak) and
torch.cuda.device_memory_used() (what nvidia-smi shows: reserve + context), each with the
model's estimate of the same quantity.
"""

from __future__ import annotations

from pathlib import Path

from introspect import overhead, report
from introspect.measure.shapes import llama_style, nominal_spec
from introspect.setup import TrainingSetup

RESULTS = Path(__file__).parent / "results"
ROWS = (("40M", "standard", 1024), ("100M", "llama", 2048), ("300M", "standard", 1024))


def main() -> None:
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: the CUDA overhead rows stay pending")
        return
    from introspect.measure import torch_step

    lines = [
        "| model | T | allocated (meas./est.) GB | reserved (meas./est.) GB | "
        "nvidia-smi (meas./est.) GB |",
        "|---|---|---|---|---|",
    ]
    name = torch.cuda.get_device_name()
    for size, variant, T in ROWS:
        spec = nominal_spec(size)
        spec = llama_style(spec) if variant == "llama" else spec
        setup = TrainingSetup(seq_len=T, device="cuda")
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        m = torch_step.measure_reference(spec, setup, device="cuda")
        reserved = torch.cuda.max_memory_reserved()
        used = torch.cuda.device_memory_used()
        view = overhead.device_view(spec, setup)  # GPU not named: an H100's context
        lines.append(
            f"| {size} {variant} | {T} | {report.gb(m.peak_bytes)} / {report.gb(view.allocated)}"
            f" | {report.gb(reserved)} / {report.gb(view.reserved)}"
            f" | {report.gb(used)} / {report.gb(view.shown)} |"
        )
        print(lines[-1], flush=True)
    RESULTS.mkdir(exist_ok=True)
    text = f"# CUDA overhead on {name}\n\n" + "\n".join(lines) + "\n"
    (RESULTS / "cuda_overhead.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
