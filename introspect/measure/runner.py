"""Run one measurement for a (spec, setup, device, implementation) and lay it beside the
estimates: the glue that ``introspect measure`` and ``benchmarks/accuracy.py`` share."""

from __future__ import annotations

from dataclasses import dataclass

from introspect import _record, report
from introspect.measure.compare import Comparison, compare
from introspect.measure.supported import MLX_STEPS
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec


@dataclass(frozen=True)
class Row:
    comparison: Comparison
    #: The saved-tensor census (torch), or None.
    census: object | None = None
    spec: ModelSpec | None = None


def measure(
    spec: ModelSpec,
    setup: TrainingSetup,
    *,
    device: str = "cpu",
    impl: str = "reference",
    census: bool = True,
    repeats: int = MLX_STEPS,
    phases: bool = True,
    config: tuple[dict, str] | None = None,
    overrides: dict | None = None,
):
    """One Measurement and the census (or ``None``) for the setup's framework and
    implementation; ``repeats`` measured steps on MLX (the largest peak is reported),
    and with ``phases`` the MLX gradients-only peak that places the step's peak.

    ``config`` is the raw config dict and where it came from, for the implementations'
    own classes (:func:`introspect.measure.hf_models.source_config`); without it they are
    built from a Llama config of ``spec``."""
    from introspect.refined.implementations import resolve_attention

    setup = resolve_attention(spec, setup)  # --attention left out: the class's own
    if spec.unmodelled and impl != "transformers":
        from introspect.unmodelled import NotModelled, parts

        raise NotModelled(
            f"not modelled: {parts(spec)}; the {impl} implementation would be another "
            "architecture: measure transformers' own class (--framework torch --impl transformers)"
        )
    if setup.framework.startswith("mlx") and device == "fake" and setup.finetune != "full":
        from introspect.measure import mlx_lm_models, mlx_lora_dry_run

        raw, where = config or mlx_lm_models.llama_source(spec)
        return mlx_lora_dry_run.dry_run(raw, where, spec, setup), None
    if setup.framework.startswith("mlx") and device == "fake":
        from introspect.measure import mlx_replay

        return mlx_replay.dry_run(spec, setup, impl=impl), None
    if setup.framework.startswith("mlx"):
        from introspect.measure import mlx_step

        compiled = setup.framework == "mlx_compiled"
        if impl == "mlx_lm":
            from introspect.measure import mlx_lm_models

            return mlx_lm_models.measure(
                *(config or mlx_lm_models.llama_source(spec)),
                spec,
                setup,
                compiled=compiled,
                repeats=repeats,
                phases=phases,
                overrides=overrides,
            ), None
        return mlx_step.measure_reference(
            spec, setup, compiled=compiled, repeats=repeats, phases=phases
        ), None
    if impl == "transformers":
        from introspect.measure import hf_models

        raw, where = config or hf_models.source_config(None, spec)
        return hf_models.measure(
            raw, where, spec, setup, device=device, census=census, overrides=overrides
        )
    if setup.finetune != "full":
        from introspect.errors import IntrospectError

        raise IntrospectError(
            f"--finetune {setup.finetune} on torch is measured on transformers' classes with "
            "peft's LoRA: add --impl transformers"
        )
    from introspect.measure import torch_step

    if device == "fake":
        from introspect.measure.census import Census
        from introspect.measure.fake import dry_run

        m = dry_run(spec, setup, census=census)
        return m, Census(terms=dict(m.census)) if census else None
    model = torch_step.build_reference(spec, setup, device)
    m = torch_step.measure_step(model, setup, vocab=spec.vocab_size, device=device, loop=setup.loop)
    saved = torch_step.run_census(model, setup, spec, device, loop=setup.loop) if census else None
    if saved is not None:
        m = _record.replace(m, census=saved.terms)
    return m, saved


