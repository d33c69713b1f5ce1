"""Activation offload in the measured step: torch's ``save_on_cpu(pin_memory=True)``.

``torch.autograd.graph.save_on_cpu`` (``torch/autograd/graph.py``) is a pair of saved-tensor
hooks: every tensor autograd saves in forward is packed into a fresh host tensor
(``torch.empty(size, dtype, layout, pin_memory=…)`` then ``copy_``) and the device's is
freed once nothing else references it; in backward each node's saved tensors are unpacked
(``tensor.to(device)``: a device copy) when the node runs and freed after it. Every saved
tensor is packed, a parameter a matmul saves (its ``t()`` view) too, and a tensor saved by
two nodes twice.

On CPU and on the fake device the host and the device are one memory, where
``tensor.to("cpu")`` would return the host tensor itself; the step keeps the two apart as
CUDA does: the pack's copy is the host's (:meth:`~introspect.measure.live_tracker.
LiveStorageTracker.to_host` takes it out of the device's count) and the unpack makes the
device's copy (``clone``) that ``.to(cuda)`` makes.

torchtune's ``OffloadActivations`` (``torchtune/training/_activation_offloading.py``)
differs: it keeps on the device tensors under 1024 bytes, parameters and buffers, and the
output head's saved tensors (``get_act_offloading_ctx_manager``'s no-op around
``model.output``), and with CUDA streams up to ``max_fwd_stash_size`` (5) tensors whose
copy is in flight; those are not modelled here.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def save_on_host(device_type: str, on_host: Callable[[torch.Tensor], None] | None):
    """``save_on_cpu(pin_memory=True)``'s hooks, with ``on_host`` told of every packed
    tensor (the tracker's :meth:`to_host`; None when untracked)."""
    pinnable = device_type == "cuda" and torch.cuda.is_available()

    def pack(tensor: torch.Tensor) -> tuple[torch.device, torch.Tensor]:
        packed = torch.empty(
            tensor.size(), dtype=tensor.dtype, layout=tensor.layout, pin_memory=pinnable
        )
        packed.copy_(tensor, non_blocking=pinnable)
        if on_host is not None:
            on_host(packed)
        return tensor.device, packed

    def unpack(packed: tuple[torch.device, torch.Tensor]) -> torch.Tensor:
        device, tensor = packed
        if device.type == "cuda":
            return tensor.to(device, non_blocking=pinnable)
        return tensor.clone()  # the device's copy, as .to(cuda) makes it

    return torch.autograd.graph.saved_tensors_hooks(pack, unpack)
