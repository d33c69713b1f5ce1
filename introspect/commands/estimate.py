"""`introspect estimate`: the seed's equations for a shape typed in by hand."""

from __future__ import annotations

import argparse

from introspect import bounds, report, simplified
from introspect.breakdown import Breakdown
from introspect.commands._args import add_common, add_setup_flags, positive_int, sweep_setups
from introspect.errors import IntrospectError
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec, standard_spec

EPILOG = """\
examples:
  the seed's worked 7B example (BF16 activations):
    introspect estimate --params 7e9 --layers 33 --d-emb 4096 --heads 32 --vocab 43520 \\
        --batch 1 --seq 2048 --act-dtype bf16
  a sweep, one row per (B, T):
    introspect estimate --layers 12 --d-emb 768 --heads 12 --vocab 50257 --seq 512 1024 2048

N defaults to the seed's 2·V·d + 12·L·d² for the shape; --params gives it by hand.
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "estimate",
        help="the seed's memory equations for a standard-transformer shape",
        description="Training memory by the seed's equations (eq:training_memory) for a "
        "standard transformer you describe by its shape. Decimal GB.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    shape = p.add_argument_group("model shape")
    shape.add_argument(
        "--layers", type=positive_int, required=True, metavar="L", help="transformer layers L"
    )
    shape.add_argument(
        "--d-emb", type=positive_int, required=True, metavar="D", help="embedding dimension d_emb"
    )
    shape.add_argument(
        "--heads",
        type=positive_int,
        required=True,
        metavar="H",
        help="attention heads n_head (must divide d_emb)",
    )
    shape.add_argument(
        "--vocab", type=positive_int, required=True, metavar="V", help="vocabulary size d_vocab"
    )
    shape.add_argument(
        "--params",
        type=positive_int,
        default=None,
        metavar="N",
        help="parameter count N (default: 2·V·d + 12·L·d² for the shape)",
    )
    add_setup_flags(p, seq_default=None, execution=False)
    add_common(p, hub=False)
    p.set_defaults(run=run)


def spec_from_args(args: argparse.Namespace) -> ModelSpec:
    if args.d_emb % args.heads:
        raise IntrospectError(
            f"--heads {args.heads} does not divide --d-emb {args.d_emb}; "
            "choose a head count that divides the embedding dimension"
        )
    fmt_big = bounds.fmt_big
    # The seed's N = 2·V·d + 12·L·d² (introspect/spec.py standard_spec): an N under its
    # embedding term would leave the blocks a negative count.
    embeddings = 2 * args.vocab * args.d_emb
    if args.params is not None and args.params < embeddings:
        raise IntrospectError(
            f"--params {fmt_big(args.params)} is below the {fmt_big(embeddings)} parameters "
            f"the shape's embeddings alone hold (the seed's 2·V·d: --vocab "
            f"{fmt_big(args.vocab)} × --d-emb {fmt_big(args.d_emb)}, input embedding and "
            f"output head); give N of at least {fmt_big(embeddings)}, or drop --params for "
            "the seed's 2·V·d + 12·L·d²"
        )
    return standard_spec(
        num_hidden_layers=args.layers,
        hidden_size=args.d_emb,
        num_attention_heads=args.heads,
        vocab_size=args.vocab,
        num_parameters=args.params,
        source="--params" if args.params else "",
    )


#: The flag that sets each spec field, for the sanity bounds' messages.
FLAGS = {
    "num_hidden_layers": "--layers",
    "hidden_size": "--d-emb",
    "num_attention_heads": "--heads",
    "vocab_size": "--vocab",
    "num_parameters": "--params",
}


def run(args: argparse.Namespace) -> int:
    spec = bounds.check_spec(spec_from_args(args), "the flags", force=args.force, flags=FLAGS)
    setups = list(sweep_setups(args))
    results = [(s, simplified.estimate(spec, s)) for s in setups]
    if args.json:
        print(report.dumps(to_json(spec, results)))
    elif len(results) == 1:
        print(render_one(spec, *results[0]))
    else:
        print(render_sweep(spec, results))
    return 0


def to_json(spec: ModelSpec, results: list[tuple[TrainingSetup, Breakdown]]) -> dict:
    return {
        "spec": spec.to_dict(),
        "n_params": spec.n_params,
        "rows": [
            {
                "setup": s.to_dict(),
                "breakdown": b.to_json(),
                "summary": report.summary(b),
            }
            for s, b in results
        ],
    }


def render_one(spec: ModelSpec, setup: TrainingSetup, b: Breakdown) -> str:
    L = spec.num_hidden_layers
    head = (
        f"N = {spec.n_params:,} parameters ({spec.source}); L={L}, d={spec.hidden_size}, "
        f"h={spec.num_attention_heads}, V={spec.vocab_size}\n"
        f"B={setup.batch_size}, T={setup.seq_len}, s={setup.activation_bytes} bytes, "
        f"weights {setup.weights_dtype}"
    )
    rows = []
    for name, value in b.items():
        per_layer = report.gb(value // L) if name.startswith("activations/layer/") else ""
        rows.append((simplified.TERM_NAMES.get(name, name), per_layer, report.gb(value)))
    sm = report.summary(b)
    rows.append(("weights + backward values", "", report.gb(sm["weights_and_backward_bytes"])))
    rows.append(
        ("saved activations (eq:activation_memory)", "", report.gb(sm["activations_bytes"]))
    )
    rows.append(("total (eq:training_memory)", "", report.gb(sm["total_bytes"])))
    body = report.table(rows, ["term", "per layer GB", "GB"], colalign=("left", "right", "right"))
    return f"{head}\n\n{body}" + accumulation_note(setup)


def accumulation_note(setup: TrainingSetup) -> str:
    """``--grad-accum M``: the seed's sum already holds every gradient beside every
    saved activation, which is micro-batch 2..M's end of forward, so it is unchanged."""
    if setup.grad_accum <= 1:
        return ""
    return (
        f"\nnote: --grad-accum {setup.grad_accum}: the seed's sum already counts every "
        "gradient beside every activation (micro-batches 2..M), so it is the same figure; "
        "`introspect profile` prices the micro-batches' moments"
    )


def render_sweep(spec: ModelSpec, results: list[tuple[TrainingSetup, Breakdown]]) -> str:
    rows = []
    for s, b in results:
        sm = report.summary(b)
        rows.append(
            (
                s.batch_size,
                s.seq_len,
                report.gb(sm["weights_bytes"]),
                report.gb(sm["activations_bytes"]),
                report.gb(b.sum("activations/layer/attention/quadratic")),
                report.gb(sm["backward_bytes"]),
                report.gb(sm["total_bytes"]),
            )
        )
    head = f"N = {spec.n_params:,} parameters; s = {results[0][0].activation_bytes} bytes"
    body = report.table(
        rows,
        ["B", "T", "weights GB", "activations GB", "of which T² GB", "backward GB", "total GB"],
        colalign=("right",) * 7,
    )
    return f"{head}\n\n{body}" + accumulation_note(results[0][0])
