"""`introspect profile`: a model from wherever it is — where the spec came from, the spec,
its exact parameters by component, and the estimates for a training setup."""

from __future__ import annotations

import argparse

from introspect import applies, divergence, refined, report, simplified
from introspect.breakdown import Breakdown
from introspect.commands._args import (
    add_common,
    add_config_flag,
    add_plot_flag,
    add_setup_flags,
    check_plot,
    check_revision,
    given_setup_flags,
    setup_from_args,
)
from introspect.errors import IntrospectError
from introspect.params import COMPONENTS
from introspect.refined import RefinedEstimate
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

TYPE_CHECKING = False  # typing's flag without importing typing (see introspect._record)
if TYPE_CHECKING:
    from typing import Any

EPILOG = """\
SOURCE is tried in this order:
  an existing path    a config.json, a .safetensors file, or a model folder
  a bundled model     its Hub id or folder name (see --list); works offline
  the Hub             org/name: the local Hugging Face cache first, then the Hub

examples:
  introspect profile --list
  introspect profile Qwen/Qwen2.5-0.5B --seq 1024 --act-dtype bf16
  introspect profile ./my-model/ --json
  introspect profile --config examples/trl/example_config.yaml --seq 512
  introspect profile Qwen/Qwen2.5-7B --seq 4096 --gpu a100-80gb
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "profile",
        help="a Hub id, a checkpoint folder or a bundled model: exact parameters and estimates",
        description="Profile one model: where its spec came from, the spec, its exact "
        "parameters by component (summing to the total), and the training-memory "
        "estimates for the setup. Decimal GB.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "source",
        nargs="?",
        metavar="SOURCE",
        help="a path (config.json, .safetensors, model folder), a bundled model or a Hub id",
    )
    p.add_argument(
        "--revision",
        default=None,
        metavar="REV",
        help="Hub branch, tag or commit (default: the main branch); skips bundled data",
    )
    p.add_argument("--list", action="store_true", help="list the bundled reference models and exit")
    add_setup_flags(p, sweep=False)
    add_config_flag(p)
    add_plot_flag(p, "the seed's and the refined breakdown as stacked bars")
    from introspect.commands import _exact

    _exact.add_flag(p)
    from introspect.allocator import flags as allocator_flags

    allocator_flags.add_flag(p)
    from introspect.commands import _gpu

    _gpu.add_flag(p)
    add_common(
        p,
        json_help="print JSON: source, spec, params (exact integers), estimates (bytes)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.list:
        check_list(args)
        print(render_list(args.json))
        return 0
    from introspect.commands import _config

    config = _config.apply(args)  # a trainer's config: its values where the flags go
    if not args.source:
        raise IntrospectError(
            "profile needs a SOURCE (a path, a bundled model or a Hub id), or --list"
        )
    from introspect.adapters import resolve
    from introspect.refined.implementations import resolve_attention

    # check the flags before any file or network work
    setup = _config.build(args, config, setup_from_args)
    from introspect.commands import _gpu

    device = _gpu.resolve(args, setup.framework, "profile")
    check_revision(args.source, args.revision)
    check_plot(args.plot)
    model = resolve(args.source, revision=args.revision, force=args.force, timeout=args.timeout)
    setup = resolve_attention(model.spec, setup)  # --attention left out: the class's own
    setup = _config.check_model(config, model.spec, setup)  # the file's values
    setup = _config.checkpoint_quant(config, model, setup)  # an MLX 4-/8-bit base
    if model.spec.unmodelled:
        return run_unmodelled(args, model, setup)
    if setup.framework.startswith("mlx"):
        from introspect.refined import mlx

        why = mlx.lora_not_derived(model.spec, setup)
        if why:
            return run_mlx_dry_run(args, model, setup, why)
    from introspect.unmodelled import check_closed_form

    check_closed_form(model.spec, setup)
    from introspect.allocator import flags as allocator_flags

    allocator, allocator_notes = allocator_flags.resolve(args, setup.framework)
    results = estimates(model.spec, setup)
    if args.plot:
        from introspect import plot

        bars = {"seed": results["simplified"], "refined (peak)": results["refined"].execution}
        title = f"{model.location}: B={setup.batch_size}, T={setup.seq_len}, "
        title += f"peak at {results['refined'].peak_phase}"
        plot.breakdown_stack(bars, args.plot, title)
    exact = None
    if args.exact:
        from introspect.commands import _exact

        exact = _exact.dry_run(args.source, model.spec, setup)
    notes = applies.notes(setup)  # a flag whose meaning changed says so once
    if args.json:
        out = to_json(model, setup, results)
        if exact is not None:
            out["exact"] = exact
        if notes:  # only then: the JSON contract's keys stay as they were
            out["notes"] = notes
        if config is not None:
            out["config"] = _config.to_json(config, setup)
        cuda = not setup.framework.startswith("mlx")
        if cuda and (args.expandable_segments or allocator_notes or device):  # else the keys stay
            views = _cuda_views(model.spec, setup, allocator, device)
            out["cuda_device"] = {
                "chosen_expandable_segments": allocator.expandable_segments,
                **{k: v.to_json() for k, v in views.items()},
            }
            if device is not None:
                out["cuda_device"]["gpu"] = device.to_dict()
        if allocator_notes:
            out.setdefault("notes", []).extend(allocator_notes)
        if setup.resolved_device == "metal":
            out["metal"] = _metal_view(model.spec, setup, results).to_json()
        print(report.dumps(out))
    else:
        if config is not None:
            print(_config.render(config, setup) + "\n")
        print(render(model, setup, results))
        if exact is not None:
            from introspect.commands import _exact

            print("\n" + _exact.render(exact))
        if not setup.framework.startswith("mlx"):
            print("\n" + cuda_section(model.spec, setup, allocator, device))
        elif setup.resolved_device == "metal":  # MLX on a Mac, not MLX's CPU stream
            print("\n" + "\n".join(_metal_view(model.spec, setup, results).lines()))
        notes = [*notes, *allocator_notes]
        if notes:
            print("\n" + "\n".join(f"note: {n}" for n in notes))
    return 0


def _metal_view(spec: ModelSpec, setup: TrainingSetup, results: dict):
    """What differs on Metal from the CPU-verified MLX estimate (:mod:`introspect.metal`)."""
    from introspect import metal

    return metal.metal_view(spec, setup, results["refined"].total)


def _cuda_views(spec: ModelSpec, setup: TrainingSetup, allocator, device=None) -> dict:
    """The device view with expandable segments off and on, for ``device`` (None: an
    H100, as :func:`introspect.overhead.device_view` takes a GPU not named)."""
    from introspect import overhead
    from introspect.allocator.config import with_expandable

    return {
        f"expandable_{'on' if on else 'off'}": overhead.device_view(
            spec, setup, device, with_expandable(allocator, on)
        )
        for on in (False, True)
    }


def cuda_section(spec: ModelSpec, setup: TrainingSetup, allocator, device=None) -> str:
    """Allocated, reserved (with the cuBLAS workspaces and fragmentation), context, NCCL's
    buffers and what nvidia-smi shows, per rank, with expandable segments off and on;
    the setting in force is marked. ``device`` (``--gpu``; None: an H100) chooses the
    context and workspaces, and its memory is set beside what nvidia-smi shows."""
    from introspect.allocator.replay import LABEL

    views = _cuda_views(spec, setup, allocator, device)
    off, on = views["expandable_off"], views["expandable_on"]
    mark = ("", " *") if allocator.expandable_segments else (" *", "")
    rows = [
        ("allocated peak (tensors)", off.allocated, on.allocated),
        ("+ cuBLAS workspaces", off.workspaces, on.workspaces),
        ("+ allocator reserve (fragmentation)", off.reserve, on.reserve),
        ("= reserved peak", off.reserved, on.reserved),
        ("+ CUDA context", off.context, on.context),
    ]
    if setup.devices > 1:
        rows.append(("+ NCCL buffers", off.nccl, on.nccl))
    rows.append(("= what nvidia-smi shows", off.shown, on.shown))
    rank = " per rank" if setup.devices > 1 else ""
    gpu = f"on {device.name}" if device is not None else "on a CUDA GPU"
    table = report.table(
        [(name, report.gb(a), report.gb(b)) for name, a, b in rows],
        [f"{gpu}{rank} (GB)", f"expandable off{mark[0]}", f"expandable on{mark[1]}"],
        colalign=("left", "right", "right"),
    )
    src = off.sources
    lines = [
        table,
        f"  reserve: {LABEL} (the step's moments replayed through torch 2.13's caching "
        "allocator; * = the setting in force)",
        f"  workspaces: {src['workspaces']}",
        f"  context: {src['context']}",
    ]
    if setup.devices > 1:
        lines.append(f"  NCCL: {src['nccl']}")
    if device is not None:
        from introspect.commands import _gpu

        lines.append(_gpu.device_line(device, on if allocator.expandable_segments else off))
    return "\n".join(lines)


def check_list(args: argparse.Namespace) -> None:
    """--list lists the bundled models (and --json prints them as JSON): a SOURCE, or any
    flag that prices or reads a model beside it, would be ignored, so it is refused."""
    if args.source:
        from introspect import files

        raise IntrospectError(
            f"--list lists the bundled models and takes no SOURCE (got "
            f"{files.display(args.source)}); drop --list to profile it, or drop the SOURCE"
        )
    given = given_setup_flags(args)
    given += [f for f, on in (("--revision", args.revision), ("--plot", args.plot)) if on]
    given += ["--exact"] * bool(getattr(args, "exact", False))
    given += [f"--units {args.units}"] * (args.units is not None)
    given += ["--config"] * bool(getattr(args, "config", None))
    if given:
        raise IntrospectError(
            f"--list lists the bundled models and prices nothing, so {', '.join(given)} "
            "would be ignored; drop "
            + ("it" if len(given) == 1 else "them")
            + ", or drop --list and give a SOURCE"
        )


def run_unmodelled(args: argparse.Namespace, model, setup: TrainingSetup) -> int:
    """A stack the closed form does not model (:mod:`introspect.unmodelled`): what is not
    modelled, and the dry run of the real class at ``setup`` as the answer; never
    another architecture's estimates."""
    from introspect import unmodelled

    if args.plot:
        raise IntrospectError(
            f"--plot draws the closed form's breakdown, which does not apply here (not "
            f"modelled: {unmodelled.parts(model.spec)}); drop --plot"
        )
    from introspect.measure.answer import dry_run_answer

    answer = dry_run_answer(args.source, model.spec, setup)
    if args.json:
        out = to_json_unmodelled(model, setup, answer)
        print(report.dumps(out))
        return 0
    print(render_unmodelled(model, answer))
    return 0


