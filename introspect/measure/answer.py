"""The dry run that answers for a stack the closed form does not model
(:mod:`introspect.unmodelled`): one step of transformers' own class under FakeTensorMode,
as ``introspect measure --impl transformers --device fake`` runs it."""

from __future__ import annotations

from introspect import unmodelled
from introspect.adapters.hf_transformers import model_class
from introspect.measure import runner
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec
from introspect.unmodelled import INSTALL, NotModelled, check_setup, parts, refusal

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def dry_run_answer(source: str, spec: ModelSpec, setup: TrainingSetup) -> dict[str, Any]:
    """The answer for an unmodelled ``spec``: one step of transformers' class for the
    source's config under FakeTensorMode at ``setup`` (on the CPU's kernels, the
    optimizer implementation the setup resolves to), its peak and categories.

    Raises :class:`NotModelled` (one line) without torch and transformers, and for a
    setup the dry run does not take (MLX, LoRA, several devices) or the class refuses."""
    if not unmodelled.can_dry_run():
        raise NotModelled(f"{refusal(spec)}; that needs torch and transformers: {INSTALL}")
    if setup.framework != "torch" or setup.implementation != "transformers":
        raise NotModelled(
            f"not modelled: {parts(spec)}; the answer is a dry run of transformers' torch "
            "class: use --framework torch (and the default --impl transformers)"
        )
    if setup.finetune != "full" or setup.resolved_sharding != "none" or setup.devices > 1:
        raise NotModelled(
            f"not modelled: {parts(spec)}; the dry run that answers it is one device's "
            "full training: drop --finetune, --devices and the sharding flags"
        )
    check_setup(spec, setup)
    from introspect.measure.hf_models import source_config

    step = setup.replace(device="cpu", optimizer_impl=setup.resolved_optimizer_impl)
    m, _ = runner.measure(
        spec,
        step,
        device="fake",
        impl="transformers",
        census=False,
        config=source_config(source, spec),
    )
    cls = model_class(spec.model_type, wrapper=bool(spec.tower_parameters))
    return {
        "answer": "dry_run",
        "implementation": f"transformers' {cls.__name__}" if cls else "transformers' class",
        "setup": step.to_dict(),
        "peak_bytes": m.peak_bytes,
        "peak_phase": m.peak_phase,
        "categories": dict(m.categories),
        "notes": list(m.notes),
    }
