"""Estimate beside measurement: both estimates for the measured setup, their ratios, and
the term most responsible for the gap.

The simplified estimate is :func:`introspect.simplified.estimate`; the refined one is
:func:`introspect.refined.estimate` (its ``execution`` Breakdown is the framework's peak
for the setup, so the setup carries the framework: ``torch``, ``mlx`` or
``mlx_compiled``). Where the refined estimate is not importable the comparison shows the
simplified one alone rather than inventing a figure.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from introspect import simplified
from introspect.breakdown import Breakdown
from introspect.measure.record import Measurement
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

#: Breakdown path prefixes → the Measurement category that holds them.
CATEGORY_OF_PREFIX = (
    ("weights", "parameters"),
    ("grads", "gradients"),
    ("optimizer", "optimizer_state"),
    ("activations", "activations"),
)


@dataclass(frozen=True)
class Comparison:
    measurement: Measurement
    simplified: Breakdown
    refined: Breakdown | None = None
    #: The refined estimate's peak phase, when it says.
    refined_phase: str | None = None
    #: (name, measured − estimated bytes) of the largest category or census-term gap.
    largest_gap: tuple[str, int] | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def simplified_ratio(self) -> float:
        return self.measurement.peak_bytes / self.simplified.total

    @property
    def refined_ratio(self) -> float | None:
        if self.refined is None or not self.refined.total:
            return None
        return self.measurement.peak_bytes / self.refined.total

    def to_json(self) -> dict:
        return {
            "measurement": self.measurement.to_json(),
            "simplified": self.simplified.to_json(),
            "refined": self.refined.to_json() if self.refined is not None else None,
            "measured_over_simplified": self.simplified_ratio,
            "measured_over_refined": self.refined_ratio,
            "refined_peak_phase": self.refined_phase,
            "largest_gap": (
                {"term": self.largest_gap[0], "measured_minus_estimate_bytes": self.largest_gap[1]}
                if self.largest_gap
                else None
            ),
        }


def refined_estimate(spec: ModelSpec, setup: TrainingSetup) -> Breakdown | None:
    """The refined estimate's execution layer (the framework's peak), or ``None`` while
    :mod:`introspect.refined` has no ``estimate``."""
    try:
        from introspect.refined import estimate
    except ImportError:
        return None
    from introspect.unmodelled import NotModelled

    try:
        result = estimate(spec, setup)
    except NotModelled:  # e.g. mlx-lm's LoRA where its counts are not derived: no figure
        return None
    return getattr(result, "execution", result)


#: Path components that mark a term as a transient, whatever its prefix
#: (``optimizer/temporaries`` is the update's scratch, not optimizer state).
TRANSIENT_PARTS = ("temporaries", "temporary", "transient", "workspace")


def refined_saved(spec: ModelSpec, setup: TrainingSetup) -> Breakdown | None:
    """What the refined estimate says autograd saves by the end of forward (its saved
    set), to lay beside the census; ``None`` where it is not available."""
    try:
        from introspect.refined.execution import saved_terms
    except ImportError:
        return None
    from introspect.vision import language_setup

    setup = language_setup(spec, setup)  # the language model's T_text + visual tokens
    return Breakdown(saved_terms(spec, setup), label="refined: saved for backward")


def category_of(term: str) -> str:
    if any(part in TRANSIENT_PARTS for part in term.split("/")):
        return "temporary"
    for prefix, category in CATEGORY_OF_PREFIX:
        if term == prefix or term.startswith(prefix + "/"):
            return category
    return "temporary"


def by_category(b: Breakdown) -> dict[str, int]:
    """A breakdown's terms summed into Measurement categories."""
    out: dict[str, int] = {}
    for name, value in b.items():
        key = category_of(name)
        out[key] = out.get(key, 0) + value
    return out


def largest_gap(m: Measurement, estimate: Breakdown) -> tuple[str, int] | None:
    """The category (or, for activations with a census, the seed term) whose measured
    bytes differ most from the estimate's.

    MLX cannot split gradients, activations and temporaries, so its ``other`` is compared
    with their sum in the estimate.
    """
    est = by_category(estimate)
    gaps: dict[str, int] = {}
    if m.backend == "mlx":
        lumped = sum(est.get(k, 0) for k in ("gradients", "activations", "temporary"))
        gaps["gradients+activations+temporary"] = m.categories.get("other", 0) - lumped
        for k in ("parameters", "optimizer_state"):
            gaps[k] = m.categories.get(k, 0) - est.get(k, 0)
    else:
        for k in ("parameters", "gradients", "optimizer_state", "activations", "temporary"):
            gaps[k] = m.categories.get(k, 0) - est.get(k, 0)
        gaps["temporary"] += m.categories.get("other", 0)
    if not gaps:
        return None
    name = max(gaps, key=lambda k: abs(gaps[k]))
    if name == "activations" and m.census:
        term = _largest_census_gap(m.census, estimate)
        if term is not None:
            return f"activations ({term[0]})", gaps[name]
    return name, gaps[name]


def _largest_census_gap(census: dict[str, int], estimate: Breakdown) -> tuple[str, int] | None:
    """The seed term whose saved bytes (census) differ most from the estimate's, with
    census − estimate bytes."""
    seeds = [k for k in simplified.TERM_NAMES if k.startswith("activations/")]
    seeds += ["activations/layer/residual", "activations/final_norm", "activations/inputs"]
    best: tuple[str, int] | None = None
    for term in seeds:
        saved = sum(v for k, v in census.items() if k == term or k.startswith(term + "/"))
        gap = saved - estimate.sum(term)
        if best is None or abs(gap) > abs(best[1]):
            best = (term.removeprefix("activations/"), gap)
    return best


def compare(spec: ModelSpec, setup: TrainingSetup, m: Measurement) -> Comparison:
    """Both estimates for ``setup`` (with the measured framework) beside ``m``."""
    setup = setup.replace(framework=m.framework)
    simple = simplified.estimate(spec, setup)
    refined = refined_estimate(spec, setup)
    from introspect.refined.causes import tracker_phase_of

    phase = tracker_phase_of(refined.meta, m.framework) if refined is not None else None
    gap = largest_gap(m, refined if refined is not None else simple)
    from introspect.refined.mlx import lora_not_derived

    why = lora_not_derived(spec, setup)
    return Comparison(m, simple, refined, phase, gap, notes=(why,) if why else ())
