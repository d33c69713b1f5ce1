"""The refined estimate: the seed's terms for the real model, in two layers.

* :mod:`~introspect.refined.architecture` — the seed's own bookkeeping (every tensor the
  forward pass produces, plus the persistent training state) for the real shapes. Equal
  to :func:`introspect.simplified.estimate`, term by term, for the seed's standard
  transformer. Holds on any framework.
* :mod:`~introspect.refined.execution` — what a framework actually holds at its peak for
  the :class:`~introspect.setup.TrainingSetup`: which tensors autograd keeps
  (:mod:`~introspect.refined.saved`, asked of the implementation that runs the step:
  :mod:`~introspect.refined.implementations`), FP32 upcasts, the attention kernel,
  checkpointing, the loss, precision, optimizer, sharding, and in which phase the peak
  falls.

:func:`estimate` is the entry point; it returns a :class:`RefinedEstimate`.
"""

from __future__ import annotations

from collections.abc import Iterable

from introspect._record import field, record
from introspect.breakdown import Breakdown
from introspect.refined import architecture, causes, execution, memo, model_parallel
from introspect.refined.implementations import resolve_attention
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

TYPE_CHECKING = False  # typing's flag without importing typing (see introspect._record)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["PHASES", "RefinedEstimate", "estimate", "execution_estimate"]

#: The phases the execution layer compares, in step order.
PHASES = ("forward_end", "backward", "optimizer_step")


@record
class RefinedEstimate:
    """Both refined layers for one model and setup.

    ``execution.meta`` holds ``peak_phase`` (one of :data:`PHASES`), ``phases`` (the
    total of each phase's largest moment, bytes) and ``framework``. ``causes`` maps each
    term of either layer to why it has the size it has.
    """

    architecture: Breakdown
    execution: Breakdown
    causes: dict[str, str] = field(default_factory=dict)

    @property
    def peak_phase(self) -> str:
        return self.execution.meta["peak_phase"]

    @property
    def phases(self) -> dict[str, int]:
        return dict(self.execution.meta["phases"])

    @property
    def total(self) -> int:
        """The execution total: the refined estimate of the peak."""
        return self.execution.total

    def to_json(self) -> dict[str, Any]:
        """``total_bytes`` (the execution peak), both layers as breakdowns, the peak
        phase and the per-phase totals."""
        return {
            "total_bytes": self.execution.total,
            "architecture_total_bytes": self.architecture.total,
            "execution_total_bytes": self.execution.total,
            "peak_phase": self.peak_phase,
            "phases": self.phases,
            "architecture": self.architecture.to_json(),
            "execution": self.execution.to_json(),
        }


def _mlx():
    """:mod:`introspect.refined.mlx`, imported where an MLX setup asks (a torch estimate
    never does)."""
    from introspect.refined import mlx

    return mlx


def _dora_note() -> str:
    from introspect.refined.mlx_dora import NOT_MODELLED

    return "; " + NOT_MODELLED


def execution_estimate(
    spec: ModelSpec,
    setup: TrainingSetup,
    *,
    layers: Iterable[int] | None = None,
    notes: bool = True,
) -> Breakdown:
    """The execution layer: every phase's moments built, the largest one returned as the
    breakdown (its terms sum to the peak), ``meta`` naming the phase. ``layers`` are the
    backward layers to build (:func:`execution.backward_moments`; default the candidates
    that can hold the peak). The moments share their pure sub-questions through one
    memo (:mod:`introspect.refined.memo`); MLX has moments of its own
    (:mod:`introspect.refined.mlx`: one lazy graph for forward, backward and update).
    ``notes=False`` leaves out the causes of the terms (:mod:`~introspect.refined.causes`)
    for a caller that reads the bytes only, such as the fit finder's search."""
    setup = resolve_attention(spec, setup)  # --attention left out: the implementation's
    why = _mlx().lora_not_derived(spec, setup) if setup.framework.startswith("mlx") else ""
    if why:  # no other structure's counts and no torch accounting stand in for it
        from introspect.unmodelled import NotModelled

        raise NotModelled(f"{spec.source or spec.model_type}: {why}")
    with memo.scope():
        candidates: list[tuple[str, dict[str, int]]] = []
        if setup.framework in ("mlx", "mlx_compiled") and _mlx().applies(setup, spec):
            candidates = _mlx().moments(spec, setup)
        elif setup.framework in ("mlx", "mlx_compiled") and _mlx().affine_bits(setup):
            candidates = _mlx().torch_moments(spec, setup)  # with the affine base's bytes
        else:
            candidates = execution.moments(spec, setup, layers)
    # Tensor/pipeline parallel: each moment on the largest model-parallel rank.
    candidates = [(ph, model_parallel.model_parallel(spec, setup, t)) for ph, t in candidates]
    totals = [sum(terms.values()) for _, terms in candidates]  # each moment summed once
    phases: dict[str, int] = {}
    for (phase, _), total in zip(candidates, totals, strict=True):
        phases[phase] = max(phases.get(phase, 0), total)
    phase, terms = candidates[max(range(len(totals)), key=totals.__getitem__)]  # the first
    terms, extra = execution.framework_extra(spec, setup, terms)
    if extra:
        phases = {k: v + extra for k, v in phases.items()}
    return Breakdown(
        terms,
        label=f"refined: execution ({setup.framework} on {setup.resolved_device}"
        + (
            "; torch's moments: MLX's full fine-tuning is derived with Adam or AdamW on "
            "one device only (mlx-lm's LoRA outside its counts gets no torch figure: the "
            "MLX dry run answers it)"
            if setup.framework in ("mlx", "mlx_compiled") and not _mlx().applies(setup, spec)
            else ""
        )
        + (_mlx().moe_note(spec, setup) if setup.framework in ("mlx", "mlx_compiled") else "")
        + (_dora_note() if setup.finetune == "dora" else "")
        + ")",
        notes=causes.causes(spec, setup, terms) if notes else {},
        meta={"peak_phase": phase, "phases": phases, "framework": setup.framework},
    )


def estimate(spec: ModelSpec, setup: TrainingSetup) -> RefinedEstimate:
    """The refined estimate of training ``spec`` as ``setup``: the architecture layer and
    the execution layer, with the causes of every term. Images (``--images``) lengthen
    the language model's sequence first (:func:`introspect.vision.language_setup`)."""
    from introspect.vision import language_setup

    setup = resolve_attention(spec, language_setup(spec, setup))
    arch = architecture.estimate(spec, setup)
    exe = execution_estimate(spec, setup)
    why = {f"architecture:{k}": v for k, v in arch.notes.items()}
    why.update({f"execution:{k}": v for k, v in exe.notes.items()})
    return RefinedEstimate(architecture=arch, execution=exe, causes=why)
