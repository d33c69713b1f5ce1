"""`introspect table`: the seed's "Does this hold in the real world?" table.

For each model (by default the bundled Qwen and Llama models) at the seed's setup — B=1,
T=2048, BF16 activations, FP32 Adam — the exact parameter count, the 16N of weights +
gradients + Adam, the seed's activations and total, the refined activations and total
(architecture layer), the execution peak and its phase, and the features that make the
model diverge from the seed's block. ``--reported qwen-7b`` prints Qwen's published
measurement of Qwen-7B beside both estimates instead.
"""

from __future__ import annotations

import argparse

from introspect import applies, divergence, refined, report, simplified
from introspect.commands._args import (
    add_common,
    add_plot_flag,
    add_setup_flags,
    check_plot,
    given_setup_flags,
    setup_from_args,
)
from introspect.errors import IntrospectError
from introspect.reported import REPORTED, Reported
from introspect.setup import TrainingSetup
from introspect.sizes import worked_example
from introspect.units import GB, fmt_count

TYPE_CHECKING = False  # typing's flag without importing typing (see introspect._record)
if TYPE_CHECKING:
    from typing import Any

#: The model-card count the seed used for Qwen2.5-0.5B ("requires 7.84 GB" = 16 × 0.49e9).
SEED_QWEN_05B_PARAMS = 490_000_000

EPILOG = """\
examples:
  introspect table                              bundled Qwen, Llama and today's MoE models
  introspect table --markdown                   the same as a GitHub table
  introspect table Qwen/Qwen2.5-7B ./my-model   any sources 'introspect profile' takes
  introspect table --seq 4096 --attention memory-efficient --checkpointing
  introspect table --gpu a100-80gb              CUDA reserved and nvidia-smi on an A100
  introspect table --reported qwen-7b           Qwen's measured Qwen-7B beside the estimates
  introspect table --seed-example --framework torch --device cpu
                                                the seed's 7B: where execution diverges
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "table",
        help="the seed's real-world table: published models, seed vs refined estimates",
        description="The seed's 'Does this hold in the real world?' table: exact "
        "parameters, 16N, the seed's activations and total, the refined (architecture) "
        "activations and total, the execution peak, and what diverges. Decimal GB.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "sources",
        nargs="*",
        metavar="SOURCE",
        help="bundled model names, Hub ids, config.json files or checkpoint folders "
        "(default: the bundled Qwen and Llama models)",
    )
    p.add_argument(
        "--seed-example",
        action="store_true",
        help="the seed's worked 7B example (N=7e9, L=33, d=4096, h=32, V=43,520): seed, "
        "architecture layer (equal) and execution layer side by side, with the causes",
    )
    p.add_argument(
        "--reported",
        choices=sorted(REPORTED),
        default=None,
        help="compare a published measurement with both estimates for its setup",
    )
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--markdown", action="store_true", help="print a GitHub markdown table")
    fmt.add_argument("--csv", action="store_true", help="print CSV")
    add_setup_flags(p, act_default="bf16", sweep=False)
    add_plot_flag(p, "one pair of bars per model: the seed's total and the refined peak")
    from introspect.allocator import flags as allocator_flags

    allocator_flags.add_flag(p)
    from introspect.commands import _gpu

    _gpu.add_flag(p)
    add_common(p, exact_bytes=True)
    p.set_defaults(run=run)


#: Today's models beside the seed's Qwen and Llama rows (mixture of experts, sliding
#: windows, sinks, MLA, a vision tower).
TODAY = (
    "openai/gpt-oss-20b",
    "google/gemma-3-1b-pt",
    "google/gemma-3-4b-pt",
    "deepseek-ai/DeepSeek-V3",
)


#: The bundled vision-language wrappers: named on the command line, not in the default
#: table (Qwen3.5's Gated DeltaNet layers have no closed form yet).
WRAPPERS = (
    "Qwen/Qwen3-VL-8B-Instruct",
    "Qwen/Qwen2.5-VL-7B-Instruct",
    "Qwen/Qwen3.5-9B",
)


def default_sources() -> list[str]:
    """The bundled Qwen and Llama models in the bundle's order (the new Qwen3-30B-A3B and
    Llama-4-Scout among them), then :data:`TODAY`'s."""
    from introspect.adapters import bundled

    seed = [
        m.hub_id
        for m in bundled.models()
        if m.hub_id.startswith(("Qwen/", "meta-llama/")) and m.hub_id not in WRAPPERS
    ]
    return seed + [m for m in TODAY if bundled.lookup(m) is not None]


