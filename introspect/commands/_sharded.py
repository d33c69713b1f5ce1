"""`introspect measure … --devices D --ddp | --zero 1 | --fsdp`: a real sharded step in D
processes on this machine (:mod:`introspect.measure.distributed`), the largest rank's
peak and the ranks' spread beside the refined per-rank estimate, split by category."""

from __future__ import annotations

import argparse

from introspect import bounds, report
from introspect.commands._args import bounded_int
from introspect.errors import IntrospectError
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

#: --step-timeout's default (seconds).
STEP_TIMEOUT_S = 600


def add_flags(parser: argparse.ArgumentParser) -> None:
    """The sharded step's own flag; --devices, --ddp, --zero, --fsdp, --no-reshard and
    --bucket-view are the shared setup flags (:func:`introspect.commands._args.add_sharding_flags`),
    and FSDP2's MixedPrecisionPolicy is --precision mixed."""
    g = parser.add_argument_group("sharded step (D processes, gloo on 127.0.0.1)")
    g.add_argument(
        "--step-timeout",
        type=bounded_int(bounds.MAX_TIMEOUT_S, "seconds"),
        default=None,  # given or not: only a sharded step takes it (introspect.applies)
        metavar="S",
        help=f"end every process of a sharded step after S seconds (default {STEP_TIMEOUT_S}, "
        f"at most {bounds.MAX_TIMEOUT_S:,})",
    )


def wants_sharded(args: argparse.Namespace) -> bool:
    return getattr(args, "devices", 1) > 1 or bool(
        getattr(args, "ddp", False) or getattr(args, "fsdp", False) or getattr(args, "zero", 0)
    )


def setups(args: argparse.Namespace) -> list[TrainingSetup]:
    """The shared setup flags' setups, checked against what a sharded step runs: our
    reference model (the logits loop) or the config's transformers class (its loop,
    labels by default), torch on the CPU (gloo), FP32, or FSDP2's MixedPrecisionPolicy
    (BF16 parameters, FP32 reduction) with --fsdp --precision mixed."""
    from introspect.commands._args import loop_for

    if args.framework != "torch" or args.device not in ("auto", "cpu"):
        raise IntrospectError(
            "a sharded step runs torch on cpu (gloo); drop --framework mlx and --device"
        )
    if args.impl not in ("reference", "transformers"):
        raise IntrospectError(
            f"--impl {args.impl}: a sharded step runs the reference model or transformers'"
        )
    loop = "logits" if args.impl == "reference" else loop_for(args)
    if args.precision not in ("fp32", "mixed"):
        raise IntrospectError(
            f"--precision {args.precision}: a sharded step runs fp32, or mixed with --fsdp"
        )
    if args.precision == "mixed" and not args.fsdp:
        raise IntrospectError("--precision mixed is FSDP2's MixedPrecisionPolicy here; add --fsdp")
    if getattr(args, "finetune", None) in ("lora", "qlora") or getattr(args, "lora_rank", None):
        raise IntrospectError(
            "--finetune lora: a sharded step here trains every weight (peft under "
            "DDP/FSDP is not measured); measure LoRA on one device (drop --devices) or "
            "estimate it with `introspect profile`"
        )
    return sweep(args, loop)


def sweep(args: argparse.Namespace, loop: str) -> list[TrainingSetup]:
    """Every (--batch, --seq) setup of a sharded step on the CPU, the strategy its flags
    name (DDP when only --devices is given); shared by the real step and the dry run
    (:mod:`introspect.commands._fake_sharded`)."""
    from introspect.commands._args import setup_from_args

    sharding = "ddp" if args.ddp else "zero" if args.zero else "fsdp" if args.fsdp else "ddp"
    return [
        setup_from_args(
            args,
            batch_size=b,
            seq_len=t,
            device="cpu",
            sharding=sharding,
            loop=loop,
            implementation=args.impl,
        )  # fmt: skip
        for b in args.batch
        for t in args.seq
    ]


