"""The dry run that answers for a stack the closed form does not model
(:mod:`introspect.unmodelled`): one step of transformers' own class under FakeTensorMode,
as ``introspect measure --impl transformers --device fake`` runs it."""

from __future__ import annotations

from introspect import unmodelled
from introspect.adapters.hf_transformers import model_class
from introspect.errors import IntrospectError
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
    try:
        m, _ = runner.measure(
            spec,
            step,
            device="fake",
            impl="transformers",
            census=False,
            config=source_config(source, spec),
        )
    except IntrospectError:
        raise
    except Exception as e:  # noqa: BLE001 - the class's own code fails; say where, in one line
        raise NotModelled(dry_run_failure(spec, e)) from e
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


def dry_run_failure(spec: ModelSpec, error: BaseException) -> str:
    """The one line for a dry run that transformers' class itself fails: the closed form
    does not model the stack, and the class's step raised under FakeTensorMode (a value
    read from a tensor, such as a routing count, is data-dependent there; a default config
    the class cannot run, such as DeepSeek-V2's ``num_experts_per_tok`` of None)."""
    text = " ".join(str(error).split())[:200] or type(error).__name__
    kind = (
        "it reads a tensor's value, which fake tensors do not have"
        if "DataDependent" in type(error).__name__
        else f"{type(error).__name__}: {text}"
    )
    where = spec.source or "the model"
    return (
        f"{where}: not modelled by the closed form (not modelled: {parts(spec)}), and the dry "
        f"run of transformers' own class failed in its step ({kind}); run "
        "`introspect measure --impl transformers --device cpu` at a small --seq for a real "
        "step, or --debug for the traceback"
    )