def _fmt(args: argparse.Namespace) -> str:
    """The one output format: --json, --markdown, --csv or text (two of them contradict;
    argparse's group refuses --markdown with --csv, --json is add_common's)."""
    if args.json:
        other = "--markdown" if args.markdown else "--csv" if args.csv else None
        if other:
            raise IntrospectError(f"{other} and --json are two output formats; give one of them")
        return "json"
    return "markdown" if args.markdown else "csv" if args.csv else "text"


def run(args: argparse.Namespace) -> int:
    from introspect.adapters import resolve

    fmt = _fmt(args)
    if args.reported:
        if args.sources:
            raise IntrospectError("--reported takes no SOURCE; it names its own model")
        dropped = given_setup_flags(args) + ["--plot"] * bool(args.plot)
        dropped += ["--expandable-segments"] * bool(args.expandable_segments)
        dropped += ["--gpu"] * bool(args.gpu)
        dropped += ["--units bytes"] * (args.units == "bytes")
        if dropped:
            raise IntrospectError(
                f"--reported {args.reported} prices the published run's own setup, so "
                f"{', '.join(dropped)} would be ignored; drop "
                + ("it" if len(dropped) == 1 else "them")
            )
        rep = REPORTED[args.reported]
        out = reported_comparison(resolve(rep.hub_id, force=args.force, timeout=args.timeout), rep)
        print(report.dumps(out) if fmt == "json" else render_reported(out, fmt))
        return 0
    setup = setup_from_args(args)
    if args.seed_example:
        if args.sources:
            raise IntrospectError("--seed-example takes no SOURCE; it is the seed's 7B shape")
        if args.plot or args.units == "bytes":
            flag = "--plot" if args.plot else "--units bytes"
            raise IntrospectError(f"--seed-example prints GB and draws nothing; drop {flag}")
        if args.expandable_segments or args.gpu:
            flag = "--expandable-segments" if args.expandable_segments else "--gpu"
            raise IntrospectError(
                "--seed-example prints the seed's allocated figures only, no CUDA reserve; "
                f"drop {flag}"
            )
        out = seed_example(setup)
        print(report.dumps(out["json"]) if fmt == "json" else out["text"])
        return 0
    check_plot(args.plot)
    from introspect.allocator import flags as allocator_flags

    allocator, allocator_notes = allocator_flags.resolve(args, setup.framework)
    from introspect.commands import _gpu

    device = _gpu.resolve(args, setup.framework, "table")
    sources = args.sources or default_sources()
    rows = [_row_or_error(s, setup, args.force, args.timeout, allocator, device) for s in sources]
    good = [r for r in rows if "error" not in r]
    if not good:  # nothing to tabulate: the reason alone, one line
        if len(rows) == 1:
            raise IntrospectError(rows[0]["error"])
        raise IntrospectError(f"all {len(rows)} sources failed; first: {rows[0]['error']}")
    if args.plot:
        from introspect import plot

        bars = [
            {
                "label": r["source"],
                "seed_bytes": r["simplified"]["total_bytes"],
                "refined_bytes": r["refined"]["total_bytes"],
            }
            for r in good
        ]
        plot.model_bars(
            bars, args.plot, f"seed vs refined peak, B={setup.batch_size}, T={setup.seq_len}"
        )
    if fmt == "json":
        out = {"setup": setup.to_dict(), "rows": rows, "notes": applies.notes(setup) + notes(good)}
        out["notes"] += allocator_notes
        if device is not None:  # only then: the JSON contract's keys stay as they were
            out["gpu"] = device.to_dict()
        print(report.dumps(out))
    else:
        print(render(rows, setup, fmt, args.units or "gb", device))
        if allocator_notes and fmt != "csv":
            print("\n".join(f"note: {n}" for n in allocator_notes))
    failed = [r for r in rows if "error" in r]
    if failed:
        raise IntrospectError(
            f"{len(failed)} of {len(rows)} sources failed (their rows say why); first: "
            f"{failed[0]['error']}"
        )
    return 0


def _row_or_error(
    source: str,
    setup: TrainingSetup,
    force: bool,
    timeout: float | None,
    allocator=None,
    device=None,
) -> dict[str, Any]:
    """The source's row, or ``{"source", "error"}`` when it cannot be read."""
    from introspect.adapters import resolve

    model = None
    try:
        model = resolve(source, force=force, timeout=timeout)
        from introspect.refined.implementations import resolve_attention
        from introspect.unmodelled import check_closed_form

        setup = resolve_attention(model.spec, setup)  # each class's own default
        check_closed_form(model.spec, setup)
        return row(model, setup, allocator, device)
    except (IntrospectError, ValueError, OverflowError, RecursionError) as err:
        out: dict[str, Any] = {"source": source, "error": str(err)}
        if model is not None and model.spec.unmodelled:
            # the build's exact count stands where the estimates do not (Qwen3.5's tower)
            out["params"] = {"total": model.spec.n_params}
        return out


