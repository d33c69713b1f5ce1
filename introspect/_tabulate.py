"""``tabulate.tabulate``, imported without the package-metadata read its import makes.

tabulate/__init__.py (0.9, 0.10) begins with::

    from importlib.metadata import version as _version, PackageNotFoundError
    try:
        __version__ = _version("tabulate")
    except _PackageNotFoundError:
        __version__ = "unknown"

Importing ``importlib.metadata`` (it pulls in ``email``, ``zipfile``, ``csv``) and
scanning ``sys.path`` for tabulate's dist-info costs about as much as the interpreter's own
start, on every closed-form command, for a ``__version__`` string nothing here reads. So
while tabulate is imported, and only if nobody has imported ``importlib.metadata`` yet, a
stand-in module answers that one import by raising ``PackageNotFoundError``; tabulate takes
its own fallback (``__version__ = "unknown"``), and the stand-in is removed, so a later
``import importlib.metadata`` gets the real module.
"""

from __future__ import annotations

import sys
import types
from typing import Any

_METADATA = "importlib.metadata"


def _import_tabulate() -> types.ModuleType:
    if "tabulate" in sys.modules or _METADATA in sys.modules:
        import tabulate

        return tabulate
    stand_in = types.ModuleType(_METADATA, "stand-in while tabulate imports (introspect)")

    class PackageNotFoundError(ModuleNotFoundError):
        pass

    def version(name: str) -> str:
        raise PackageNotFoundError(name)

    stand_in.PackageNotFoundError = PackageNotFoundError
    stand_in.version = version
    sys.modules[_METADATA] = stand_in
    try:
        import tabulate
    finally:
        if sys.modules.get(_METADATA) is stand_in:
            del sys.modules[_METADATA]
        importlib = sys.modules["importlib"]
        if getattr(importlib, "metadata", None) is stand_in:
            del importlib.metadata
    return tabulate


def tabulate(*args: Any, **kwargs: Any) -> str:
    """:func:`tabulate.tabulate` itself (same arguments, same output)."""
    return _import_tabulate().tabulate(*args, **kwargs)
