"""``tabulate.tabulate``, imported without the two imports of its own that a closed-form
command pays for and never uses.

tabulate/__init__.py (0.9, 0.10) begins with::

    from importlib.metadata import version as _version, PackageNotFoundError
    try:
        __version__ = _version("tabulate")
    except _PackageNotFoundError:
        __version__ = "unknown"
    ...
    import dataclasses

* Importing ``importlib.metadata`` (it pulls in ``email``, ``zipfile``, ``csv``) and
  scanning ``sys.path`` for tabulate's dist-info costs about as much as the
  interpreter's own start, for a ``__version__`` string nothing here reads.
* ``dataclasses`` imports :mod:`inspect` (with ``ast``, ``dis``, ``tokenize``: about
  6 ms), for the one check tabulate makes on every call — ``dataclasses.is_dataclass``
  of the first row — and ``dataclasses.fields`` when a row is one. (introspect's own
  records are not dataclasses: :mod:`introspect._record`.)

So while tabulate is imported, and only for a module nobody has imported yet, a stand-in
answers the import:

* ``importlib.metadata``'s raises ``PackageNotFoundError`` from ``version``; tabulate
  takes its own fallback (``__version__ = "unknown"``).
* ``dataclasses``' answers ``is_dataclass`` itself, with the standard library's own
  definition (the class has ``__dataclass_fields__``), and hands every other name to the
  real ``dataclasses``, imported then: a table of dataclass rows is laid out exactly as
  before, at the cost of that import.

Both stand-ins leave ``sys.modules`` when tabulate's import ends, so a later import
gets the real module.
"""

from __future__ import annotations

import sys
import types

TYPE_CHECKING = False  # typing's flag without importing typing (see introspect._record)
if TYPE_CHECKING:
    from typing import Any

_METADATA = "importlib.metadata"
_DATACLASSES = "dataclasses"


def _metadata_stand_in() -> types.ModuleType:
    stand_in = types.ModuleType(_METADATA, "stand-in while tabulate imports (introspect)")

    class PackageNotFoundError(ModuleNotFoundError):
        pass

    def version(name: str) -> str:
        raise PackageNotFoundError(name)

    stand_in.PackageNotFoundError = PackageNotFoundError
    stand_in.version = version
    return stand_in


def _dataclasses_stand_in() -> types.ModuleType:
    stand_in = types.ModuleType(_DATACLASSES, "tabulate's view of dataclasses (introspect)")

    def is_dataclass(obj: object) -> bool:
        """``dataclasses.is_dataclass``, as the standard library defines it."""
        cls = obj if isinstance(obj, type) else type(obj)
        return hasattr(cls, "__dataclass_fields__")

    def real(name: str) -> object:  # PEP 562: every other name from the real module
        import importlib

        return getattr(importlib.import_module(_DATACLASSES), name)

    stand_in.is_dataclass = is_dataclass
    stand_in.__getattr__ = real
    return stand_in


def _import_tabulate() -> types.ModuleType:
    if "tabulate" in sys.modules:
        import tabulate

        return tabulate
    stand_ins = {
        name: make()
        for name, make in ((_METADATA, _metadata_stand_in), (_DATACLASSES, _dataclasses_stand_in))
        if name not in sys.modules
    }
    sys.modules.update(stand_ins)
    try:
        import tabulate
    finally:
        for name, stand_in in stand_ins.items():
            if sys.modules.get(name) is stand_in:
                del sys.modules[name]
        importlib = sys.modules["importlib"]
        if _METADATA in stand_ins and getattr(importlib, "metadata", None) is stand_ins[_METADATA]:
            del importlib.metadata
    return tabulate


def tabulate(*args: Any, **kwargs: Any) -> str:
    """:func:`tabulate.tabulate` itself (same arguments, same output)."""
    return _import_tabulate().tabulate(*args, **kwargs)
