"""Run one measurement for a (spec, setup, device, implementation) and lay it beside the
estimates: the glue that ``introspect measure`` and ``benchmarks/accuracy.py`` share."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from introspect import report
from introspect.measure.compare import Comparison, compare
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
    repeats: int = 1,
    phases: bool = True,
):
    """One Measurement (and the model, for a census) for the setup's framework;
    ``repeats`` measured steps on MLX (the largest peak is reported), and with
    ``phases`` the MLX gradients-only peak that places the step's peak."""
    if setup.framework.startswith("mlx") and device == "fake":
        from introspect.measure import mlx_replay

        return mlx_replay.dry_run(spec, setup, impl=impl), None
    if setup.framework.startswith("mlx"):
        from introspect.measure import mlx_step

        compiled = setup.framework == "mlx_compiled"
        if impl == "mlx_lm":
            from introspect.measure.implementations import mlx_lm_llama

            model = mlx_lm_llama(spec, mlx_step.check_setup(setup))
            return mlx_step.measure_step(
                model,
                setup,
                vocab=spec.vocab_size,
                compiled=compiled,
                implementation=impl,
                repeats=repeats,
                phases=phases,
            ), None
        return mlx_step.measure_reference(
            spec, setup, compiled=compiled, repeats=repeats, phases=phases
        ), None
    from introspect.measure import torch_step

    if device == "fake":
        from introspect.measure.fake import dry_run

        return dry_run(spec, setup, census=census), None
    if impl == "transformers":
        from introspect.measure.implementations import transformers_llama

        model = transformers_llama(spec, setup.attention, torch_step.check_setup(setup))
        model = model.to(device)
        m = torch_step.measure_step(
            model,
            setup,
            vocab=spec.vocab_size,
            device=device,
            forward=torch_step.hf_forward,
            implementation=impl,
        )
        return m, model
    model = torch_step.build_reference(spec, setup, device)
    return torch_step.measure_step(model, setup, vocab=spec.vocab_size, device=device), model


def run_one(
    spec: ModelSpec,
    setup: TrainingSetup,
    *,
    device: str = "cpu",
    impl: str = "reference",
    census: bool = True,
    repeats: int = 1,
    phases: bool = True,
) -> Row:
    """Measure, take the census (torch, when asked), compare with both estimates.

    mlx-lm's Llama always calls ``mx.fast.scaled_dot_product_attention``, so its setup
    is memory-efficient attention whatever was asked (and the row says so)."""
    notes: tuple[str, ...] = ()
    if impl == "mlx_lm" and setup.attention != "memory_efficient":
        setup = setup.replace(attention="memory_efficient")
        notes = ("mlx-lm's Llama always uses memory-efficient attention (mx.fast SDPA)",)
    m, model = measure(
        spec, setup, device=device, impl=impl, census=census, repeats=repeats, phases=phases
    )
    if notes:
        m = dataclasses.replace(m, notes=m.notes + notes)
    saved = None
    if census and model is not None:
        from introspect.measure import torch_step

        forward = torch_step.hf_forward if impl == "transformers" else torch_step.reference_forward
        saved = torch_step.run_census(model, setup, spec, device, forward)
        m = dataclasses.replace(m, census=saved.terms)
    elif census and m.census:  # a dry run took its census inside FakeTensorMode
        from introspect.measure.census import Census

        saved = Census(terms=dict(m.census))
    del model
    return Row(compare(spec, setup, m), saved, spec)


def to_json(spec: ModelSpec, impl: str, rows: list[Row]) -> dict:
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
    import dataclasses as dc

    names = {f.name for f in dc.fields(TrainingSetup)}
    return {k: v for k, v in d.items() if k in names}


def _versions(versions: dict[str, str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in versions.items() if k in ("torch", "mlx"))


def _ratio(x: float | None) -> str:
    return "" if x is None else f"{x:.3f}"


def render(spec: ModelSpec, impl: str, rows: list[Row]) -> str:
    first = rows[0].comparison.measurement
    head = (
        f"{spec.source or spec.model_type}: N = {rows[0].comparison.measurement.n_params:,} "
        f"parameters ({impl} implementation), L={spec.num_hidden_layers}, "
        f"d={spec.hidden_size}, h={spec.num_attention_heads}, kv={spec.kv_heads}, "
        f"V={spec.vocab_size}, {spec.norm}, {spec.ffn} FFN\n"
        f"{first.framework} on {first.device}"
        + f" ({_versions(first.versions)})"
        + f"; {first.setup.get('precision')}, {first.setup.get('optimizer')}, "
        f"{first.setup.get('attention')} attention"
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
    parts += [f"note: {n}" for n in last.comparison.measurement.notes]
    return "\n".join(parts)


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