def run_mlx_dry_run(args: argparse.Namespace, model, setup: TrainingSetup, why: str) -> int:
    """mlx-lm's LoRA on a family whose LoRA counts are not derived
    (:func:`introspect.refined.mlx.lora_not_derived`): that line, and the MLX dry run of
    the family's class as the answer (:mod:`introspect.measure.mlx_lora_dry_run`); never
    another structure's counts or torch's moments."""
    if args.plot:
        raise IntrospectError(f"--plot draws the closed form's breakdown; {why}; drop --plot")
    from introspect.measure import mlx_lora_dry_run

    found = mlx_lora_dry_run.answer(args.source, model.spec, setup)
    spec = model.spec
    if args.json:
        out = {
            "source": _source_json(model),
            "spec": spec.to_dict(),
            "params": {"total": spec.n_params, "active_per_token": None, "by_component": None},
            "modelled": False,
            "unmodelled": [why],
            "answer": "dry_run",
            "estimates": None,
            "dry_run": found,
        }
        print(report.dumps(out))
        return 0
    print("\n\n".join((_source_section(model), mlx_lora_dry_run.render(why, found))))
    return 0


def _source_json(model) -> dict[str, Any]:
    """Where the spec came from, as every profile JSON carries it."""
    return {
        "origin": model.origin,
        "location": model.location,
        "revision": model.revision,
        "notes": list(model.notes),
    }