def row(model: Any, setup: TrainingSetup, allocator=None, device=None) -> dict[str, Any]:
    """One model's row, bytes as integers; on torch what a CUDA GPU (``device``, the
    ``--gpu``; not named: taken as an H100) holds per rank: the execution peak's reserve
    replayed through the caching-allocator model with ``allocator`` and the cuBLAS
    workspaces (reserved), the context and NCCL's buffers (what nvidia-smi shows)
    (:func:`introspect.overhead.device_view`)."""
    spec = model.spec
    seed = simplified.estimate(spec, setup)
    est = refined.estimate(spec, setup)
    view = None
    if not setup.framework.startswith("mlx"):
        from introspect import overhead

        view = overhead.device_view(spec, setup, device, allocator)
    sm = report.summary(seed)
    flags = divergence.flags(spec, setup)
    return {
        "source": model.location,
        "origin": model.origin,
        "params": {"total": spec.n_params, "by_component": dict(model.params_by_component)},
        "state_16n_bytes": sm["weights_and_backward_bytes"],
        "simplified": {
            "activations_bytes": sm["activations_bytes"],
            "total_bytes": seed.total,
        },
        "refined": {
            "activations_bytes": est.architecture.sum("activations"),
            "total_bytes": est.total,
            "architecture_total_bytes": est.architecture.total,
            "execution_total_bytes": est.execution.total,
            "peak_phase": est.peak_phase,
            "cuda_reserve_bytes": view.reserve if view else None,
            "cuda_reserved_bytes": view.reserved if view else None,
            "cuda_shown_bytes": view.shown if view else None,
        },
        "flags": [f.to_json() for f in flags],
    }


def notes(rows: list[dict[str, Any]]) -> list[str]:
    """Notes printed under the table: the Qwen2.5-0.5B parameter count the seed used."""
    out = []
    for r in rows:
        if r["source"].lower().endswith("qwen2.5-0.5b"):
            n = r["params"]["total"]
            out.append(
                f"{r['source']}: the seed's 7.84 GB used the model card's 0.49B "
                f"(16 × {fmt_count(SEED_QWEN_05B_PARAMS)} = "
                f"{16 * SEED_QWEN_05B_PARAMS / GB:.2f} GB); the exact count "
                f"{fmt_count(n)} gives 16 × {fmt_count(n)} = {16 * n / GB:.2f} GB."
            )
    return out


HEADERS = [
    "model",
    "exact params",
    "16N GB",
    "seed act. GB",
    "seed total GB",
    "refined act. GB",
    "refined total GB",
    "exec. peak GB",
    "CUDA reserved GB",
    "nvidia-smi GB",
    "peak phase",
    "flags",
]


def _short(flag: dict[str, str]) -> str:
    return flag.get("short") or flag["name"]


def _cells(r: dict[str, Any], fmt: str, units: str) -> tuple:
    """One row's cells: numbers (GB, or bytes with ``--units bytes``) in every numeric
    column; a failed source's error in the flags column."""
    if "error" in r:
        total = r.get("params", {}).get("total")
        count = "" if total is None else str(total) if fmt == "csv" else fmt_count(total)
        return (r["source"], count, *([""] * 8), f"error: {r['error']}")

    def size(n: int) -> str:
        return str(n) if units == "bytes" else report.gb(n, 2)

    ref = r["refined"]
    return (
        r["source"],
        str(r["params"]["total"]) if fmt == "csv" else fmt_count(r["params"]["total"]),
        size(r["state_16n_bytes"]),
        size(r["simplified"]["activations_bytes"]),
        size(r["simplified"]["total_bytes"]),
        size(ref["activations_bytes"]),
        size(ref["architecture_total_bytes"]),
        size(ref["execution_total_bytes"]),
        "n/a" if ref["cuda_reserved_bytes"] is None else size(ref["cuda_reserved_bytes"]),
        "n/a" if ref["cuda_shown_bytes"] is None else size(ref["cuda_shown_bytes"]),
        ref["peak_phase"],
        ", ".join(_short(f) for f in r["flags"]),
    )


