"""`introspect profile … --exact`: the closed form beside a dry run of the real class.

The dry run is :func:`introspect.measure.runner.run_one` under FakeTensorMode (exact live
bytes of the real step, nothing allocated): transformers' own class for a published
config (``--impl transformers``, the default on torch), our reference model otherwise.
Fake tensors are CPU tensors, so the step runs torch's CPU kernels; the optimizer runs
the implementation the setup resolves to (``foreach`` for ``--device cuda``), passed to
torch explicitly. A gap over :data:`TOLERANCE` names the category responsible.
"""

from __future__ import annotations

import argparse

from introspect import report
from introspect.errors import IntrospectError
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

TYPE_CHECKING = False  # typing's flag without importing typing (see introspect._record)
if TYPE_CHECKING:
    from typing import Any

#: The closed form's target against a real torch step (issue 9): within 3%.
TOLERANCE = 0.03


def add_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--exact",
        action="store_true",
        help="also run a dry run of the real class (torch FakeTensorMode: exact bytes, "
        "nothing allocated) and print it beside the closed form with their ratio",
    )


def dry_run(source: str, spec: ModelSpec, setup: TrainingSetup) -> dict[str, Any]:
    """The dry run's peak beside the refined estimate of the same (CPU-run) setup."""
    if setup.framework != "torch":
        raise IntrospectError("--exact runs a torch dry run; use --framework torch")
    if setup.finetune != "full" or setup.resolved_sharding != "none" or setup.devices > 1:
        raise IntrospectError(
            "--exact dry-runs one device's full training; drop --finetune, --devices and "
            "the sharding flags (introspect measure --devices D runs sharded steps)"
        )
    from introspect import applies

    applies.unmeasured(setup, "--exact")
    from introspect.measure import runner

    step_setup = setup.replace(device="cpu", optimizer_impl=setup.resolved_optimizer_impl)
    config = None
    if setup.implementation == "transformers":
        from introspect.measure.hf_models import precheck, source_config

        precheck(source)
        config = source_config(source, spec)
    row = runner.run_one(
        spec,
        step_setup,
        device="fake",
        impl=setup.implementation,
        census=False,
        config=config,
    )
    c = row.comparison
    m = c.measurement
    out = {
        "setup": step_setup.to_dict(),
        "peak_bytes": m.peak_bytes,
        "peak_phase": m.peak_phase,
        "categories": dict(m.categories),
        "refined_bytes": c.refined.total if c.refined is not None else None,
        "measured_over_refined": c.refined_ratio,
        "largest_gap": list(c.largest_gap) if c.largest_gap else None,
        "notes": list(m.notes),
    }
    return out


def render(exact: dict[str, Any]) -> str:
    ratio = exact["measured_over_refined"]
    lines = [
        f"exact: a dry run of the real step ({exact['setup']['implementation']}, loop "
        f"{exact['setup']['loop']}, on the CPU's kernels, "
        f"{exact['setup']['resolved_optimizer_impl'].replace('_', '-')} optimizer)",
        f"  dry run {report.gb(exact['peak_bytes'])} GB at {exact['peak_phase']}; refined "
        f"{report.gb(exact['refined_bytes'])} GB; dry run / refined "
        + (f"{ratio:.3f}" if ratio is not None else "n/a"),
    ]
    if ratio is not None and abs(ratio - 1) > TOLERANCE and exact["largest_gap"]:
        name, gap = exact["largest_gap"]
        lines.append(
            f"  over {TOLERANCE:.0%}: the largest gap is {name}, dry run − refined = "
            f"{report.gb(gap)} GB"
        )
    cats = ", ".join(f"{k} {report.gb(v)}" for k, v in exact["categories"].items() if v)
    lines.append(f"  at the dry run's peak: {cats}")
    return "\n".join(lines)
