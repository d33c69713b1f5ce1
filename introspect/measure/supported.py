"""Which TrainingSetups a measured step can run, for every backend alike.

A measured step runs on one device without ZeRO and with the standard cross-entropy.
torch measures every precision (``fp32``, ``bf16``, ``amp``, ``mixed``); MLX measures
``fp32`` and ``bf16``. Checkpointing is the implementation's own: transformers'
``gradient_checkpointing_enable`` (torch) or mlx-lm's ``grad_checkpoint`` (MLX), so it
needs ``--impl transformers`` or ``--impl mlx-lm``. Optimizers: Adam, AdamW, SGD (with
or without momentum), and on torch 8-bit Adam through bitsandbytes. Anything else is one
clear line naming the flag.
"""

from __future__ import annotations

from introspect.errors import IntrospectError
from introspect.setup import TrainingSetup

MEASURED_PRECISIONS = {"torch": ("fp32", "bf16", "amp", "mixed"), "MLX": ("fp32", "bf16")}
MEASURED_DTYPES = ("fp32", "bf16", "fp16")
MEASURED_OPTIMIZERS = {
    "torch": ("adam", "adamw", "sgd", "sgd_momentum", "adam8bit"),
    "MLX": ("adam", "adamw", "sgd", "sgd_momentum"),
}
#: Steps an MLX measurement takes after its warm-up, each with its own peak reset; the
#: largest peak is reported. A run's peak is its largest step's, and MLX's moves from one
#: step to the next with how far its worker thread runs behind the main thread (the
#: bounds ``mlx_replay`` replays): the reference model at T=256 peaked 4.6% lower on the
#: first step after the warm-up than on the later ones on an idle machine here, 5.2% on
#: a CI machine, and not at all under load. ``peak_samples`` keeps every step's peak.
MLX_STEPS = 3
#: The implementation whose own checkpointing a backend measures.
CHECKPOINTING_IMPL = {"torch": "transformers", "MLX": "mlx_lm"}


def measured_dtype(setup: TrainingSetup, backend: str) -> str:
    """The dtype name (``fp32``, ``bf16`` or ``fp16``) of the working weights of a
    measured step on ``backend``: BF16 under ``bf16`` and ``mixed`` precision, FP32 under
    ``amp`` (autocast runs over FP32 weights), else the weights dtype. Raises
    IntrospectError naming the flag for a setup ``backend`` does not measure."""
    precisions = MEASURED_PRECISIONS[backend]
    if setup.precision not in precisions:
        raise IntrospectError(
            f"--precision {setup.precision} is not measured on {backend}; use "
            + " or ".join(precisions)
        )
    if setup.devices != 1 or setup.zero_stage:
        raise IntrospectError("measured steps run on one device; drop --devices/--zero")
    if setup.activation_checkpointing and setup.implementation != CHECKPOINTING_IMPL[backend]:
        impl = CHECKPOINTING_IMPL[backend].replace("_", "-")
        raise IntrospectError(
            f"--checkpointing is measured with the implementation's own checkpointing on "
            f"{backend}: add --impl {impl}"
        )
    optimizers = MEASURED_OPTIMIZERS[backend]
    if setup.optimizer not in optimizers:
        raise IntrospectError(
            f"--optimizer {setup.optimizer} is not measured on {backend}; use "
            + ", ".join(o.replace("_", "-") for o in optimizers)
        )
    if setup.loop == "labels" and setup.implementation != "transformers":
        raise IntrospectError(
            "--loop labels needs a model that computes its own loss from labels=: "
            "--impl transformers (or use --loop logits)"
        )
    if setup.cross_entropy == "fused":
        raise IntrospectError(
            "--cross-entropy fused is the closed form's generic fused loss, which no "
            "library's code here runs; measure torchtune, trl or liger, or use "
            "`introspect profile` for the estimate alone"
        )
    if setup.cross_entropy != "standard" and setup.implementation != "transformers":
        raise IntrospectError(
            f"--cross-entropy {setup.cross_entropy} runs over a transformers class's "
            "backbone and lm_head: add --impl transformers (or drop --cross-entropy)"
        )
    if setup.precision in ("bf16", "mixed"):
        return "fp16" if setup.weights_dtype == "fp16" else "bf16"
    name = "fp32" if setup.precision == "amp" else setup.weights_dtype
    if name not in MEASURED_DTYPES:
        raise IntrospectError(f"weights dtype {name!r} is not measured; use fp32, bf16 or fp16")
    return name
