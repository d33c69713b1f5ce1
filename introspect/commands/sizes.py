"""`introspect sizes`: the seed's model-size table against a 4 GB and an 8 GB budget."""

from __future__ import annotations

import argparse

from introspect import report, simplified
from introspect.commands._args import add_common, positive_int
from introspect.setup import TrainingSetup
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
    add_common(p)
    p.set_defaults(run=run)


def rows(seqs: list[int], batch: int = 1) -> list[dict]:
    """One dict per (shape, T): the shape, exact N, and the seed's three parts in bytes."""
    out = []
    for shape in SHAPES:
        spec = shape.spec()
        for T in seqs:
            setup = TrainingSetup(batch_size=batch, seq_len=T)
            sm = report.summary(simplified.estimate(spec, setup))
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
                }
            )
    return out


def run(args: argparse.Namespace) -> int:
    table_rows = rows(args.seq, args.batch)
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
        *(f"≤ {g} GB" for g in BUDGETS_GB),
    ]
    print(f"B={args.batch}, FP32 activations (s=4), FP32 weights, ordinary FP32 Adam")
    print(report.table(body, headers, colalign=("left", "left") + ("right",) * 9))
    return 0