def render(
    rows: list[dict[str, Any]], setup: TrainingSetup, fmt: str, units: str = "gb", device=None
) -> str:
    cells = [_cells(r, fmt, units) for r in rows]
    headers = [h.replace(" GB", " bytes") for h in HEADERS] if units == "bytes" else HEADERS
    body = report.table(cells, headers, fmt, colalign=("left",) + ("right",) * 9 + ("left",) * 2)
    if fmt == "csv":
        return body
    optimizer_impl = setup.resolved_optimizer_impl.replace("_", "-")
    unit = {"bytes": "bytes", "gib": "GiB"}.get(units, "decimal GB")
    head = (
        f"{report.setup_line(setup)}; {unit}.\n"
        "16N = weights + gradients + Adam (eq:backward_values); seed = eq:training_memory; "
        "refined = the seed's bookkeeping for the real architecture; exec. peak = what "
        f"{setup.framework} on {setup.resolved_device} ({optimizer_impl} {setup.optimizer}) "
        "holds at its peak, and when; CUDA reserved = the step's moments and cuBLAS's "
        "workspaces replayed through torch 2.13's caching allocator (derived from torch's "
        "source, not measured on a GPU); nvidia-smi adds the CUDA context ("
        + (
            f"{device.description}'s: sm{_sm(device)}"
            if device is not None
            else "a GPU not named: an H100's"
        )
        + ", nearest published) and NCCL's buffers, per rank."
    )
    answered = [r for r in rows if "error" not in r]
    lines = notes(answered) + [f"note: {n}" for n in applies.notes(setup)]
    if device is not None:
        lines.append(_device_note(answered, device))
    tail = "\n".join(lines)
    return f"{head}\n\n{body}" + (f"\n\n{tail}" if tail else "")


def _device_note(rows: list[dict[str, Any]], device) -> str:
    """Which rows' nvidia-smi figure is over the ``--gpu``'s memory."""
    over = [
        r["source"] for r in rows if (r["refined"]["cuda_shown_bytes"] or 0) > device.memory_bytes
    ]
    head = f"{device.description}: {device.maker_figure} = {report.gb(device.memory_bytes)} GB"
    if not over:
        return f"{head}; every row's nvidia-smi figure is within it."
    return f"{head}; over it (out of memory as set up): {', '.join(over)}."


def _sm(device) -> str:
    from introspect.overhead import capability

    cap, _ = capability(device)
    return f"{cap[0]}{cap[1]}"