def to_json_unmodelled(model, setup: TrainingSetup, answer: dict[str, Any]) -> dict[str, Any]:
    """profile's JSON for an unmodelled stack: ``modelled`` false, the ``unmodelled``
    parts, ``answer`` "dry_run" and the ``dry_run`` itself; ``estimates`` null (none
    applies) and no split by component (only the total is read) — but a multimodal
    wrapper's, whose tower the build counts apart: the language model and the tower."""
    from introspect import unmodelled

    spec = model.spec
    split = None
    if spec.tower_parameters:
        split = {
            "language_model": spec.n_params - spec.tower_parameters,
            "vision_tower": spec.tower_parameters,
        }
    return {
        "source": _source_json(model),
        "spec": spec.to_dict(),
        "params": {"total": spec.n_params, "active_per_token": None, "by_component": split},
        **unmodelled.to_json(model.spec, answer),
        "estimates": None,
        "dry_run": answer,
    }


def render_unmodelled(model, answer: dict[str, Any]) -> str:
    """Source, what the build states, what is not modelled, and the dry run's answer."""
    from introspect import unmodelled

    spec = model.spec
    pairs = [
        ("model_type", spec.model_type),
        ("layers L", spec.num_hidden_layers),
        ("hidden size d", spec.hidden_size),
        ("vocabulary V", spec.vocab_size),
        ("tied embeddings", "yes" if spec.tie_word_embeddings else "no"),
        ("parameters (exact)", f"{spec.n_params:,}"),
    ]
    if spec.tower_parameters:
        pairs.append(("tower (apart)", f"{spec.tower}: {spec.tower_parameters:,}"))
    lines = [f"not modelled: {part}" for part in spec.unmodelled]
    return "\n\n".join(
        (
            _source_section(model),
            "spec (as built; the closed form does not model this stack)\n"
            + _indent(report.key_value(pairs)),
            "\n".join(lines),
            unmodelled.render_answer(spec, answer),
        )
    )


