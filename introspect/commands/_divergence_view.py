"""Text sections for the refined estimate and the divergence table (used by
``introspect profile``): both refined layers, then the seed-vs-refined rows and the
features found. Decimal GB."""

from __future__ import annotations

from introspect import report
from introspect._tabulate import tabulate
from introspect.divergence import Divergence, Flag
from introspect.refined import RefinedEstimate
from introspect.units import GB, scaled

#: Characters of cause text per line before it wraps.
CAUSE_WIDTH = 72


def _indent(text: str, by: str = "  ") -> str:
    return "\n".join(by + line if line else line for line in text.splitlines())


def refined_section(est: RefinedEstimate) -> str:
    """The architecture layer (term, GB) and the execution layer (term, GB, cause) with
    its peak phase and every phase's total."""
    arch = est.architecture
    rows = [(term, report.gb(value)) for term, value in arch.items()]
    rows.append(("total", report.gb(arch.total)))
    arch_text = report.table(rows, ["term", "GB"], colalign=("left", "right"))
    exe = est.execution
    rows = [(term, report.gb(value), exe.notes.get(term, "")) for term, value in exe.items()]
    rows.append(("total (peak)", report.gb(exe.total), ""))
    exe_text = report.table(rows, ["term", "GB", "why"], colalign=("left", "right", "left"))
    unit = report.display_unit()
    phases = ", ".join(f"{name} {report.gb(v)} {unit}" for name, v in est.phases.items())
    return (
        f"{arch.label}: the seed's bookkeeping for the real architecture\n"
        + _indent(arch_text)
        + f"\n\n{exe.label}: what the framework holds at its peak\n"
        + f"  peak phase: {est.peak_phase} (phases: {phases})\n"
        + _indent(exe_text)
    )


def divergence_section(rows: list[Divergence], flags: list[Flag]) -> str:
    """Every diverging term with its kind, the GB it diverges from and to, the delta and
    the cause; then the features found. An architecture row goes from the seed to the
    architecture layer; an execution row from the architecture layer to what the
    framework holds, so the deltas add up from the seed's total to the peak."""
    cells = [
        (
            r.term,
            r.kind,
            report.gb(r.simplified_bytes),
            report.gb(r.baseline_bytes),
            report.gb(r.refined_bytes),
            ("+" if r.delta_bytes >= 0 else "") + scaled(r.delta_bytes, GB, 3),
            r.cause,
        )
        for r in rows
    ]
    body = tabulate(
        cells,
        headers=["term", "kind", "seed GB", "from GB", "to GB", "delta GB", "cause"],
        tablefmt="simple",
        disable_numparse=True,
        colalign=("left", "left", "right", "right", "right", "right", "left"),
        maxcolwidths=[None, None, None, None, None, None, CAUSE_WIDTH],
    )
    found = "\n".join(f"  - {f.name}: {f.detail}" for f in flags) or "  (none: the seed's block)"
    return (
        "divergence: seed vs refined. architecture rows: seed → architecture layer; "
        "execution rows: architecture layer → what the framework holds at its peak\n"
        + _indent(body)
        + "\n\nfeatures\n"
        + found
    )
