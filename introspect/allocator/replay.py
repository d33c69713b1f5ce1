"""Replay a recorded allocation stream through the caching-allocator model.

A stream is the ordered events one device saw: ``("alloc", key, nbytes, phase)`` (with
a fifth element, the CUDA stream the request is made on: 0, the default, when absent),
``("free", key)`` and ``("empty_cache",)``
(:class:`introspect.measure.live_tracker.LiveStorageTracker` records them with
``record=True``; :mod:`introspect.allocator.synthetic` builds them from the closed
form's tensors). :func:`replay` runs them through
:class:`~introspect.allocator.caching.CachingAllocator` and reads what
``torch.cuda.max_memory_allocated()`` / ``max_memory_reserved()`` would: the allocated
peak (blocks, each rounded by ``round_size``), the reserved peak, the fragmentation at the
reserved peak (reserved − allocated then), and, at a capacity, the first request that
would raise ``torch.OutOfMemoryError``. Every figure is derived from torch's source, not
measured on a GPU.
"""

from __future__ import annotations

from collections.abc import Iterable

from introspect._record import record
from introspect.allocator.caching import CachingAllocator, OutOfMemory
from introspect.allocator.config import AllocatorConfig, with_expandable

#: The label every figure of this package carries.
LABEL = "derived from torch's source, not measured on a GPU"


@record
class Failure:
    """The first request that did not fit: its index in the stream, bytes, phase, and
    what was allocated and reserved when it was asked."""

    index: int
    nbytes: int
    phase: str
    allocated: int
    reserved: int

    def to_json(self) -> dict:
        return {
            "index": self.index,
            "bytes": self.nbytes,
            "phase": self.phase,
            "allocated_bytes": self.allocated,
            "reserved_bytes": self.reserved,
        }


@record
class Replay:
    """What one replay read; ``failure`` is None when every request fit.

    ``fragmentation`` is reserved − allocated at the moment the reserved peak was reached
    (cached free blocks included: torch's "reserved by PyTorch but unallocated" then);
    ``max_memory_reserved() − max_memory_allocated()`` is ``reserved_peak −
    allocated_peak`` (``peaks_gap_bytes`` in JSON): the two peaks may fall at different
    moments."""

    expandable_segments: bool
    allocated_peak: int
    reserved_peak: int
    fragmentation: int
    peak_phase: str
    requests: int
    failure: Failure | None = None

    def to_json(self) -> dict:
        return {
            "expandable_segments": self.expandable_segments,
            "allocated_peak_bytes": self.allocated_peak,
            "reserved_peak_bytes": self.reserved_peak,
            "fragmentation_bytes": self.fragmentation,
            "reserved_peak_phase": self.peak_phase,
            "peaks_gap_bytes": self.reserved_peak - self.allocated_peak,
            "requests": self.requests,
            "failure": self.failure.to_json() if self.failure else None,
            "source": LABEL,
        }


def steps(events: list[tuple], count: int) -> list[tuple]:
    """``events`` as ``count`` training steps: what existed before the step (the leading
    ``state`` allocations) once, then the step's own events ``count`` times; before each
    repeat, what the previous one left alive is freed first, in the order it was made —
    as ``optimizer.zero_grad(set_to_none=True)`` frees the gradients at the start of a
    step (``torch_step.TrainStep``) — so a later step meets the cache the earlier left."""
    start = 0
    while start < len(events) and events[start][0] == "alloc" and events[start][3] == "state":
        start += 1
    prelude, body = events[:start], events[start:]
    out = list(prelude)
    alive: dict = {}
    for k in range(count):
        if k:
            out += [("free", key) for key in alive]
        alive = {}
        for e in body:
            key = (k, e[1])
            if e[0] == "alloc":
                out.append(("alloc", key, *e[2:]))
                alive[key] = None
            elif key in alive:
                out.append(("free", key))
                del alive[key]
            elif k == 0:  # a prelude storage the step frees (once: it is gone after)
                out.append(("free", e[1]))
    return out


def replay(events: Iterable[tuple], cfg: AllocatorConfig, capacity: int | None = None) -> Replay:
    """Run ``events`` through the allocator with ``cfg`` and ``capacity`` bytes (None: no
    limit). Stops at the first request that does not fit, as the step would."""
    alloc = CachingAllocator(cfg, capacity)
    live: dict = {}
    peak_reserved = frag = requests = 0
    peak_phase = ""
    failure = None
    for index, event in enumerate(events):
        if event[0] == "free":
            block = live.pop(event[1], None)
            if block is not None:
                alloc.free(block)
            continue
        if event[0] == "empty_cache":  # torch.cuda.empty_cache(): cached segments go back
            alloc.empty_cache()
            continue
        _, key, nbytes, phase = event[:4]
        requests += 1
        try:
            live[key] = alloc.malloc(nbytes, event[4] if len(event) > 4 else 0)
        except OutOfMemory as oom:
            failure = Failure(index, nbytes, phase, oom.allocated, oom.reserved)
            break
        if alloc.reserved > peak_reserved:
            peak_reserved, frag, peak_phase = (
                alloc.reserved,
                alloc.reserved - alloc.allocated,
                phase,
            )
    return Replay(
        cfg.expandable_segments,
        alloc.peak_allocated,
        max(peak_reserved, alloc.peak_reserved),
        frag,
        peak_phase,
        requests,
        failure,
    )


def both(
    events: list[tuple], cfg: AllocatorConfig, capacity: int | None = None, count: int = 1
) -> tuple[Replay, Replay]:
    """The replay with expandable segments off, then on (the rest of ``cfg`` kept), of
    ``count`` steps (:func:`steps`)."""
    if count > 1:
        events = steps(events, count)
    return (
        replay(events, with_expandable(cfg, False), capacity),
        replay(events, with_expandable(cfg, True), capacity),
    )
