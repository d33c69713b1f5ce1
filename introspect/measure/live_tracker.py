"""Live tensor-storage tracking whose cost is linear in the step's operations.

torch's ``MemTracker`` (torch/distributed/_tools/mem_tracker.py, torch 2.13) keeps, after
every operation, the peak of every module seen so far (``_update_peak_stats`` walks
``memory_tracking``: ops × modules, quadratic in the layer count for a whole step) and
deep-copies snapshots at every module hook; importing it loads FSDP. We read only the
global peak, what was alive by kind at that moment, and which phase it fell in, so
this tracker keeps only those, with MemTracker's rules for what counts and how:

* every untyped storage counts once, ``nbytes`` (rounded up to 512 bytes on CUDA, the
  caching allocator's minimum block, as ``_WeakRefInfo._calculate_mem_consumed``), from
  its first sight until it is freed (a weakref callback on the storage, as MemTracker);
* a storage is first seen as an operation's output (``__torch_dispatch__``), or is
  registered before the step: the model's parameters (``Parameter``), buffers
  (``Buffer``), gradients (``Gradient``) and the optimizer's state (``Optstate``);
* an output's kind is ``Optstate`` inside ``optimizer.step()``, ``Temp`` in backward
  (``torch._C._current_graph_task_id() != -1``, ModTracker's ``is_bw``) unless a module
  is being recomputed there (activation checkpointing: ``Activation``), else
  ``Activation``;
* a parameter's gradient is relabelled ``Gradient`` when autograd computes it and after
  it is accumulated (``register_hook`` and ``register_post_accumulate_grad_hook``), and
  the optimizer's state ``Optstate`` after each step, as MemTracker's hooks do;
* the phase of an operation is optimizer inside ``optimizer.step()`` and after backward
  (what runs between them prepares the update: a mixed step's FP32 master gradients),
  backward while autograd's engine runs, else forward;
* the peak is checked after every operation, per device; the snapshot is copied only
  when a device's live total rises above its peak.

``tests/test_live_tracker.py`` checks the peak and every kind against MemTracker to the
byte on the same step; ``tests/test_memtracker.py`` does so around ``measure``'s own step
of each family's transformers class (MemTracker entered around it, the same operations).

Issue 25's GPT-2 gap (5.065 GB here, 5.140 GB by MemTracker, FP32 eager T=1024) was two
steps, not two meters: around the same step both read 5,064,896,096 bytes, and around the
other both read 5,140,393,568. ``measure`` builds with ``use_cache=False``
(:func:`introspect.measure.hf_models.build`, as the HF Trainer sets it); the other step
kept GPT2Config's ``use_cache=True``, so ``DynamicLayer.update``
(``transformers/cache_utils.py``) ``torch.cat``-copies K and V, the attention saves the
copies, and Q — a view of ``c_attn``'s fused output — still keeps that storage: 2·B·T·d·4
bytes a layer, 75,497,472 over GPT-2's 12 layers, the whole gap. Both meters count a
storage once however many views share it (MemTracker's ``_track`` and
``_update_and_maybe_create_winfos`` key ``get_untyped_storages(t)``).

Not handled (MemTracker handles them; no measured step uses them):
``UntypedStorage.resize_`` outside an operation, DTensor.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass

#: MemTracker's ``_MemRefType`` values, the kinds a storage can have.
KINDS = ("Parameter", "Buffer", "Gradient", "Activation", "Temp", "Optstate", "Other")

#: CUDA's caching allocator rounds every block up to this (c10/cuda/CUDACachingAllocator.cpp).
CUDA_MIN_BLOCK = 512


def _graph_task_id() -> int:
    return torch._C._current_graph_task_id()


def _storages(t: torch.Tensor):
    """The untyped storages behind ``t`` (a wrapper subclass's inner tensors' storages)."""
    if is_traceable_wrapper_subclass(t):
        names, _ = t.__tensor_flatten__()
        for name in names:
            inner = getattr(t, name)
            if isinstance(inner, torch.Tensor):
                yield from _storages(inner)
        return
    yield t.untyped_storage()


class LiveStorageTracker(TorchDispatchMode):
    """Track one step of ``model`` and ``optimizer``; read :attr:`peak_bytes`,
    :attr:`peak_kinds` and :attr:`peak_phase` afterwards.

    :attr:`marks` holds the live bytes when each phase (``forward``, ``backward``,
    ``optimizer``) first ran an operation, and ``end`` when the tracker exited.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None,
        external: Iterable[torch.Tensor] = (),
        *,
        record: bool = False,
    ) -> None:
        super().__init__()
        #: With ``record``: the ordered allocation stream of the tracked step, per device
        #: (:meth:`stream`); off by default, so other measures pay nothing for it.
        self.record = record
        self.events: list[tuple] = []
        self._serial = 0
        self._phase = "state"
        self.model, self.optimizer = model, optimizer
        #: Tensors outside the model and the optimizer's state that exist before the step
        #: (a mixed-precision step's FP32 master copy), counted as ``Other`` as
        #: MemTracker's ``track_external`` counts them.
        self.external = list(external)
        # id(storage) -> [bytes, kind, device, weakref]
        self._live: dict[int, list] = {}
        self._current: dict[torch.device, dict[str, int]] = {}
        self._peak: dict[torch.device, int] = {}
        self._peak_snap: dict[torch.device, dict[str, int]] = {}
        self._peak_phase: dict[torch.device, str | None] = {}
        self.marks: dict[str, int] = {}
        self._in_optimizer = False
        self._recomputing = 0
        self._handles: list[Any] = []
        # Storages moved to host memory (:meth:`to_host`): id -> [bytes, weakref].
        self._host: dict[int, list] = {}
        self.host_bytes = self.host_peak_bytes = 0
        self._register_state()

    # -- what is alive -------------------------------------------------------------------

    def _add(self, t: torch.Tensor, kind: str, relabel: bool) -> None:
        for st in _storages(t):
            entry = self._live.get(id(st))
            if entry is not None:
                size = st.nbytes()
                nbytes = _rounded(size, entry[2])
                if nbytes != entry[0]:  # resized inside an operation
                    if self.record:  # a resize is a new block: the old one freed
                        self._serial += 1
                        self.events.append(("free", entry[4], entry[2]))
                        self.events.append(("alloc", self._serial, size, self._phase, entry[2]))
                        entry[4] = self._serial
                    snap = self._current[entry[2]]
                    snap[entry[1]] += nbytes - entry[0]
                    snap["Total"] += nbytes - entry[0]
                    entry[0] = nbytes
                if relabel and entry[1] != kind:
                    snap = self._current[entry[2]]
                    snap[entry[1]] -= entry[0]
                    snap[kind] += entry[0]
                    entry[1] = kind
                if not relabel:
                    return  # MemTracker's _track stops at the first known storage
                continue
            device = t.device
            nbytes = _rounded(st.nbytes(), device)
            key = id(st)
            ref = weakref.ref(st, lambda _, key=key: self._free(key))
            self._live[key] = [nbytes, kind, device, ref]
            if self.record:
                self._serial += 1
                self._live[key].append(self._serial)
                self.events.append(("alloc", self._serial, st.nbytes(), self._phase, device))
            snap = self._current.get(device)
            if snap is None:
                snap = self._current[device] = dict.fromkeys(KINDS, 0) | {"Total": 0}
            snap[kind] += nbytes
            snap["Total"] += nbytes

    def _free(self, key: int) -> None:
        entry = self._live.pop(key, None)
        if entry is not None:
            if self.record:
                self.events.append(("free", entry[4], entry[2]))
            snap = self._current[entry[2]]
            snap[entry[1]] -= entry[0]
            snap["Total"] -= entry[0]

    def to_host(self, t: torch.Tensor) -> None:
        """``t`` now lives in host memory (activation offload's packed copy of a saved
        tensor): it leaves its device's count and is counted in :attr:`host_bytes` (and
        :attr:`host_peak_bytes`) until it is freed."""
        for st in _storages(t):
            key = id(st)
            entry = self._live.pop(key, None)
            if entry is not None:
                if self.record:
                    self.events.append(("free", entry[4], entry[2]))
                snap = self._current[entry[2]]
                snap[entry[1]] -= entry[0]
                snap["Total"] -= entry[0]
            if key in self._host:
                continue
            nbytes = st.nbytes()
            self._host[key] = [nbytes, weakref.ref(st, lambda _, key=key: self._host_free(key))]
            self.host_bytes += nbytes
            self.host_peak_bytes = max(self.host_peak_bytes, self.host_bytes)

    def _host_free(self, key: int) -> None:
        entry = self._host.pop(key, None)
        if entry is not None:
            self.host_bytes -= entry[0]

    def _register_state(self) -> None:
        """What exists before the step, as MemTracker's ``track_external(model, optimizer)``."""
        for p in self.model.parameters():
            self._add(p, "Parameter", relabel=True)
            if p.grad is not None:
                self._add(p.grad, "Gradient", relabel=True)
        for b in self.model.buffers():
            self._add(b, "Buffer", relabel=True)
        for t in self.external:
            self._add(t, "Other", relabel=True)
        self._relabel_optimizer_state()

    def _relabel_optimizer_state(self) -> None:
        if self.optimizer is None:
            return
        for state in self.optimizer.state.values():
            for value in state.values():
                if isinstance(value, torch.Tensor):
                    self._add(value, "Optstate", relabel=True)

    # -- hooks ---------------------------------------------------------------------------

    def _install_hooks(self) -> None:
        def on_grad(grad: torch.Tensor) -> None:
            self._add(grad, "Gradient", relabel=True)

        for p in self.model.parameters():
            if p.requires_grad:
                self._handles.append(p.register_hook(on_grad))
                # An optimizer in backward may have stepped and freed the gradient.
                self._handles.append(
                    p.register_post_accumulate_grad_hook(
                        lambda p: None if p.grad is None else on_grad(p.grad)
                    )
                )
        if self.optimizer is not None:

            def pre_step(*_: Any) -> None:
                self._in_optimizer = True

            def post_step(*_: Any) -> None:
                self._relabel_optimizer_state()
                self._in_optimizer = False

            self._handles.append(self.optimizer.register_step_pre_hook(pre_step))
            self._handles.append(self.optimizer.register_step_post_hook(post_step))

        def pre_forward(module: nn.Module, args: Any) -> None:
            if _graph_task_id() != -1:
                self._recomputing += 1

        def post_forward(module: nn.Module, args: Any, output: Any) -> None:
            if self._recomputing and _graph_task_id() != -1:
                self._recomputing -= 1

        hooks = torch.nn.modules.module
        self._handles.append(hooks.register_module_forward_pre_hook(pre_forward))
        self._handles.append(hooks.register_module_forward_hook(post_forward, always_call=True))

    def __enter__(self) -> LiveStorageTracker:
        self._backward_seen = False
        self._install_hooks()
        for device, snap in self._current.items():
            self._peak[device] = snap["Total"]
            self._peak_snap[device] = dict(snap)
            self._peak_phase[device] = None
        return super().__enter__()

    def __exit__(self, *args: Any) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self.marks["end"] = sum(s["Total"] for s in self._current.values())
        super().__exit__(*args)

    # -- every operation -----------------------------------------------------------------

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self._in_optimizer:
            kind, phase = "Optstate", "optimizer"
        elif _graph_task_id() != -1:
            kind, phase = ("Activation" if self._recomputing else "Temp"), "backward"
            self._backward_seen = True
        else:
            # After backward, outside the step: the update's own preparation (a mixed
            # step's FP32 master gradients), which the phase calls optimizer.
            kind, phase = "Activation", "optimizer" if self._backward_seen else "forward"
        if phase not in self.marks:
            self.marks[phase] = sum(s["Total"] for s in self._current.values())
        self._phase = phase
        self._add_outputs(out, kind)
        for device, snap in self._current.items():
            if snap["Total"] > self._peak.get(device, 0):
                self._peak[device] = snap["Total"]
                self._peak_snap[device] = dict(snap)
                self._peak_phase[device] = phase
        return out

    def _add_outputs(self, out: Any, kind: str) -> None:
        if isinstance(out, torch.Tensor):
            self._add(out, kind, relabel=False)
        elif isinstance(out, (tuple, list)):
            for item in out:
                self._add_outputs(item, kind)
        elif isinstance(out, dict):
            for item in out.values():
                self._add_outputs(item, kind)

    # -- results -------------------------------------------------------------------------

    @property
    def peak_bytes(self) -> int:
        """The peak live bytes, summed over devices (each device's own peak)."""
        return sum(self._peak.values())

    @property
    def peak_kinds(self) -> dict[str, int]:
        """Bytes by kind alive at each device's peak, summed over devices; they add up to
        :attr:`peak_bytes`."""
        out = dict.fromkeys(KINDS, 0)
        for snap in self._peak_snap.values():
            for kind in KINDS:
                out[kind] += snap[kind]
        return out

    @property
    def peak_phase(self) -> str | None:
        """``forward``, ``backward`` or ``optimizer`` for the device with the largest peak
        (``None``: the peak was what existed before the step)."""
        if not self._peak:
            return None
        return self._peak_phase[max(self._peak, key=self._peak.get)]

    def forward_begins(self) -> None:
        """A new forward pass of the model begins outside backward (the next step of a
        run of several, or the next micro-batch): its operations are ``forward`` again,
        not the previous update's preparation."""
        self._backward_seen = False

    def stream(self) -> dict[str, list[tuple]]:
        """The recorded events by device: ``("alloc", id, nbytes, phase)`` and
        ``("free", id)`` in the order they happened, ``nbytes`` the storage's own (the
        allocator rounds). What existed before the step comes first, in the order it was
        registered (phase ``state``); a storage resized inside an operation is a free and
        a new allocation."""
        out: dict[str, list[tuple]] = {}
        for event in self.events:
            out.setdefault(str(event[-1]), []).append(event[:-1])
        return out

    def live_bytes(self) -> int:
        """Bytes alive now, over devices."""
        return sum(s["Total"] for s in self._current.values())


