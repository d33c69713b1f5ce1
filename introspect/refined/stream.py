"""The residual stream's dtype in transformers' blocks, shared by
:mod:`introspect.refined.hf_saved` and :mod:`introspect.refined.saved_feed_forward`."""

from __future__ import annotations

TYPE_CHECKING = False  # typing's flag without importing typing (see introspect._record)
if TYPE_CHECKING:
    from introspect.setup import TrainingSetup

FP32 = 4


def is_amp(setup: TrainingSetup) -> bool:
    return setup.precision == "amp"


def residual_bytes(setup: TrainingSetup) -> int:
    """Bytes of the residual stream: FP32 under autocast (the embedding and the adds run
    in the weights' FP32), else the activation dtype."""
    return FP32 if is_amp(setup) else setup.activation_bytes
