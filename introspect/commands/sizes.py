"""`introspect sizes`: the seed's model-size table against a 4 GB and an 8 GB budget."""

from __future__ import annotations

import argparse

from introspect import report, simplified
from introspect.commands._args import add_common, choice, positive_int
from introspect.setup import FRAMEWORKS, TrainingSetup
from introspect.sizes import BUDGETS_GB, DEFAULT_SEQS, SHAPES
from introspect.units import GB


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sizes",
        help="the seed's model-size table (10M ... 70B) against 4 GB and 8 GB",
        description="The seed's size table: synthetic standard transformers at nominal "
        "sizes, B=1, ordinary FP32 Adam, FP32 activations (s=4), by eq:training_memory. "
        "Decimal GB. The 4 GB column is the seed's hard training budget on an 8 GB M2; "
        "8 GB is the optimistic ceiling.",
    )
    p.add_argument(
        "--seq",
        type=positive_int,
        nargs="+",
        default=list(DEFAULT_SEQS),
        metavar="T",
        help="sequence lengths, one row each per model (default 512 2048)",
    )
    p.add_argument(
        "--batch",
        type=positive_int,
        default=1,
        metavar="B",
        help="micro-batch size (default 1, as the seed)",
    )
    p.add_argument(
        "--framework",
        type=choice(FRAMEWORKS),
        default=None,
        help="also the refined estimate for this framework (torch, mlx or mlx-compiled, on "
        "its default device: CUDA, or the Mac's GPU for MLX), beside the seed's column; the "
        "refined figure prices the model as built (N with its norm weights)",
    )
    add_common(p, hub=False)
    p.set_defaults(run=run)


def rows(seqs: list[int], batch: int = 1, framework: str | None = None) -> list[dict]:
    """One dict per (shape, T): the shape, exact N, and the seed's three parts in bytes;
    with ``framework``, the refined estimate of the same shape as built and run there."""
    from introspect.measure.shapes import nominal_spec

    out = []
    for shape in SHAPES:
        spec = shape.spec()
        for T in seqs:
            setup = TrainingSetup(batch_size=batch, seq_len=T)
            sm = report.summary(simplified.estimate(spec, setup))
            extra = {}
            if framework:
                from introspect import refined

                est = refined.estimate(
                    nominal_spec(shape.nominal), setup.replace(framework=framework)
                )
                extra = {
                    "refined_framework": framework,
                    "refined_total_bytes": est.total,
                    "refined_peak_phase": est.peak_phase,
                    **{f"refined_fits_{g}gb": est.total <= g * GB for g in BUDGETS_GB},
                }
            out.append(
                {
                    "nominal": shape.nominal,
                    "layers": spec.num_hidden_layers,
                    "d_emb": spec.hidden_size,
                    "heads": spec.num_attention_heads,
                    "vocab": spec.vocab_size,
                    "n_params": spec.n_params,
                    "batch": batch,
                    "seq": T,
                    **sm,
                    **{f"fits_{g}gb": sm["total_bytes"] <= g * GB for g in BUDGETS_GB},
                    **extra,
                }
            )
    return out


def run(args: argparse.Namespace) -> int:
    from introspect import bounds

    for T in args.seq:  # the bounds profile applies (bounds.SETUP_LIMITS), before any work
        bounds.check_setup(TrainingSetup(batch_size=args.batch, seq_len=T), force=args.force)
    table_rows = rows(args.seq, args.batch, args.framework)
    if args.json:
        print(report.dumps({"budgets_gb": list(BUDGETS_GB), "rows": table_rows}))
        return 0
    body = [
        (
            r["nominal"],
            f"{r['layers']}×{r['d_emb']}/{r['heads']}h",
            f"{r['vocab']:,}",
            f"{r['n_params']:,}",
            r["seq"],
            report.gb(r["weights_bytes"]),
            report.gb(r["activations_bytes"]),
            report.gb(r["backward_bytes"]),
            report.gb(r["total_bytes"]),
            *("yes" if r[f"fits_{g}gb"] else "no" for g in BUDGETS_GB),
            *(
                (report.gb(r["refined_total_bytes"]), r["refined_peak_phase"])
                + tuple("yes" if r[f"refined_fits_{g}gb"] else "no" for g in BUDGETS_GB)
                if args.framework
                else ()
            ),
        )
        for r in table_rows
    ]
    headers = [
        "model",
        "L×d/h",
        "V",
        "N",
        "T",
        "weights GB",
        "activations GB",
        "backward GB",
        "total GB",
        *(f"≤ {_budget(g)}" for g in BUDGETS_GB),
    ]
    if args.framework:
        fw = args.framework.replace("_", "-")
        headers += [f"refined {fw} GB", "peak at", *(f"refined ≤ {_budget(g)}" for g in BUDGETS_GB)]
    print(f"B={args.batch}, FP32 activations (s=4), FP32 weights, ordinary FP32 Adam")
    if args.framework:
        print(
            "seed = eq:training_memory; refined = the refined estimate of the same shape as "
            f"built (N with norm weights), run by {args.framework.replace('_', '-')} on its "
            "default device (MLX: the Mac's GPU; mx.get_peak_memory())"
        )
    print(report.table(body, headers, colalign=("left", "left") + ("right",) * (len(headers) - 2)))
    return 0


def _budget(g: int) -> str:
    """The seed's budget of ``g`` decimal GB in the display unit (``4 GB``, ``3.73 GiB``)."""
    from introspect.units import display_unit, fmt_memory

    return f"{g} GB" if display_unit() == "GB" else fmt_memory(g * GB)