def _rounded(nbytes: int, device: torch.device) -> int:
    if device.type == "cuda":
        return -(-nbytes // CUDA_MIN_BLOCK) * CUDA_MIN_BLOCK
    return nbytes


def storage_bytes(tensors) -> int:
    """Bytes of the distinct untyped storages behind ``tensors`` (views counted once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor):
            for st in _storages(t):
                seen[id(st)] = st.nbytes()
    return sum(seen.values())


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of every tensor in ``optimizer.state`` (Adam: m, v and the step counters)."""
    return storage_bytes(v for state in optimizer.state.values() for v in state.values())


def categories(kinds: dict[str, int], optimizer_state: int) -> dict[str, int]:
    """Kinds in :data:`introspect.measure.record.CATEGORIES`, summing to the same total.

    MemTracker's rule labels everything made inside ``optimizer.step()`` optimizer state,
    the update's temporaries too; the real state (``optimizer_state``, counted from
    ``optimizer.state``) stays ``optimizer_state`` and the rest becomes ``temporary``.
    """
    state = min(kinds.get("Optstate", 0), optimizer_state)
    return {
        "parameters": kinds.get("Parameter", 0) + kinds.get("Buffer", 0),
        "gradients": kinds.get("Gradient", 0),
        "optimizer_state": state,
        "activations": kinds.get("Activation", 0),
        "temporary": kinds.get("Temp", 0) + kinds.get("Optstate", 0) - state,
        "other": kinds.get("Other", 0),
    }