def estimates(spec: ModelSpec, setup: TrainingSetup) -> dict[str, Breakdown | RefinedEstimate]:
    """Every estimate for ``spec`` trained as ``setup``, by estimator name: the seed's
    (``simplified``) and the architecture-aware one (``refined``: its architecture and
    execution layers)."""
    return {
        "simplified": simplified.estimate(spec, setup),
        "refined": refined.estimate(spec, setup),
    }


def to_json(model, setup: TrainingSetup, results: dict[str, Breakdown]) -> dict[str, Any]:
    """The stable JSON contract: ``source``, ``spec``, ``params``, ``estimates``,
    ``divergences`` (simplified vs refined rows and the features found). An unmodelled
    stack's JSON (:func:`to_json_unmodelled`) adds ``modelled`` false instead."""
    by_component = {name: model.params_by_component.get(name, 0) for name in COMPONENTS}
    by_component.update(model.params_by_component)
    out_estimates: dict[str, Any] = {"setup": setup.to_dict()}
    out_estimates.update({name: b.to_json() for name, b in results.items()})
    return {
        "source": _source_json(model),
        "spec": model.spec.to_dict(),
        "params": {
            "total": model.spec.n_params,
            "active_per_token": _active(model.spec),
            "by_component": by_component,
        },
        "estimates": out_estimates,
        "divergences": _divergences(model.spec, setup, results),
    }


def _active(spec: ModelSpec) -> int:
    from introspect.params import active_parameter_count

    return active_parameter_count(spec)


def _divergences(spec: ModelSpec, setup: TrainingSetup, results: dict) -> dict[str, Any]:
    rows = divergence.rows(results["simplified"], results["refined"])
    return divergence.to_json(rows, divergence.flags(spec, setup))


def render(model, setup: TrainingSetup, results: dict[str, Breakdown]) -> str:
    """Four sections: source, spec, parameters, estimates."""
    return "\n\n".join(
        (
            _source_section(model),
            _spec_section(model.spec),
            _params_section(model),
            _estimates_section(model.spec, setup, results),
        )
    )


def _source_section(model) -> str:
    where = model.location + (f" @ {model.revision}" if model.revision else "")
    lines = [f"source: {where} ({model.origin})"]
    lines += [f"  note: {n}" for n in model.notes]
    # A checkpoint's notes already repeat the spec's assumptions; say each thing once.
    lines += [f"  assumed: {a}" for a in model.spec.assumptions if a not in model.notes]
    return "\n".join(lines)


