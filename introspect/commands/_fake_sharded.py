"""`introspect measure … --device fake --devices D --ddp | --zero 1 | --fsdp`: the sharded
step as a dry run in this one process at any D (:mod:`introspect.measure.fake_sharded`),
each run rank's peak, its phase and what was alive then, beside the refined per-rank
estimate."""

from __future__ import annotations

import argparse
import time

from introspect import report
from introspect.errors import IntrospectError
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

#: Our categories (the sharded worker's) → the FSDPMemTracker / MemTracker kinds they sum
#: (``introspect.measure.distributed_worker.FSDP_KINDS``; DDP's buckets are ``comm``).
KINDS = {
    "parameters": "Sharded Param, Buffer",
    "parameters/unsharded": "Unsharded Param",
    "gradients": "Sharded Grad",
    "gradients/unsharded": "Unsharded Grad",
    "activations": "Activation, Inputs",
    "temporary": "Temp",
    "comm": "All Gather, Reduce Scatter",
    "optimizer_state": "OptState",
    "other": "NF4 quant state (no tracker sees it)",
}
#: The same for DDP and ZeRO-1 (MemTracker's kinds; the buckets from the comm hook).
DDP_KINDS = {
    "parameters": "Parameter, Buffer",
    "gradients": "Gradient",
    "activations": "Activation, Input",
    "temporary": "Temp",
    "comm": "DDP gradient buckets",
    "optimizer_state": "Optstate",
    "other": "NF4 quant state (no tracker sees it)",
}


def setups(args: argparse.Namespace) -> list[TrainingSetup]:
    """The setup flags' setups for the dry run: torch, our reference model (logits loop)
    or the config's transformers class (its loop), fp32 or FSDP2's MixedPrecisionPolicy."""
    from introspect.commands import _sharded
    from introspect.commands._args import loop_for

    if args.framework != "torch":
        raise IntrospectError(
            "--device fake with --devices: a sharded dry run is torch's; drop --framework mlx"
        )
    if args.impl not in ("reference", "transformers"):
        raise IntrospectError(
            f"--impl {args.impl}: a sharded step runs the reference model or transformers'"
        )
    if args.precision == "mixed" and not args.fsdp:
        raise IntrospectError("--precision mixed is FSDP2's MixedPrecisionPolicy here; add --fsdp")
    if getattr(args, "finetune", None) in ("lora", "qlora") and args.impl != "transformers":
        raise IntrospectError(
            f"--finetune {args.finetune}: peft's adapters go on transformers' class; add "
            "--impl transformers"
        )
    loop = "logits" if args.impl == "reference" else loop_for(args)
    return _sharded.sweep(args, loop)


def compare(spec: ModelSpec, setup: TrainingSetup, config: tuple[dict, str] | None) -> dict:
    """Dry-run one sharded step and lay the refined per-rank estimate beside its largest
    rank (None where the closed form refuses the setup)."""
    from introspect import refined
    from introspect.measure.distributed import estimate_split, measured_split
    from introspect.measure.fake_sharded import dry_run

    raw, where = config if config else (None, "the reference model")
    start = time.perf_counter()
    m = dry_run(raw, where, spec, setup)
    seconds = time.perf_counter() - start
    try:
        est = refined.estimate(spec, setup)
    except IntrospectError:
        est = None
    big = m.largest
    return {
        "setup": setup,
        "measurement": m,
        "seconds": seconds,
        "estimate": est,
        "ratio": est.total / big.peak_bytes if est else None,
        "measured_split": measured_split(big.categories),
        "estimate_split": estimate_split(est.execution.terms) if est else None,
    }


def label(setup: TrainingSetup) -> str:
    """The real sharded step's label, with peft's LoRA when it is on."""
    from introspect.commands._sharded import label as sharded_label

    how = sharded_label(setup)
    if setup.finetune == "full":
        return how
    return f"{how} {'QLoRA' if setup.finetune == 'qlora' else 'LoRA'} r={setup.lora_rank}"


def render(spec: ModelSpec, rows: list[dict]) -> str:

    first = rows[0]["measurement"]
    lines = [
        f"model: {spec.source or spec.model_type}, N = {spec.n_params:,}",
        f"dry run, one process: torch {first.versions.get('torch', '?')}, fake process group, "
        "FakeTensorMode (no memory allocated)",
        "",
    ]
    table = []
    for r in rows:
        s, m, est = r["setup"], r["measurement"], r["estimate"]
        big = m.largest
        run = "rank 0 (ranks symmetric)" if m.symmetric else f"all {len(m.ranks)} ranks"
        table.append(
            [
                label(s),
                str(s.devices),
                str(s.seq_len),
                run,
                report.gb(big.peak_bytes, 4),
                f"rank {big.rank}, {big.peak_phase}",
                report.gb(est.total, 4) if est else "-",
                f"{r['ratio']:.3f}" if est else "-",
                f"{r['seconds']:.1f}",
            ]
        )
    head = ["sharding", "D", "T", "ranks run", "per-rank peak GB", "largest rank",
            "refined GB", "refined/dry run", "seconds"]  # fmt: skip
    lines.append(report.table(table, head))
    for r in rows:
        s, m = r["setup"], r["measurement"]
        big = m.largest
        kinds = KINDS if s.resolved_sharding == "fsdp" else DDP_KINDS
        lines += [
            "",
            f"{label(s)}, D={s.devices}, T={s.seq_len}: rank {big.rank} at its peak "
            f"({big.peak_phase}), by category",
        ]
        cat = [
            [k, kinds.get(k, k), report.gb(v, 4), f"{v:,}"] for k, v in big.categories.items() if v
        ]
        cat.append(["total", "", report.gb(big.peak_bytes, 4), f"{big.peak_bytes:,}"])
        lines.append(report.table(cat, ["category", "tracker kinds", "GB", "bytes"]))
    from introspect.measure.runner import allocator_lines

    for r in rows:
        for rank in r["measurement"].ranks:
            lines += [
                line.replace("the step's", f"{label(r['setup'])} rank {rank.rank}'s", 1)
                for line in allocator_lines(rank.allocator_replay)
            ]
    lines += [""] + [f"note: {n}" for n in first.notes]
    return "\n".join(lines)


def to_json(spec: ModelSpec, rows: list[dict]) -> dict:
    return {
        "spec": spec.to_dict(),
        "rows": [
            {
                "setup": r["setup"].to_dict(),
                "measured": r["measurement"].to_json(),
                "seconds": r["seconds"],
                "refined": r["estimate"].to_json() if r["estimate"] else None,
                "ratio": r["ratio"],
                "measured_split": r["measured_split"],
                "estimate_split": r["estimate_split"],
            }
            for r in rows
        ],
    }


def run(args: argparse.Namespace, spec: ModelSpec, config: tuple[dict, str] | None) -> int:
    from introspect import applies
    from introspect.measure.fake_sharded import check

    chosen = setups(args)
    for s in chosen:
        applies.check_model(spec, s)
        check(s)  # before unmeasured: its own line for --offload
        applies.unmeasured(s, "measure")
    from introspect.allocator.recording import for_command

    replay = for_command(args)  # each rank's stream through the allocator model
    with replay():
        rows = [compare(spec, s, config) for s in chosen]
    print(report.dumps(to_json(spec, rows)) if args.json else render(spec, rows))
    return 0
