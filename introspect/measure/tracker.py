"""torch's own ``MemTracker`` with the phase of its peak: the reference the live-storage
tracker (:mod:`introspect.measure.live_tracker`, which measured steps use) is checked
against to the byte in ``tests/test_live_tracker.py``.

``torch.distributed._tools.mem_tracker.MemTracker`` (a TorchDispatchMode) counts every
live untyped storage once — views share a storage and so count once — and keeps the
snapshot, by kind, of what was alive when the total peaked; it works on CPU and under
FakeTensorMode. It lacks the phase the peak fell in (forward, backward, optimizer), which
this subclass reads from the tracker's own flags at the moment the peak rises. Importing
it loads torch._dynamo and FSDP (seconds), and its per-operation bookkeeping walks every
module seen so far, which is why measured steps no longer use it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed._tools.mem_tracker import MemTracker


class _NoHook:
    """Stands in for a hook handle MemTracker would remove."""

    def remove(self) -> None:
        pass


class PhaseMemTracker(MemTracker):
    """MemTracker that also records which phase the global peak fell in."""

    def __init__(self) -> None:
        super().__init__()
        self.peak_phase: str | None = None

    def track_external(self, *external: Any) -> None:
        """As MemTracker's, for models with frozen parameters too (LoRA's base):
        MemTracker puts a gradient hook on every parameter, which torch refuses for one
        that requires no gradient; those get a placeholder instead (they never have
        gradients to count)."""
        for obj in external:
            if isinstance(obj, torch.nn.Module):
                for p in obj.parameters():
                    if not p.requires_grad:
                        self._param_to_grad_hook_handles.setdefault(p, (_NoHook(), _NoHook()))
        super().track_external(*external)

    def _update_peak_stats(self, peak_state: Any) -> None:  # noqa: D401 - torch hook
        before = dict(self._peak_mem)
        super()._update_peak_stats(peak_state)
        if self._peak_mem != before:
            if self._in_opt:
                self.peak_phase = "optimizer"
            elif self._mod_tracker.is_bw:
                self.peak_phase = "backward"
            else:
                self.peak_phase = "forward"


def categories_at_peak(tracker: PhaseMemTracker, optimizer_state: int) -> dict[str, int]:
    """The tracker's peak snapshot (summed over devices) in our categories
    (:func:`introspect.measure.live_tracker.categories`, the same rule). The sharded step
    reads it: DDP's buckets are registered with MemTracker as ``Other``."""
    from introspect.measure.live_tracker import categories

    kinds: dict[str, int] = {}
    for dev_snap in tracker.get_tracker_snapshot("peak").values():
        for kind, value in dev_snap.items():
            name = getattr(kind, "value", kind)
            if name != "Total":
                kinds[name] = kinds.get(name, 0) + value
    return categories(kinds, optimizer_state)


def witness(model: torch.nn.Module, optimizer: Any, master: list[torch.Tensor]) -> PhaseMemTracker:
    """A MemTracker that knows the step's state as the live-storage tracker does
    (``track_external(model, optimizer, *master)``), for
    :func:`introspect.measure.torch_step.measure_step`'s ``witness``."""
    tracker = PhaseMemTracker()
    tracker.track_external(model, optimizer, *master)
    return tracker


def peak(tracker: PhaseMemTracker) -> tuple[int, dict[str, int]]:
    """MemTracker's peak (summed over devices) and the bytes of each kind alive then."""
    kinds: dict[str, int] = {}
    total = 0
    for dev_snap in tracker.get_tracker_snapshot("peak").values():
        for kind, value in dev_snap.items():
            name = getattr(kind, "value", kind)
            if name == "Total":
                total += value
            else:
                kinds[name] = kinds.get(name, 0) + value
    return total, kinds
