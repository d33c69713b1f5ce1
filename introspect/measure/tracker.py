"""Live tensor-storage tracking for a torch step on CPU or in a dry run.

``torch.distributed._tools.mem_tracker.MemTracker`` (torch's own tool, a
TorchDispatchMode) counts every live untyped storage once — views share a storage and so
count once — and keeps the snapshot, by kind, of what was alive when the total peaked. It
works on CPU and under FakeTensorMode (checked against torch 2.13's source and by
``tests/test_measure_torch.py``). This module adds two things it lacks:

* the phase the peak fell in (forward, backward, optimizer), read from the tracker's own
  flags at the moment the peak rises;
* an honest optimizer split: MemTracker labels everything allocated inside
  ``optimizer.step()`` as optimizer state, including the update's temporaries. The real
  state (Adam's m, v and step counters) is counted from ``optimizer.state`` and the rest
  is reported as ``temporary``.

Its kinds map to :data:`introspect.measure.record.CATEGORIES`: Parameter and Buffer →
parameters, Gradient → gradients, Activation → activations (tensors made in forward),
Temp → temporary (made in backward before they become gradients), Optstate → optimizer
state + temporary.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed._tools.mem_tracker import MemTracker


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


class _NoHook:
    """Stands in for a hook handle MemTracker would remove."""

    def remove(self) -> None:
        pass


def storage_bytes(tensors) -> int:
    """Bytes of the distinct untyped storages behind ``tensors`` (views counted once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor):
            st = t.untyped_storage()
            seen[id(st) if _is_fake(t) else st.data_ptr()] = st.nbytes()
    return sum(seen.values())


def _is_fake(t: torch.Tensor) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, FakeTensor)


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of every tensor in ``optimizer.state`` (Adam: m, v and the step counters)."""
    tensors = [v for state in optimizer.state.values() for v in state.values()]
    return storage_bytes(tensors)


def categories_at_peak(tracker: PhaseMemTracker, optimizer_state: int) -> dict[str, int]:
    """The tracker's peak snapshot in our categories, summing to the tracker's peak."""
    snaps = tracker.get_tracker_snapshot("peak")
    out = dict.fromkeys(("parameters", "gradients", "optimizer_state", "activations"), 0)
    out.update(temporary=0, other=0)
    for dev_snap in snaps.values():
        for kind, value in dev_snap.items():
            name = getattr(kind, "value", kind)
            if name == "Total":
                continue
            if name in ("Parameter", "Buffer"):
                out["parameters"] += value
            elif name == "Gradient":
                out["gradients"] += value
            elif name == "Activation":
                out["activations"] += value
            elif name == "Temp":
                out["temporary"] += value
            elif name == "Optstate":
                state = min(value, optimizer_state)
                out["optimizer_state"] += state
                out["temporary"] += value - state
            else:
                out["other"] += value
    return out


def peak_total(tracker: MemTracker) -> int:
    """The tracker's peak, summed over devices."""
    snaps = tracker.get_tracker_snapshot("peak")
    return sum(s.get("Total", 0) for s in snaps.values())
