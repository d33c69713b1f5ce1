"""Which TrainingSetups a measured step can run, for every backend alike.

A measured step is one dtype throughout (FP32, BF16 or FP16), Adam/AdamW/SGD, one device, no
checkpointing, no ZeRO, the standard cross-entropy. Anything else is one clear line.
"""

from __future__ import annotations

from introspect.errors import IntrospectError
from introspect.setup import TrainingSetup

MEASURED_PRECISIONS = ("fp32", "bf16")
MEASURED_DTYPES = ("fp32", "bf16", "fp16")
MEASURED_OPTIMIZERS = ("adam", "adamw", "sgd", "sgd_momentum")


def measured_dtype(setup: TrainingSetup, backend: str) -> str:
    """The one dtype name (``fp32``, ``bf16`` or ``fp16``) a measured step on ``backend`` runs in;
    raises IntrospectError naming the flag for a setup no backend measures."""
    if setup.precision not in MEASURED_PRECISIONS:
        raise IntrospectError(
            f"--precision {setup.precision} is not measured on {backend}; use fp32 or bf16"
        )
    if setup.activation_checkpointing or setup.devices != 1 or setup.zero_stage:
        raise IntrospectError(
            "measured steps run on one device without checkpointing or ZeRO; "
            "drop --checkpointing/--devices/--zero"
        )
    if setup.optimizer not in MEASURED_OPTIMIZERS:
        raise IntrospectError(
            f"--optimizer {setup.optimizer} is not measured on {backend}; "
            "use adam, adamw, sgd or sgd-momentum"
        )
    if setup.cross_entropy != "standard":
        raise IntrospectError("measured steps use the standard cross-entropy loss")
    name = "bf16" if setup.precision == "bf16" else setup.weights_dtype
    if name not in MEASURED_DTYPES:
        raise IntrospectError(f"weights dtype {name!r} is not measured; use fp32, bf16 or fp16")
    return name
