"""Whether a step's allocation stream is wanted, and what to replay it with.

``measure --device fake`` (torch) asks for it around its dry run; every other measure
leaves it off, so its tracker records nothing (:class:`LiveStorageTracker` ``record``).
A context variable rather than one more argument through every step builder: the
reference, transformers and peft steps all reach ``torch_step.measure_step``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from introspect.allocator.config import AllocatorConfig

_WANTED: ContextVar[tuple[AllocatorConfig, int | None] | None] = ContextVar(
    "introspect_allocator_replay", default=None
)


def for_command(args):
    """For ``measure``: a torch dry run records its allocation stream and replays it
    with the ``PYTORCH_CUDA_ALLOC_CONF`` of this environment (read as torch reads it, and
    said so on stderr); any other measure records nothing. A context-manager factory."""
    import functools
    import os
    import sys

    from introspect.allocator import config

    if args.device != "fake" or getattr(args, "framework", "torch") != "torch":
        return contextlib.nullcontext
    cfg, name = config.from_environ(os.environ)
    if name is not None:
        print(f"read {name}={cfg.text!r} from the environment, as torch would", file=sys.stderr)
    return functools.partial(replaying, cfg, None)


def wanted() -> tuple[AllocatorConfig, int | None] | None:
    """The config and capacity to replay with, or None (record nothing)."""
    return _WANTED.get()


@contextmanager
def replaying(cfg: AllocatorConfig, capacity: int | None = None) -> Iterator[None]:
    """Inside: steps record their stream and replay it with ``cfg`` at ``capacity``."""
    token = _WANTED.set((cfg, capacity))
    try:
        yield
    finally:
        _WANTED.reset(token)


#: Steps replayed: the second meets the cache the first left, as a training loop's does.
STEPS = 2


def summarize(streams: dict[str, list[tuple]], cfg: AllocatorConfig, capacity: int | None) -> dict:
    """Per device: the replay of :data:`STEPS` steps with expandable segments off and on
    (JSON-ready)."""
    from introspect.allocator.replay import both

    out = {}
    for device, events in streams.items():
        off, on = both(events, cfg, capacity, STEPS)
        out[device] = {
            "events": len(events),
            "steps": STEPS,
            "expandable_off": off.to_json(),
            "expandable_on": on.to_json(),
        }
    return out
