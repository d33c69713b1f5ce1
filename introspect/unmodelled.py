"""A stack or setup the closed form does not model: refused by the estimates, answered by
the dry run of the real class.

A spec with ``unmodelled`` parts (:func:`introspect.adapters.module_walk.unmodelled_parts`:
Jamba's and Nemotron-H's Mamba mixers as a build shows them, Qwen3.5's Gated
DeltaNet, DeepSeek-V2's latent attention as its build shows it, a pure state-space model
such as Mamba with no attention at all …) has no saved set the closed form could give: any
layer kind's would be another architecture's. So:

* the closed form refuses it in one line naming the model type, the parts and what it
  covers (:func:`check_closed_form`; ``table``, ``fit``);
* ``profile`` prints what is not modelled and answers from a dry run of transformers'
  own class at the user's setup (:func:`introspect.measure.answer.dry_run_answer`:
  ``measure --impl transformers --device fake``, FakeTensorMode, the step's exact live
  bytes on the CPU's kernels);
  without torch and transformers it says what to install;
* ``measure`` prints the measured step without the estimates (:func:`render_measured`).

An encoder (BERT) is not a decoder at all: :func:`introspect.adapters.hf_transformers.
refuse_encoder` refuses it before any of this, even for the dry run (its training is not
a causal LM's). A setup transformers' class itself refuses (Bloom has no SDPA path,
JetMoE cannot checkpoint: :func:`introspect.adapters.hf_transformers.class_refusal`) is
refused too, whatever the stack.
"""

from __future__ import annotations

from introspect import report
from introspect.adapters.families import covered as covered
from introspect.errors import IntrospectError
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

TYPE_CHECKING = False  # typing's flag without importing typing (see introspect._record)
if TYPE_CHECKING:
    from typing import Any

#: What to install for the dry-run answer.
INSTALL = "pip install 'introspect[torch,compare]'"


class NotModelled(IntrospectError):
    """The closed form does not model this stack or setup; the message says what."""


def parts(spec: ModelSpec) -> str:
    """The unmodelled parts, joined."""
    return "; ".join(spec.unmodelled)


def refusal(spec: ModelSpec) -> str:
    """The one line the closed form answers an unmodelled spec with."""
    where = spec.source or "the model"
    return (
        f"{where}: model_type {spec.model_type!r} is not modelled by the closed form "
        f"(not modelled: {parts(spec)}); {covered()}. `introspect profile` answers it from "
        "a dry run of the real class (`introspect measure --impl transformers --device fake`)"
    )


def check_closed_form(spec: ModelSpec, setup: TrainingSetup) -> None:
    """Everything that must hold before the closed form prices ``spec`` trained as
    ``setup``, one line for the first that does not: the stack is modelled
    (:class:`NotModelled`), transformers' class takes the setup (:func:`check_setup`),
    its positions reach T (:func:`introspect.positions.check_positions`), and the
    parallel degrees and model-dependent flags fit it
    (:func:`introspect.applies.check_model`). ``profile``, ``fit`` and ``table`` call it."""
    from introspect import applies
    from introspect.positions import check_positions

    if spec.unmodelled:
        raise NotModelled(refusal(spec))
    check_setup(spec, setup)
    check_positions(spec, setup)
    applies.check_model(spec, setup)


def check_setup(spec: ModelSpec, setup: TrainingSetup) -> None:
    """One line for a setup the implementation's class refuses (see the module docstring)."""
    from introspect.adapters import hf_transformers as hft

    why = hft.class_refusal(spec.model_type, setup)
    if why:
        raise NotModelled(f"{spec.source or spec.model_type}: {why}")


def can_dry_run() -> bool:
    """Whether torch and transformers are importable (found, not imported)."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))


def to_json(spec: ModelSpec, answer: dict[str, Any] | None) -> dict[str, Any]:
    """The flag every JSON output of an unmodelled spec carries."""
    return {
        "modelled": False,
        "unmodelled": list(spec.unmodelled),
        "answer": answer["answer"] if answer else None,
    }


def render_answer(spec: ModelSpec, answer: dict[str, Any]) -> str:
    """The dry run as profile's answer, saying what answers it."""
    cls = answer["implementation"]
    s = answer["setup"]
    cats = ", ".join(f"{k} {report.gb(v)}" for k, v in answer["categories"].items() if v)
    lines = [
        f"answered by the dry run of {cls} (FakeTensorMode: the real step's "
        "live bytes, nothing allocated; the closed form's estimates do not apply)",
        f"  B={s['batch_size']}, T={s['seq_len']}, {s['precision']}, {s['optimizer']} "
        f"({s['resolved_optimizer_impl'].replace('_', '-')}), {s['attention']} attention, "
        f"loop {s['loop']}, on the CPU's kernels",
        f"  peak {report.gb(answer['peak_bytes'])} GB ({answer['peak_bytes']:,} bytes) at "
        f"{answer['peak_phase']}",
        f"  at the peak: {cats}",
    ]
    from introspect.measure.fake_bounds import UPPER_BOUND

    lines += [f"  {n}" for n in answer.get("notes", ()) if n.startswith(UPPER_BOUND)]
    return "\n".join(lines)


def render_measured(spec: ModelSpec, impl: str, rows: list) -> str:
    """``measure`` of an unmodelled spec: the measured steps, no estimates."""
    first = rows[0].comparison.measurement
    head = (
        f"{spec.source or spec.model_type}: N = {first.n_params:,} parameters "
        f"({first.implementation or impl} implementation), L={spec.num_hidden_layers}, "
        f"d={spec.hidden_size}, V={spec.vocab_size}\n"
        f"{first.framework} on {first.device}; {first.setup.get('precision')}, "
        f"{first.setup.get('optimizer')}, {first.setup.get('attention')} attention\n"
        f"not modelled: {parts(spec)}; the closed form's estimates do not apply, so none "
        "is printed"
    )
    table_rows = []
    for r in rows:
        m = r.comparison.measurement
        table_rows.append(
            (
                m.setup["batch_size"],
                m.setup["seq_len"],
                report.gb(m.peak_bytes),
                m.peak_phase or "n/a",
                "" if m.step_seconds is None else f"{m.step_seconds:.2f}",
                "" if m.tokens_per_second is None else f"{m.tokens_per_second:,.0f}",
            )
        )
    body = report.table(
        table_rows,
        ["B", "T", "measured GB", "peak in", "step s", "tokens/s"],
        colalign=("right", "right", "right", "left", "right", "right"),
    )
    last = rows[-1].comparison.measurement
    cats = report.table(
        [(k, report.gb(v)) for k, v in last.categories.items()],
        ["category", "measured GB"],
        colalign=("left", "right"),
    )
    parts_ = [head, "", body, "", "at the measured peak (GB):", cats]
    parts_ += [f"note: {n}" for n in last.notes]
    return "\n".join(parts_)


def measured_json(spec: ModelSpec, impl: str, rows: list) -> dict[str, Any]:
    """``measure --json`` of an unmodelled spec: the measurements, no estimates."""
    return {
        "spec": spec.to_dict(),
        "implementation": impl,
        **to_json(spec, {"answer": "measured"}),
        "rows": [{"measurement": r.comparison.measurement.to_json()} for r in rows],
    }
