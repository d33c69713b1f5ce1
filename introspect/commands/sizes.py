"""`introspect sizes`: the seed's model-size table against a 4 GB and an 8 GB budget."""

from __future__ import annotations

import argparse

from introspect import report, simplified
from introspect.commands._args import add_common, choice, positive_int
from introspect.errors import IntrospectError
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
    p.add_argument(
        "--finetune",
        type=choice(("lora",)),
        default=None,
        help="also the refined estimate of LoRA as mlx_lm.lora runs it by default (rank 8, "
        "the top 16 blocks, or all of a shallower model), beside full fine-tuning; needs "
        "--framework",
    )
    p.add_argument(
        "--base-quant",
        type=choice(("auto", "affine4", "affine8")),
        default="auto",
        help="the LoRA column's frozen base: auto (FP32, as the table), affine4 or affine8 "
        "(mx.quantize, groups of 64: an mlx-community 4-/8-bit model); needs --finetune "
        "lora --framework mlx",
    )
    add_common(p, hub=False)
    p.set_defaults(run=run)


def lora_setup(spec, setup: TrainingSetup, framework: str, base_quant: str) -> TrainingSetup:
    """``mlx_lm.lora``'s defaults (``mlx_lm/lora.py`` CONFIG_DEFAULTS: rank 8, the top 16
    blocks — every block of a shallower model, which ``mlx_lm.lora`` itself refuses at 16
    — no dropout, default keys) on the table's setup (B, T, FP32 Adam)."""
    k = 16 if spec.num_hidden_layers > 16 else None
    return setup.replace(
        framework=framework, finetune="lora", lora_rank=8, num_layers=k, base_quant=base_quant
    )


def rows(
    seqs: list[int],
    batch: int = 1,
    framework: str | None = None,
    finetune: str | None = None,
    base_quant: str = "auto",
) -> list[dict]:
    """One dict per (shape, T): the shape, exact N, and the seed's three parts in bytes;
    with ``framework``, the refined estimate of the same shape as built and run there;
    with ``finetune`` lora too, that of mlx_lm.lora's default LoRA over ``base_quant``
    (:func:`lora_setup`)."""
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
                if finetune == "lora":
                    from introspect.refined.mlx import lora_not_derived

                    built = nominal_spec(shape.nominal)
                    at = lora_setup(built, setup, framework, base_quant)
                    why = lora_not_derived(built, at)
                    if why:  # no closed form prices it: no figure, the line says why
                        extra.update(
                            lora_base_quant=base_quant,
                            lora_total_bytes=None,
                            lora_label=why,
                            **{f"lora_fits_{g}gb": None for g in BUDGETS_GB},
                        )
                        out.append(_row(shape, spec, batch, T, sm, extra))
                        continue
                    lora = refined.estimate(built, at)
                    extra.update(
                        lora_base_quant=base_quant,
                        lora_total_bytes=lora.total,
                        lora_label=lora.execution.label,
                        **{f"lora_fits_{g}gb": lora.total <= g * GB for g in BUDGETS_GB},
                    )
            out.append(_row(shape, spec, batch, T, sm, extra))
    return out


def _row(shape, spec, batch: int, T: int, sm: dict, extra: dict) -> dict:
    return {
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


def run(args: argparse.Namespace) -> int:
    from introspect import bounds

    for T in args.seq:  # the bounds profile applies (bounds.SETUP_LIMITS), before any work
        bounds.check_setup(TrainingSetup(batch_size=args.batch, seq_len=T), force=args.force)
    if args.finetune and not args.framework:
        raise IntrospectError(
            "--finetune lora: the LoRA column is a refined estimate; give "
            "--framework mlx (or torch) beside it"
        )
    if args.base_quant != "auto" and not (
        args.finetune and (args.framework or "").startswith("mlx")
    ):
        raise IntrospectError(
            f"--base-quant {args.base_quant} is MLX's 4-/8-bit base for the LoRA column; "
            "it needs --finetune lora --framework mlx"
        )
    table_rows = rows(args.seq, args.batch, args.framework, args.finetune, args.base_quant)
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
            *(
                (
                    (report.gb(r["lora_total_bytes"]),)
                    + tuple("yes" if r[f"lora_fits_{g}gb"] else "no" for g in BUDGETS_GB)
                    if r["lora_total_bytes"] is not None
                    else ("n/a",) + ("—",) * len(BUDGETS_GB)
                )
                if args.finetune
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
    if args.finetune:
        base = {"auto": "FP32", "affine4": "4-bit", "affine8": "8-bit"}[args.base_quant]
        headers += [f"LoRA {base} GB", *(f"LoRA ≤ {_budget(g)}" for g in BUDGETS_GB)]
    print(f"B={args.batch}, FP32 activations (s=4), FP32 weights, ordinary FP32 Adam")
    if args.framework:
        print(
            "seed = eq:training_memory; refined = the refined estimate of the same shape as "
            f"built (N with norm weights), run by {args.framework.replace('_', '-')} on its "
            "default device (MLX: the Mac's GPU; mx.get_peak_memory())"
        )
    if args.finetune:
        labels = dict.fromkeys(r["lora_label"] for r in table_rows)
        print(
            "LoRA = mlx_lm.lora's defaults (rank 8, adapters on the top 16 blocks or all of "
            "a shallower model, FP32 adapters and Adam state) over a "
            + (
                "frozen FP32 base"
                if args.base_quant == "auto"
                else f"{base} affine base (mx.quantize, groups of 64; scales, biases and norms "
                "FP32, as the table's weights)"
            )
            + "; priced by: "
            + " | ".join(labels)
        )
    print(report.table(body, headers, colalign=("left", "left") + ("right",) * (len(headers) - 2)))
    return 0


def _budget(g: int) -> str:
    """The seed's budget of ``g`` decimal GB in the display unit (``4 GB``, ``3.73 GiB``)."""
    from introspect.units import display_unit, fmt_memory

    return f"{g} GB" if display_unit() == "GB" else fmt_memory(g * GB)
