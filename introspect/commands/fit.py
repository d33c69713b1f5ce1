"""`introspect fit`: does this training setup fit a budget or a device, the largest T
and B that do, and a ranked table of what to change (alone and in combinations)."""

from __future__ import annotations

import argparse
import sys

from introspect import applies, bounds, fit, report
from introspect.commands import _gpu
from introspect.commands._args import (
    add_common,
    add_config_flag,
    add_plot_flag,
    add_setup_flags,
    bounded_int,
    check_plot,
    check_revision,
    setup_from_args,
)
from introspect.errors import IntrospectError
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec
from introspect.units import fmt_memory, parse_memory

TYPE_CHECKING = False  # typing's flag without importing typing (see introspect._record)
if TYPE_CHECKING:
    from typing import Any

#: Devices the ZeRO/FSDP changes spread the state over unless --max-devices says.
MAX_DEVICES = 8

EPILOG = """\
SOURCE is anything 'introspect profile' takes, or a nominal size of the seed's table
(10M … 70B). The budget is per device: --budget 80GB (decimal, 1e9 bytes) or 80GiB
(2^30), or --gpu NAME for a known device (its memory as its maker states it; on CUDA the
context and the caching allocator's reserve are counted, on a Mac Metal's working-set
limit).

examples:
  introspect fit Qwen/Qwen2.5-7B --gpu h100-80gb --seq 4096
  introspect fit Qwen/Qwen2.5-7B --gpu h100-80gb --seq 4096 --lora-rank 16
  introspect fit 40M --gpu m2-8gb --framework mlx-compiled
  introspect fit meta-llama/Llama-3.1-8B --budget 24GB --precision bf16 --json
  introspect fit --config examples/torchtune/1B_lora_single_device.yaml --gpu rtx-4090
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "fit",
        help="does it fit a budget or a GPU; largest T and B; what to change",
        description="Fit a training step into a memory budget: the verdict, the largest "
        "sequence length and batch that fit, and the changes (memory-efficient attention, "
        "checkpointing, chunked loss, BF16, 8-bit Adam, fused optimizer, optimizer in "
        "backward, ZeRO/FSDP, CPU offload, LoRA, QLoRA) ranked by the memory each leaves, "
        "with its cost. All from the refined closed form.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "source",
        nargs="?",
        metavar="SOURCE",
        help="a model: path, bundled name, Hub id or 40M (default: the --config's model)",
    )
    # Not required by argparse: the setup flags are checked first (run), so a flag that
    # does not apply is the line a user sees whatever else is missing.
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--budget",
        metavar="MEM",
        help="memory per device with its unit: 80GB (1e9 bytes) or 80GiB (2^30); this or "
        "--gpu is required",
    )
    where.add_argument(
        "--gpu",
        metavar="NAME",
        help="a known device: a100-40gb, a100-80gb, h100-80gb, h200, l4, t4, rtx-3090, "
        "rtx-4090, mac-8gb … mac-192gb (also m1-8gb, m2-16gb, …)",
    )
    p.add_argument(
        "--max-devices",
        type=bounded_int(bounds.MAX_FIT_DEVICES, "devices"),
        default=None,
        metavar="D",
        help="devices the ZeRO/FSDP changes spread the state over (default: "
        f"{MAX_DEVICES}, or --devices if more; at least --devices, at most "
        f"{bounds.MAX_FIT_DEVICES:,}; torch only)",
    )
    p.add_argument("--revision", default=None, metavar="REV", help="Hub branch, tag or commit")
    add_setup_flags(p, sweep=False)
    add_config_flag(p)
    add_plot_flag(p, "memory vs T and vs B with the budget line and where T² takes over")
    from introspect.allocator import flags as allocator_flags

    allocator_flags.add_flag(p)
    add_common(p, json_help="print JSON: the budget, the verdict, largest T and B, the changes")
    p.set_defaults(run=run)


def resolve_budget(args: argparse.Namespace, setup: TrainingSetup):
    """(budget bytes, device or None, a one-line description)."""
    if args.budget is not None:
        try:
            budget = parse_memory(args.budget)
        except ValueError as err:
            raise IntrospectError(f"--budget: {err}") from None
        where = f"budget {args.budget} = {budget:,} bytes per device"
        if setup.resolved_device == "cuda":
            check_budget_holds_context(args.budget, budget)
            where += (
                "\n  compared with the allocated peak: a budget names no GPU, so the "
                "allocator's reserve, cuBLAS workspaces and CUDA context are not counted "
                "(--gpu NAME counts them)"
            )
        return budget, None, where
    from introspect.devices import lookup

    device = lookup(args.gpu)
    where = f"{device.description}: {device.maker_figure} = {device.memory_bytes:,} bytes "
    where += f"({device.source})"
    if device.kind == "metal":
        from introspect import overhead

        usable = overhead.metal_usable(device)
        where += f"\n  budget: the GPU working set, {fmt_memory(usable)} ({overhead.METAL_SOURCE})"
        return usable, device, where
    return device.memory_bytes, device, where


def check_budget_holds_context(text: str, budget: int) -> None:
    """A CUDA budget at or below the smallest published CUDA context
    (:mod:`introspect.cuda_context`) holds nothing: one line, not a search that fits
    nothing."""
    from introspect import cuda_context

    least = min(m.context_bytes for m in cuda_context.MEASUREMENTS)
    if budget <= least:
        raise IntrospectError(
            f"--budget {text}: {fmt_memory(budget)} is not more than a CUDA context alone "
            f"(the smallest published is {fmt_memory(least)}): no step fits on a CUDA GPU; "
            "give the device's memory (e.g. --budget 24GB) or --gpu NAME"
        )


def need_function(device, setup: TrainingSetup, allocator=None) -> fit.Need:
    """What is compared with the budget: the allocated peak, plus the device's own
    overhead when a device is named (:mod:`introspect.overhead`: on CUDA the caching
    allocator's reserve replayed with ``allocator``, and the context)."""
    if device is None:
        return fit.peak
    from introspect import overhead

    return lambda spec, s: overhead.device_view(spec, s, device, allocator).shown


def floor_function(device, allocator=None) -> fit.Need | None:
    """A bound the device's need never goes below, without the allocator replay: the
    allocated peak plus what the device holds whatever the fragmentation (cuBLAS
    workspaces, context, NCCL; :func:`introspect.overhead.device_floor`). None without a
    device (the need is the peak itself)."""
    if device is None:
        return None
    from introspect import overhead

    return lambda spec, s: overhead.device_floor(spec, s, device)


def remembered(need: fit.Need) -> fit.Need:
    """``need`` computed once per distinct setup: the search asks again for setups it has
    seen (the start of every combination, a change that is already made). Safe: a need
    is a pure function of the spec and the setup, both frozen records, and equal
    setups (the key) are equal field by field; the spec is keyed by identity and kept."""
    answers: dict[tuple[int, TrainingSetup], tuple[ModelSpec, int]] = {}

    def cached(spec: ModelSpec, setup: TrainingSetup) -> int:
        key = (id(spec), setup)
        if key not in answers:
            answers[key] = (spec, need(spec, setup))
        return answers[key][1]

    return cached


def analyse(
    spec: ModelSpec, setup: TrainingSetup, budget: int, device, max_devices: int, allocator=None
):
    """Every figure the command prints, as plain data. One memo for the whole search
    (:mod:`introspect.refined.memo`): the spec's own figures are computed once."""
    from introspect.refined import memo

    with memo.scope():
        return _analyse(spec, setup, budget, device, max_devices, allocator)


def _analyse(
    spec: ModelSpec, setup: TrainingSetup, budget: int, device, max_devices: int, allocator=None
):
    need = remembered(need_function(device, setup, allocator))
    candidates = fit.changes(max_devices, setup.lora_rank, setup.framework)
    # Never propose what the model refuses (a Mamba-2 stack's LoRA or TP: applies.
    # check_state_space), as fit.changes never proposes what the flags refuse.
    candidates = tuple(c for c in candidates if _model_takes(spec, c.apply(setup)))
    now = need(spec, setup)
    view = None
    if device is not None:
        from introspect import overhead

        view = overhead.device_view(spec, setup, device, allocator)
    free, combos = [], []
    if now > budget:
        floor = floor_function(device, allocator)
        free, combos = fit.combinations(spec, setup, budget, candidates, need, floor=floor)
    caps = {field: fit.search_cap(spec, field) for field in ("seq_len", "batch_size")}
    largest = {
        field: fit.largest(spec, setup, budget, field, need, limit=cap)
        for field, (cap, _) in caps.items()
    }
    return {
        "mlx_lora": mlx_lora_knobs(spec, setup, budget, need, caps["seq_len"][0]),
        "need": now,
        "peak": fit.peak(spec, setup),
        "fits": now <= budget,
        "device_view": view,
        "largest_seq": largest["seq_len"],
        "largest_batch": largest["batch_size"],
        # The answer is the cap itself: it fits at every value up to it, and nothing
        # above was tried (not a limit of the budget).
        "caps": {
            field: {"cap": cap, "source": source, "reached": largest[field] == cap}
            for field, (cap, source) in caps.items()
        },
        "changes": fit.rank_changes(spec, setup, budget, candidates, need),
        "free": [c.label for c in free],
        "combinations": combos,
    }


def mlx_lora_knobs(spec: ModelSpec, setup: TrainingSetup, budget: int, need, cap: int):
    """For mlx-lm's LoRA, the knobs ``mlx_lm.lora`` users turn: ``num_layers`` (the
    setup's, 8 and 4, at most L), ``grad_checkpoint`` off and on, and batch 1 and the
    setup's — for each, the largest ``max_seq_length`` that fits (None: not even T = 1),
    at the setup's rank. None outside MLX LoRA. ``grad_checkpoint`` on
    (``mlx_lm/tuner/trainer.py``: ``mx.checkpoint`` around every block) is searched on the
    checkpointed LoRA counts (every linear of Llama, Qwen2, Qwen3:
    :data:`introspect.refined.mlx.LORA_CKPT_STRUCTURES`), over a 4-bit base too. A row
    the LoRA counts do not describe (e.g. ``grad_checkpoint`` with named keys:
    :func:`introspect.refined.mlx.lora_not_derived`) has no closed form to search with:
    its ``largest_seq`` is None for every batch and ``not_derived`` says why (the MLX dry
    run answers one setup: ``introspect profile``), never torch's moments."""
    if not (setup.framework.startswith("mlx") and setup.finetune == "lora"):
        return None
    from introspect.applies import NotApplicable
    from introspect.refined.mlx import lora_not_derived

    L = spec.num_hidden_layers
    own = setup.num_layers or L
    depths = list(dict.fromkeys(min(k, L) for k in (own, 8, 4)))
    batches = list(dict.fromkeys((1, setup.batch_size)))
    rows = []
    for k in depths:
        for ckpt in (False, True):
            try:
                base = setup.replace(num_layers=k, activation_checkpointing=ckpt)
            except NotApplicable:
                continue
            why = lora_not_derived(spec, base)
            if why:
                none = dict.fromkeys(batches)
                rows.append(
                    {"num_layers": k, "grad_checkpoint": ckpt, "largest_seq": none,
                     "not_derived": why}
                )  # fmt: skip
                continue
            found = {}
            for b in batches:
                at = base.replace(batch_size=b)
                found[b] = fit.largest(spec, at, budget, "seq_len", need, limit=cap)
            rows.append({"num_layers": k, "grad_checkpoint": ckpt, "largest_seq": found})
    return {"rank": setup.lora_rank, "batches": batches, "rows": rows, "cap": cap}


def _model_takes(spec: ModelSpec, changed: TrainingSetup | None) -> bool:
    """Whether ``spec`` takes the changed setup (none: the change does not apply)."""
    if changed is None:
        return True
    try:
        applies.check_state_space(spec, changed)
    except applies.NotApplicable:
        return False
    from introspect.refined.mlx import lora_not_derived

    # mlx-lm's LoRA where its counts are not derived has no closed form to price it
    return not lora_not_derived(spec, changed)


def max_devices_for(args: argparse.Namespace, setup: TrainingSetup) -> int:
    """The devices fit's ZeRO/FSDP changes spread the state over: --max-devices (torch
    only, and at least --devices: a change never takes devices away), else
    :data:`MAX_DEVICES` or --devices where that is more."""
    given = args.max_devices
    if given is None:
        return max(MAX_DEVICES, setup.devices)
    if setup.framework != "torch":
        raise IntrospectError(
            f"--max-devices {given} sizes fit's ZeRO/FSDP changes, which are "
            "torch's: fit proposes none on MLX; drop --max-devices"
        )
    if given < setup.devices:
        raise IntrospectError(
            f"--max-devices {given} is below --devices {setup.devices}: fit's changes "
            f"would spread the state over fewer devices than the setup has; give "
            f"--max-devices {setup.devices} or more"
        )
    return given


def run(args: argparse.Namespace) -> int:
    from introspect.adapters import resolve
    from introspect.commands import _config

    config = _config.apply(args)  # a trainer's config: its values where the flags go
    if not args.source:
        raise IntrospectError(
            "fit needs a SOURCE (a path, a bundled model or a Hub id) or --config"
        )
    # check the flags before any file or network work
    setup = _config.build(args, config, setup_from_args)
    max_devices = max_devices_for(args, setup)
    check_revision(args.source, args.revision)
    if args.budget is None and args.gpu is None:
        raise IntrospectError("fit needs a budget: --budget MEM (80GB or 80GiB) or --gpu NAME")
    check_plot(args.plot)
    _gpu.check_fit(args, setup.framework)
    from introspect.allocator import flags as allocator_flags

    allocator, allocator_notes = allocator_flags.resolve(args, setup.framework)
    budget, device, where = resolve_budget(args, setup)
    model = resolve(args.source, revision=args.revision, force=args.force, timeout=args.timeout)
    from introspect.refined.implementations import resolve_attention
    from introspect.unmodelled import check_closed_form

    setup = resolve_attention(model.spec, setup)  # --attention left out: the class's own
    setup = _config.check_model(config, model.spec, setup)  # the file's values
    setup = _config.checkpoint_quant(config, model, setup)  # an MLX 4-/8-bit base
    check_closed_form(model.spec, setup)
    result = analyse(model.spec, setup, budget, device, max_devices, allocator)
    if allocator_notes:
        print("\n".join(f"note: {n}" for n in allocator_notes), file=sys.stderr)
    if args.plot:
        from introspect import plot

        plot.fit_curves(
            model.spec, setup, budget, need_function(device, setup, allocator), args.plot
        )
    if args.json:
        out = to_json(model, setup, budget, device, result)
        if config is not None:
            out["config"] = _config.to_json(config, setup)
        print(report.dumps(out))
    else:
        if config is not None:
            print(_config.render(config, setup) + "\n")
        print(render(model, setup, budget, where, result))
    return 0


def to_json(model, setup, budget, device, result) -> dict[str, Any]:
    return {
        "source": model.location,
        "n_params": model.spec.n_params,
        "setup": setup.to_dict(),
        "budget_bytes": budget,
        "device": device.to_dict() if device else None,
        "need_bytes": result["need"],
        "peak_bytes": result["peak"],
        "device_view": result["device_view"].to_json() if result["device_view"] else None,
        "fits": result["fits"],
        "largest_seq": result["largest_seq"],
        "largest_batch": result["largest_batch"],
        "search_caps": {
            {"seq_len": "seq", "batch_size": "batch"}[field]: info
            for field, info in result["caps"].items()
        },
        "notes": applies.notes(setup),
        "changes": [r.to_json() for r in result["changes"]],
        "free_changes_first": result["free"],
        "combinations": [r.to_json() for r in result["combinations"]],
        "mlx_lora_knobs": result["mlx_lora"],
    }


def _describe(setup: TrainingSetup) -> str:
    parts = [
        f"B={setup.batch_size}",
        f"T={setup.seq_len}",
        f"{setup.precision}",
        f"{setup.optimizer}",
        report.attention_words(setup),
    ]
    if setup.activation_checkpointing:
        parts.append("checkpointing")
    if setup.finetune != "full":
        targets = ",".join(setup.lora_targets)
        top = f" of the top {setup.num_layers} blocks" if setup.num_layers is not None else ""
        parts.append(f"{setup.finetune} r={setup.lora_rank} on {targets}{top}")
    how = setup.resolved_sharding
    if setup.devices > 1 or how != "none":
        plural = "s" if setup.devices > 1 else ""
        parts.append(f"{setup.devices} device{plural}, {report.sharding_name(setup)}")
    if setup.tensor_parallel > 1 or setup.pipeline_parallel > 1:
        parts.append(f"TP {setup.tensor_parallel} × PP {setup.pipeline_parallel}")
    if setup.offload != "none":
        parts.append(f"offload {setup.offload}")
    parts.append(f"{setup.framework} on {setup.resolved_device}")
    return ", ".join(parts)


def render(model, setup: TrainingSetup, budget: int, where: str, result: dict) -> str:
    spec = model.spec
    need, peak = result["need"], result["peak"]
    lines = [
        f"{model.location} ({spec.n_params:,} parameters); {_describe(setup)}",
        where,
    ]
    shown = ""
    view = result["device_view"]
    if view is not None and "cache" in view.sources:  # an Apple device (introspect.metal)
        if need != peak:
            shown = f" (the CPU-verified estimate {fmt_memory(peak)}, as derived for Metal)"
    elif need != peak:
        shown = (
            f" (allocated peak {fmt_memory(peak)}, plus the device's overhead: fit decides "
            "on what the device holds, reserved + context"
            + (" + NCCL's buffers, per rank)" if setup.devices > 1 else ")")
        )
    if result["fits"]:
        verdict = f"FITS: needs {fmt_memory(need)} of {fmt_memory(budget)}{shown}; "
        verdict += f"{fmt_memory(budget - need)} to spare"
    else:
        verdict = f"DOES NOT FIT: needs {fmt_memory(need)}, {fmt_memory(need - budget)} over "
        verdict += f"{fmt_memory(budget)}{shown}"
    lines.append(verdict)
    if view is not None and "cache" in view.sources:  # an Apple device (introspect.metal)
        from introspect import metal

        lines.append(
            f"  Metal: {metal.DERIVED}; {metal.VERIFIED}; applied: page rounding; not "
            "applied: command-buffer pinning, fused rms_norm/rope (introspect/metal.py)"
        )
    elif view is not None and view.shown != view.allocated:
        src = view.sources
        rows = [
            ("allocated peak", view.allocated, src["allocated"]),
            ("+ cuBLAS workspaces", view.workspaces, src["workspaces"]),
            ("+ allocator reserve", view.reserve, src["reserve"]),
            ("= reserved peak", view.reserved, "torch.cuda.max_memory_reserved()"),
            ("+ CUDA context", view.context, src["context"]),
        ]
        if setup.devices > 1:
            rows.append(("+ NCCL buffers", view.nccl, src["nccl"]))
        rows.append(("= what nvidia-smi will show", view.shown, "what fit decides on"))
        lines += [f"  {name:<28}{fmt_memory(value):>10}  ({why})" for name, value, why in rows]
    for n, cap, what, at in (
        (result["largest_seq"], result["caps"]["seq_len"], "T", f"B={setup.batch_size}"),
        (result["largest_batch"], result["caps"]["batch_size"], "B", f"T={setup.seq_len}"),
    ):
        if n is None:
            lines.append(f"largest {what} at {at}: none (not even {what}=1)")
        elif cap["reached"]:
            lines.append(
                f"largest {what} at {at}: fits at every {what} up to the search cap "
                f"{cap['cap']:,} ({cap['source']}); nothing larger was tried"
            )
        else:
            lines.append(f"largest {what} at {at}: {n:,}")
    knobs = result.get("mlx_lora")
    if knobs:
        lines.append(
            f"\nmlx_lm.lora knobs: the largest max_seq_length that fits, rank {knobs['rank']}"
        )
        head = ["num_layers", "grad_checkpoint", *(f"B={b}" for b in knobs["batches"])]
        rows = [
            (
                str(r["num_layers"]),
                "on" if r["grad_checkpoint"] else "off",
                *(
                    "not derived*"
                    if r.get("not_derived")
                    else "none"
                    if t is None
                    else (f"≥{t:,}" if t == knobs["cap"] else f"{t:,}")
                    for t in r["largest_seq"].values()
                ),
            )
            for r in knobs["rows"]
        ]
        lines.append(report.table(rows, head))
        why = next((r["not_derived"] for r in knobs["rows"] if r.get("not_derived")), None)
        if why:
            lines.append(f"* {why}")
    body = [
        (r.label, fmt_memory(r.need), fmt_memory(r.saving), "yes" if r.fits else "no", r.cost)
        for r in result["changes"]
    ]
    if body:
        lines.append("\nchanges, one at a time (per device, ranked by what is left)")
        lines.append(report.table(body, ["change", "needs", "saves", "fits", "cost"]))
    combos = result["combinations"]
    if combos:
        free = ", ".join(result["free"]) or "none"
        lines.append(
            "\ncheapest combinations that fit (a bounded search over the closed form), each "
            f"on top of the free changes: {free}"
        )
        rows = [(r.label, fmt_memory(r.need), r.tier, r.cost) for r in combos]
        lines.append(report.table(rows, ["changes", "needs", "costliest", "paid in"]))
    elif not result["fits"]:
        lines.append(f"\nno combination of up to {fit.MAX_COMBINATION + 3} changes fits")
    lines += [f"note: {n}" for n in applies.notes(setup)]
    return "\n".join(lines)