def _spec_section(spec: ModelSpec) -> str:
    biases = [
        name
        for name, on in (
            ("qkv", spec.qkv_bias),
            ("o", spec.o_bias),
            ("mlp", spec.mlp_bias),
            ("lm_head", spec.lm_head_bias),
        )
        if on
    ]
    norm = spec.norm + (" with bias" if spec.norm == "layernorm" and spec.norm_bias else "")
    ffn_kind = "gated (gate, up, down)" if spec.ffn == "gated" else "plain (up, down)"
    pairs = [
        ("model_type", spec.model_type),
        ("layers L", spec.num_hidden_layers),
        ("hidden size d", spec.hidden_size),
        ("heads h (K/V heads)", f"{spec.num_attention_heads} ({spec.kv_heads})"),
        ("head size", spec.head_size),
        ("q_dim / kv_dim", f"{spec.q_dim} / {spec.kv_dim}"),
        ("query heads per K/V head", spec.group_size),
        ("feed-forward", f"{ffn_kind}, width {spec.ffn_dim}, {spec.hidden_act}"),
    ]
    if spec.layers and all(
        k.attention.kind in ("mamba1", "none") and k.feed_forward.ffn == "none"
        for k, _ in spec.kinds
    ):
        # A pure state-space stack (Mamba, Falcon-Mamba): no attention, no feed-forward;
        # its flat head fields are placeholders.
        pairs[3:8] = [("attention", "none (state-space mixers only)"), ("feed-forward", "none")]
    pairs += [
        ("vocabulary V", spec.vocab_size),
        ("norm", f"{norm}, {spec.norms_per_layer} per layer"),
        ("q/k norm", spec.qk_norm),
        ("biases", ", ".join(biases) or "none"),
        ("positions", _positions(spec)),
        ("tied embeddings", "yes" if spec.tie_word_embeddings else "no"),
    ]
    if spec.is_moe:
        pairs.append(
            ("experts", f"{spec.num_local_experts} per layer, {spec.num_experts_per_tok} active")
        )
    if spec.is_heterogeneous or spec.layers:
        for kind, count in spec.kinds:
            pairs.append((f"  {count} layers", describe_kind(kind)))
    if spec.tower_parameters:
        pairs.append(("tower (apart)", f"{spec.tower}: {spec.tower_parameters:,}"))
    if spec.unbuilt_parameters:
        pairs.append(
            ("not built", f"{spec.unbuilt}: {spec.unbuilt_parameters:,} in the checkpoint")
        )
    return "spec\n" + _indent(report.key_value(pairs))


def describe_kind(kind) -> str:
    """One layer kind in a few words: attention, feed-forward, norms."""
    a, ff = kind.attention, kind.feed_forward
    att = {
        "full": "full attention",
        "sliding": f"sliding window {a.window}",
        "chunked": f"chunked {a.window}",
        "linear": "linear attention",
        "mamba2": f"Mamba-2 mixer ({a.mamba_num_heads} heads of {a.mamba_head_dim}, "
        f"{a.mamba_n_groups}×{a.mamba_state_size} states, chunk {a.mamba_chunk_size})",
        "mamba1": f"Mamba-1 mixer ({a.mamba_inner_size} channels × {a.mamba_state_size} "
        f"states, dt rank {a.mamba_dt_rank}"
        + {"none": ")", "weightless": ", dt/B/C norms)", "weighted": ", dt/B/C RMSNorms)"}[
            a.mamba_bcdt_norm
        ],
        "mla": f"MLA (latent {a.kv_lora_rank}, q rank {a.q_lora_rank})",
        "rglru": f"RG-LRU block (width {a.lru_width} in {a.num_attention_heads} blocks, "
        f"conv {a.lru_conv_width})",
        "none": "no mixer",
    }[a.kind]
    if a.sinks:
        att += " + sinks"
    if not a.rope:
        att += ", no rope"
    if kind.mixer is not None:
        m = kind.mixer
        att += (
            f" ∥ Mamba-2 mixer ({m.mamba_num_heads} heads of {m.mamba_head_dim}, "
            f"{m.mamba_n_groups}×{m.mamba_state_size} states, chunk {m.mamba_chunk_size})"
        )
    if ff.is_moe:
        mlp = f"MoE {ff.top_k} of {ff.num_experts} experts of {ff.intermediate_size}"
        if ff.shared_intermediate_size:
            mlp += f" + shared {ff.shared_intermediate_size}"
    elif ff.ffn == "none":
        mlp = "no MLP"
    else:
        mlp = f"{ff.ffn} MLP {ff.intermediate_size}"
    text = f"{att}; {mlp}; {kind.norms} norms"
    if kind.shared is not None:
        text = f"{describe_shared(kind.shared)}, then {text}"
    return text


def describe_shared(block) -> str:
    """A shared block in a few words: its id, attention, MLP and per-use adapters."""
    a, ff = block.attention, block.feed_forward
    adapters = f"gate_up adapter rank {block.ffn_adapter_rank}"
    if block.attention_adapter_rank:
        adapters = f"q/k/v and {adapters}"
    return (
        f"shared block {block.block_id} (attention over {block.input_width}: "
        f"{a.num_attention_heads} heads of {a.head_dim}{'' if a.rope else ', no rope'}; "
        f"{ff.ffn} MLP {ff.intermediate_size}; {adapters})"
    )