def compare(
    spec: ModelSpec, setup: TrainingSetup, timeout: float = 600, config: dict | None = None
) -> dict:
    """Measure one sharded step (of ``config``'s transformers class when given) and lay
    the refined estimate beside its largest rank."""
    from introspect import refined
    from introspect.measure.distributed import estimate_split, measure_sharded, measured_split
    from introspect.refined.implementations import resolve_attention

    setup = resolve_attention(spec, setup)  # --attention left out: the class's own
    m = measure_sharded(spec, setup, timeout=timeout, config=config)
    est = refined.estimate(spec, setup)
    big = m.largest
    return {
        "setup": setup,
        "measurement": m,
        "estimate": est,
        "ratio": est.total / big.peak_bytes,
        "measured_split": measured_split(big.categories),
        "estimate_split": estimate_split(est.execution.terms),
    }


def label(setup: TrainingSetup) -> str:
    how = {"ddp": "DDP", "zero": "ZeRO-1", "fsdp": "FSDP2"}[setup.resolved_sharding]
    if setup.resolved_sharding == "fsdp" and not setup.reshard_after_forward:
        how += " no-reshard"
    if setup.gradient_as_bucket_view:
        how += " bucket-view"
    return f"{how} {setup.precision}"


def render(spec: ModelSpec, rows: list[dict]) -> str:
    lines = [f"model: {spec.source or spec.model_type}, N = {spec.n_params:,}", ""]
    table = []
    for r in rows:
        s, m, est = r["setup"], r["measurement"], r["estimate"]
        big = m.largest
        table.append(
            [
                label(s),
                str(s.devices),
                str(s.seq_len),
                report.gb(big.peak_bytes, 4),
                f"rank {big.rank}, {big.peak_phase}",
                f"{100 * m.spread:.1f}%",
                report.gb(est.total, 4),
                est.peak_phase,
                f"{r['ratio']:.3f}",
            ]
        )
    head = ["sharding", "D", "T", "measured GB", "largest rank", "spread", "refined GB",
            "refined phase", "refined/measured"]  # fmt: skip
    lines.append(report.table(table, head))
    for r in rows:
        ms, es = r["measured_split"], r["estimate_split"]
        s = r["setup"]
        lines += ["", f"{label(s)}, D={s.devices}, T={s.seq_len}: largest rank by category"]
        cat = [
            [k, report.gb(ms[k], 4), report.gb(es[k], 4), f"{es[k] / ms[k]:.3f}" if ms[k] else "-"]
            for k in ms
        ]
        lines.append(report.table(cat, ["category", "measured GB", "refined GB", "ratio"]))
    notes = rows[0]["measurement"].notes if rows else ()
    lines += [""] + [f"note: {n}" for n in notes]
    return "\n".join(lines)


def to_json(spec: ModelSpec, rows: list[dict]) -> dict:
    return {
        "spec": spec.to_dict(),
        "rows": [
            {
                "setup": r["setup"].to_dict(),
                "measured": r["measurement"].to_json(),
                "refined": r["estimate"].to_json(),
                "ratio": r["ratio"],
                "measured_split": r["measured_split"],
                "estimate_split": r["estimate_split"],
            }
            for r in rows
        ],
    }


def refuse_if_too_big(spec: ModelSpec, setup: TrainingSetup) -> None:
    """One line where D processes of the refined per-rank peak exceed this machine's
    available memory (the step would be killed, or swap for hours)."""
    from introspect import refined
    from introspect.commands._memory import available_bytes

    need = setup.devices * refined.estimate(spec, setup).total
    have = available_bytes("cpu")
    if have is not None and need > have:
        raise IntrospectError(
            f"{setup.devices} processes of B={setup.batch_size}, T={setup.seq_len} need about "
            f"{report.gb(need)} GB by the refined estimate but {report.gb(have)} GB is "
            "available; use fewer --devices, a smaller model, --seq or --batch, or "
            "`introspect profile` for the estimate alone"
        )


def run(args: argparse.Namespace, spec: ModelSpec, config: dict | None = None) -> int:
    from introspect import applies

    chosen = setups(args)
    for s in chosen:
        applies.check_model(spec, s)
        applies.unmeasured(s, "measure")
        refuse_if_too_big(spec, s)
    rows = [compare(spec, s, args.step_timeout or STEP_TIMEOUT_S, config) for s in chosen]
    print(report.dumps(to_json(spec, rows)) if args.json else render(spec, rows))
    return 0
