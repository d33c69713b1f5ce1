"""``--expandable-segments`` and ``PYTORCH_CUDA_ALLOC_CONF`` for the closed-form commands.

The allocator's settings are read as torch reads them (:func:`config.from_environ`:
``PYTORCH_CUDA_ALLOC_CONF``, else ``PYTORCH_ALLOC_CONF``), and the command says that it
did; ``--expandable-segments`` sets ``expandable_segments:True`` over them. Not a field
of the training setup (the step's tensors do not change, only how the device holds
them), so its one contradiction — MLX, which has no CUDA allocator — is checked here.
"""

from __future__ import annotations

import argparse
import os

from introspect.allocator.config import (
    ENV_NAMES,
    AllocatorConfig,
    from_environ,
    with_expandable,
)
from introspect.errors import IntrospectError


def add_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--expandable-segments",
        action="store_true",
        help="torch's caching allocator with expandable_segments:True (as "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True): the reserve it leaves at the "
        "peak; the environment's PYTORCH_CUDA_ALLOC_CONF is read as torch reads it",
    )


def resolve(args: argparse.Namespace, framework: str) -> tuple[AllocatorConfig, list[str]]:
    """The allocator config for this call and the notes saying where it came from."""
    wanted = getattr(args, "expandable_segments", False)
    if wanted and framework.startswith("mlx"):
        raise IntrospectError(
            "--expandable-segments is torch's CUDA caching allocator's setting: MLX has no "
            "such allocator (its buffer cache keeps freed buffers); drop it or use "
            "--framework torch"
        )
    if framework.startswith("mlx"):
        name = next((n for n in ENV_NAMES if n in os.environ), None)
        unused = f"{name} is set, but MLX has no CUDA caching allocator: not used"
        return AllocatorConfig(), [unused] if name else []
    cfg, name = from_environ(os.environ)
    from introspect.overhead import module_loading

    module_loading(os.environ)  # a value CUDA does not take is refused before any work
    notes = []
    if name is not None:
        notes.append(f"read {name}={cfg.text!r} from the environment, as torch would")
    if wanted:
        if name is not None and not cfg.expandable_segments:
            notes.append("--expandable-segments sets expandable_segments:True over it")
        cfg = with_expandable(cfg, True)
    return cfg, notes