def _positions(spec: ModelSpec) -> str:
    if spec.position_embedding == "learned":
        return f"learned, {spec.max_position_embeddings} rows"
    return spec.position_embedding


def _params_section(model) -> str:
    total = model.spec.n_params
    rows = [
        (name, f"{n:,}", f"{100 * n / total:.2f}")
        for name, n in model.params_by_component.items()
        if n
    ]
    rows.append(("total", f"{total:,}", "100.00"))
    if model.spec.is_moe:
        from introspect.params import active_parameter_count

        active = active_parameter_count(model.spec)
        rows.append(("active per token", f"{active:,}", f"{100 * active / total:.2f}"))
    body = report.table(rows, ["component", "parameters", "%"], colalign=("left", "right", "right"))
    return "parameters (exact)\n" + _indent(body)


def _estimates_section(spec: ModelSpec, setup: TrainingSetup, results: dict[str, Breakdown]) -> str:
    unit = "decimal GB" if report.display_unit() == "GB" else "GiB"
    head = f"training memory for {report.setup_line(setup)} ({unit})"
    if setup.images:
        from introspect.vision import describe

        head += "\n  images: " + describe(spec, setup)
    parts = [head]
    for name, b in results.items():
        if not isinstance(b, Breakdown):
            continue
        sm = report.summary(b)
        rows = [
            (simplified.TERM_NAMES.get(term, term), report.gb(value)) for term, value in b.items()
        ]
        rows.append(("weights + backward values", report.gb(sm["weights_and_backward_bytes"])))
        rows.append(("saved activations", report.gb(sm["activations_bytes"])))
        rows.append(("total", report.gb(sm["total_bytes"])))
        label = b.label or name
        parts.append(
            label + "\n" + _indent(report.table(rows, ["term", "GB"], colalign=("left", "right")))
        )
    if "refined" in results:
        from introspect.commands import _divergence_view as view

        parts.append(view.refined_section(results["refined"]))
        if setup.implementation != "reference":
            parts.append(peak_section(results["refined"]))
        rows_ = divergence.rows(results["simplified"], results["refined"])
        parts.append(view.divergence_section(rows_, divergence.flags(spec, setup)))
    return "\n\n".join(parts)


def peak_section(est: RefinedEstimate) -> str:
    """What makes the peak, in the names ``measure`` prints for a real step: the
    tracker's categories, then the saved activations by census term and each transient,
    largest first."""
    from introspect.refined.causes import (
        TRACKER_CATEGORIES,
        census_term,
        tracker_category,
        tracker_phase,
    )

    by_category: dict[str, int] = dict.fromkeys(TRACKER_CATEGORIES, 0)
    saved: dict[str, int] = {}
    transients: dict[str, int] = {}
    for term, value in est.execution.items():
        kind = tracker_category(term)
        by_category[kind] += value
        if kind == "activations":
            saved[census_term(term)] = saved.get(census_term(term), 0) + value
        elif kind == "temporary" and value:
            transients[term] = value
    cats = ", ".join(f"{k} {report.gb(v)}" for k, v in by_category.items() if v)
    rows = [(f"saved  {k}", report.gb(v)) for k, v in sorted(saved.items(), key=lambda kv: -kv[1])]
    rows += [(f"transient  {k}", report.gb(v)) for k, v in transients.items()]
    body = report.table(rows, ["tensor (census / tracker names)", "GB"], colalign=("left", "right"))
    named = tracker_phase(est.peak_phase, est.execution.meta.get("framework", "torch"))
    return (
        f"peak: {est.peak_phase} (the tracker's {named}), {report.gb(est.total)} GB "
        f"(as the tracker counts it: {cats})\n" + _indent(body)
    )


def render_list(as_json: bool) -> str:
    """The bundled reference models as a table (or JSON)."""
    from introspect.adapters import bundled

    models = bundled.models()
    if as_json:
        return report.dumps({"bundled": [m.to_dict() for m in models]})
    rows = [
        (m.hub_id, m.model_type, f"{m.parameters:,}", "yes" if m.tied else "no") for m in models
    ]
    body = report.table(
        rows,
        ["hub id", "model_type", "exact parameters", "tied"],
        colalign=("left", "left", "right", "left"),
    )
    return f"{body}\n\nbundled with the package; profile any of them offline by hub id."


def _indent(text: str, by: str = "  ") -> str:
    return "\n".join(by + line if line else line for line in text.splitlines())
