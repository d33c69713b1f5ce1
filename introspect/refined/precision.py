"""Bytes per working weight under a setup's precision, shared by
:mod:`introspect.refined.execution` and :mod:`introspect.refined.lora` (and the causes)."""

from __future__ import annotations

TYPE_CHECKING = False  # typing's flag without importing typing (see introspect._record)
if TYPE_CHECKING:
    from introspect.setup import TrainingSetup


def working_weight_bytes(setup: TrainingSetup) -> int:
    """Bytes per working weight: 2 under mixed or pure BF16 precision, else the
    weights dtype (FP32 by default)."""
    return 2 if setup.precision in ("mixed", "bf16") else setup.weight_bytes