def run_one(
    spec: ModelSpec,
    setup: TrainingSetup,
    *,
    device: str = "cpu",
    impl: str = "reference",
    census: bool = True,
    repeats: int = MLX_STEPS,
    phases: bool = True,
    config: tuple[dict, str] | None = None,
    overrides: dict | None = None,
) -> Row:
    """Measure (with the census on torch, when asked) and compare with both estimates.

    mlx-lm's models always call ``mx.fast.scaled_dot_product_attention``, so their setup
    is memory-efficient attention whatever was asked (and the row says so)."""
    from introspect.refined.implementations import resolve_attention

    setup = resolve_attention(spec, setup)  # resolved once: the row and the estimate agree
    notes: tuple[str, ...] = ()
    if impl == "mlx_lm" and setup.attention != "memory_efficient":
        setup = setup.replace(attention="memory_efficient")
        notes = ("mlx-lm's models always use memory-efficient attention (mx.fast SDPA)",)
    m, saved = measure(
        spec,
        setup,
        device=device,
        impl=impl,
        census=census and not setup.framework.startswith("mlx"),
        repeats=repeats,
        phases=phases,
        config=config,
        overrides=overrides,
    )
    if notes:
        m = _record.replace(m, notes=m.notes + notes)
    return Row(compare(spec, setup, m), saved, spec)


def to_json(spec: ModelSpec, impl: str, rows: list[Row]) -> dict:
    if spec.unmodelled:  # the estimates do not apply (introspect.unmodelled)
        from introspect.unmodelled import measured_json

        return measured_json(spec, impl, rows)
    return {
        "spec": spec.to_dict(),
        "implementation": impl,
        "rows": [
            r.comparison.to_json()
            | {
                "quadratic_saved_per_layer": getattr(r.census, "quadratic_per_layer", None),
                "census_by_module": r.census.by_module() if r.census is not None else None,
            }
            for r in rows
        ],
    }


def _setup_fields(d: dict) -> dict:
    from introspect._record import field_names

    names = set(field_names(TrainingSetup))
    return {k: v for k, v in d.items() if k in names}