def reported_comparison(model: Any, rep: Reported) -> dict[str, Any]:
    """The published runs beside the seed and refined estimates for the same setup,
    summed over the devices and per device, with ratios reported / estimate.

    Seed: its terms with ZeRO-3's division of the 16N state, as the seed describes fully
    sharded training — per device 16N/D + activations(B=1), summed 16N + D·activations.
    Refined: the execution layer per device; summed = D × per device.
    """
    spec, D = model.spec, rep.devices
    runs = []
    for run_ in rep.runs:
        setup = rep.setup(run_.seq_len)
        seed = simplified.estimate(spec, setup)
        sm = report.summary(seed)
        seed_summed = sm["weights_and_backward_bytes"] + D * sm["activations_bytes"]
        seed_per = -(-sm["weights_and_backward_bytes"] // D) + sm["activations_bytes"]
        est = refined.estimate(spec, setup)
        ref_per = est.execution.total
        fused_per = _without_optimizer_temporaries(spec, setup, est)
        reported_bytes = round(run_.peak_gb * GB)
        runs.append(
            {
                "seq_len": run_.seq_len,
                "reported_bytes": reported_bytes,
                "seed": {"summed_bytes": seed_summed, "per_device_bytes": seed_per},
                "refined": {
                    "summed_bytes": D * ref_per,
                    "per_device_bytes": ref_per,
                    "peak_phase": est.peak_phase,
                },
                "refined_fused_adam": {
                    "summed_bytes": D * fused_per,
                    "per_device_bytes": fused_per,
                    "reported_over_summed": reported_bytes / (D * fused_per),
                },
                "ratios": {
                    "reported_over_seed_summed": reported_bytes / seed_summed,
                    "reported_over_refined_summed": reported_bytes / (D * ref_per),
                    "reported_over_seed_per_device": reported_bytes / seed_per,
                    "reported_over_refined_per_device": reported_bytes / ref_per,
                },
            }
        )
    return {
        "name": rep.name,
        "model": rep.hub_id,
        "params": {"total": spec.n_params},
        "source": rep.source,
        "url": rep.url,
        "hardware": rep.hardware,
        "devices": D,
        "setup_text": rep.setup_text,
        "setup": rep.setup(rep.runs[0].seq_len).to_dict(),
        "caveats": list(rep.caveats),
        "runs": runs,
    }


def _without_optimizer_temporaries(spec, setup: TrainingSetup, est) -> int:
    """The execution peak if the optimizer updated in place (DeepSpeed's FusedAdam, torch's
    ``fused=True``) instead of making torch foreach AdamW's FP32 copy of the local shard."""
    from introspect import refined

    return refined.estimate(spec, setup.replace(optimizer_impl="fused")).total


def render_reported(out: dict[str, Any], fmt: str) -> str:
    rows = []
    for r in out["runs"]:
        rat = r["ratios"]
        rows.append(
            (
                r["seq_len"],
                report.gb(r["reported_bytes"], 1),
                report.gb(r["seed"]["summed_bytes"], 1),
                f"{rat['reported_over_seed_summed']:.2f}",
                report.gb(r["refined"]["summed_bytes"], 1),
                f"{rat['reported_over_refined_summed']:.2f}",
                report.gb(r["seed"]["per_device_bytes"], 1),
                report.gb(r["refined"]["per_device_bytes"], 1),
                f"{rat['reported_over_refined_per_device']:.2f}",
            )
        )
    headers = [
        "tokens",
        "reported GB",
        "seed Σ GB",
        "rep/seed Σ",
        "refined Σ GB",
        "rep/refined Σ",
        "seed per GPU GB",
        "refined per GPU GB",
        "rep/refined per GPU",
    ]
    body = report.table(rows, headers, fmt, colalign=("right",) * 9)
    if fmt == "csv":
        return body
    head = (
        f"{out['model']} ({fmt_count(out['params']['total'])} parameters), "
        f"{out['hardware']}: {out['setup_text']}.\n"
        f"Reported by {out['source']} ({out['url']}).\n"
        "Σ = summed over the two GPUs; per GPU = one device. Ratios are reported / estimate."
    )
    fused = ", ".join(
        f"{r['seq_len']}: {report.gb(r['refined_fused_adam']['summed_bytes'], 1)} GB "
        f"(ratio {r['refined_fused_adam']['reported_over_summed']:.2f})"
        for r in out["runs"]
    )
    note = (
        "The refined estimate assumes torch's foreach AdamW (one FP32 copy of each GPU's "
        "shard during the step); with DeepSpeed's FusedAdam, which updates in place, the "
        f"refined Σ would be {fused}."
    )
    return f"{head}\n\n{body}\n\n" + "\n".join([*out["caveats"], note])


def seed_example(setup: TrainingSetup) -> dict[str, Any]:
    """The seed's worked 7B example under ``setup``: the seed's total, the architecture
    layer (equal to it term by term for this standard shape), the execution layer's peak
    and phase, and every execution divergence with its cause."""
    from introspect.commands import _divergence_view as view

    spec = worked_example()
    seed = simplified.estimate(spec, setup)
    est = refined.estimate(spec, setup)
    equal = all(est.architecture.sum(t) == v for t, v in seed.items())
    equal = equal and est.architecture.total == seed.total
    rows = divergence.rows(seed, est)
    flags = divergence.flags(spec, setup)
    phases = ", ".join(f"{k} {report.gb(v, 2)}" for k, v in est.phases.items())
    pairs = [
        ("seed (eq:training_memory)", f"{report.gb(seed.total, 2)} GB"),
        (
            "refined: architecture",
            f"{report.gb(est.architecture.total, 2)} GB "
            f"({'equals the seed term by term' if equal else 'DIFFERS from the seed'})",
        ),
        (
            f"refined: execution ({setup.framework} on {setup.resolved_device})",
            f"{report.gb(est.execution.total, 2)} GB at {est.peak_phase} "
            f"({est.execution.total / seed.total:.2f} of the seed; phases: {phases})",
        ),
    ]
    head = (
        f"the seed's 7B example: N = 7e9, L=33, d=4096, h=32, V=43,520; B={setup.batch_size}, "
        f"T={setup.seq_len}, s={setup.activation_bytes}; decimal GB"
    )
    text = "\n\n".join((head, report.key_value(pairs), view.divergence_section(rows, flags)))
    data = {
        "spec": spec.to_dict(),
        "setup": setup.to_dict(),
        "estimates": {"simplified": seed.to_json(), "refined": est.to_json()},
        "architecture_equals_simplified": equal,
        "divergences": divergence.to_json(rows, flags),
    }
    return {"text": text, "json": data}