def _versions(versions: dict[str, str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in versions.items() if k in ("torch", "mlx"))


def _ratio(x: float | None) -> str:
    return "" if x is None else f"{x:.3f}"


def render(spec: ModelSpec, impl: str, rows: list[Row]) -> str:
    if spec.unmodelled:  # the estimates do not apply (introspect.unmodelled)
        from introspect.unmodelled import render_measured

        return render_measured(spec, impl, rows)
    first = rows[0].comparison.measurement
    trainable = first.trainable_params
    trained = "" if trainable in (None, first.n_params) else f", {trainable:,} trained"
    head = (
        f"{spec.source or spec.model_type}: N = {first.n_params:,} parameters{trained} "
        f"({first.implementation or impl} implementation), L={spec.num_hidden_layers}, "
        f"d={spec.hidden_size}, h={spec.num_attention_heads}, kv={spec.kv_heads}, "
        f"V={spec.vocab_size}, {spec.norm}, {spec.ffn} FFN\n"
        f"{first.framework} on {first.device}"
        + f" ({_versions(first.versions)})"
        + f"; {first.setup.get('precision')}, {first.setup.get('optimizer')}, "
        f"{first.setup.get('attention')} attention"
        + (f" ({first.setup['attention_origin']})" if first.setup.get("attention_origin") else "")
        + _grad_accum(first.setup)
        + _trainer(first)
    )
    table_rows = []
    for r in rows:
        c, m = r.comparison, r.comparison.measurement
        table_rows.append(
            (
                m.setup["batch_size"],
                m.setup["seq_len"],
                report.gb(m.peak_bytes),
                report.gb(c.simplified.total),
                _ratio(c.simplified_ratio),
                report.gb(c.refined.total) if c.refined is not None else "n/a",
                _ratio(c.refined_ratio),
                f"{m.peak_phase or 'n/a'} / {c.refined_phase or 'n/a'}",
                "" if m.step_seconds is None else f"{m.step_seconds:.2f}",
                "" if m.tokens_per_second is None else f"{m.tokens_per_second:,.0f}",
            )
        )
    body = report.table(
        table_rows,
        [
            "B",
            "T",
            "measured GB",
            "simplified GB",
            "meas/simp",
            "refined GB",
            "meas/ref",
            "peak in (meas/ref)",
            "step s",
            "tokens/s",
        ],
        colalign=("right",) * 7 + ("left", "right", "right"),
    )
    parts = [head, "", body]
    last = rows[-1]
    parts += [
        "",
        f"at the measured peak, B={last.comparison.measurement.setup['batch_size']} "
        f"T={last.comparison.measurement.setup['seq_len']} (GB):",
        _categories(last),
    ]
    if last.census is not None:
        parts += [
            "",
            "saved for backward (autograd's census) beside the estimates (GB):",
            _census(last),
        ]
    if last.comparison.largest_gap:
        name, gap = last.comparison.largest_gap
        parts += ["", f"largest gap: {name}, measured − estimate = {report.gb(gap)} GB"]
    parts += [f"note: {n}" for n in last.comparison.notes + last.comparison.measurement.notes]
    parts += allocator_lines(last.comparison.measurement.allocator_replay)
    return "\n".join(parts)


def allocator_lines(replays: dict) -> list[str]:
    """The dry run's stream through torch's caching-allocator model, per device."""
    from introspect.allocator.replay import LABEL

    out = []
    for device, r in replays.items():
        out += [
            "",
            f"caching allocator replay of the step's {r['events']:,} events on {device}, "
            f"{r['steps']} steps ({LABEL}):",
        ]
        for key in ("expandable_off", "expandable_on"):
            x = r[key]
            fail = x["failure"]
            out.append(
                f"  expandable_segments {'on ' if x['expandable_segments'] else 'off'}: "
                f"allocated peak {report.gb(x['allocated_peak_bytes'])} GB, reserved peak "
                f"{report.gb(x['reserved_peak_bytes'])} GB, fragmentation "
                f"{report.gb(x['fragmentation_bytes'])} GB at the reserved peak "
                f"({x['reserved_peak_phase'] or 'before the step'}), reserved − allocated "
                f"peaks {report.gb(x['peaks_gap_bytes'])} GB"
                + (f"; first failure: {fail['bytes']:,} bytes in {fail['phase']}" if fail else "")
            )
    if out:
        out.append(
            "  (each storage is a request rounded as torch rounds it; the state that existed "
            "before the step is allocated first, in registration order, then the step twice, "
            "the second meeting the first's cache; kernels' own workspaces are not in the "
            "stream)"
        )
    return out


def _categories(r: Row) -> str:
    from introspect.measure.compare import by_category

    m, c = r.comparison.measurement, r.comparison
    est = by_category(c.refined if c.refined is not None else c.simplified)
    simple = by_category(c.simplified)
    rows = []
    for name, value in m.categories.items():
        rows.append(
            (
                name,
                report.gb(value),
                report.gb(simple.get(name, 0)),
                report.gb(est.get(name, 0)) if c.refined is not None else "n/a",
            )
        )
    rows.append(
        (
            "total",
            report.gb(m.category_total()),
            report.gb(c.simplified.total),
            report.gb(c.refined.total) if c.refined is not None else "n/a",
        )
    )
    if m.active_bytes is not None:
        rows.append(("active after step", report.gb(m.active_bytes), "", ""))
        rows.append(("cache after step", report.gb(m.cache_bytes or 0), "", ""))
    return report.table(
        rows,
        ["category", "measured", "simplified", "refined"],
        colalign=("left", "right", "right", "right"),
    )


def _census(r: Row) -> str:
    from introspect.measure.compare import refined_saved

    c = r.comparison
    setup = TrainingSetup(**_setup_fields(c.measurement.setup))
    refined = refined_saved(r.spec, setup) if r.spec is not None else None
    rows = []
    for term, value in r.census.seed_terms().items():
        rows.append(
            (
                term,
                report.gb(value, 4),
                report.gb(c.simplified.sum(term), 4),
                report.gb(refined.sum(term), 4) if refined is not None else "n/a",
            )
        )
    rows.append(
        (
            "total saved",
            report.gb(r.census.total, 4),
            report.gb(c.simplified.sum("activations"), 4),
            report.gb(refined.sum("activations"), 4) if refined is not None else "n/a",
        )
    )
    return report.table(
        rows,
        ["term", "census", "simplified", "refined saved set"],
        colalign=("left", "right", "right", "right"),
    )


def _trainer(m) -> str:
    """The header's words for a step run by a trainer (``measure --trainer``): which,
    and its version."""
    trainer = m.setup.get("trainer", "loop")
    if trainer == "loop":
        return ""
    if trainer == "trl":
        return f"\nstepped by TRL {m.versions.get('trl', '?')} SFTTrainer (trainer.train())"
    version = m.versions.get("transformers", "?")
    return f"\nstepped by transformers {version} Trainer (trainer.train())"


def _grad_accum(setup: dict) -> str:
    """The header's words for gradient accumulation (none without it)."""
    m = setup.get("grad_accum", 1)
    return f", {m} micro-batches per optimizer step (--grad-accum)" if m > 1 else ""
