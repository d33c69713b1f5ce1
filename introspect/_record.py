"""Frozen records: what ``@dataclass(frozen=True)`` gives the closed-form path, without
its start-up cost.

Every closed-form command builds the same dozen frozen classes (the spec, the setup, the
layer kinds, the breakdown, the fit finder's rows …). ``dataclasses`` costs a closed-form
command about a third of its own time before it computes anything: its import brings
:mod:`inspect` (with ``ast``, ``dis``, ``tokenize``: about 6 ms here), and each class's
``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__`` and ``__delattr__``
are generated as source and compiled (about 0.6 ms a class, 9 ms for the fourteen a
``fit`` builds). :func:`record` makes the same methods once, here, as plain functions
that read the class's field list, so a class costs microseconds to make.

What a class gets is ``dataclass(frozen=True)``'s behaviour for the features used here:

* fields are the class's annotations in order (inherited ones first); a class attribute
  is the default; :func:`field` gives a ``default_factory``; ``kw_only=True`` makes
  every field keyword-only, else fields are positional in order and a field without a
  default may not follow one with a default (``TypeError``, as ``dataclass`` raises);
* ``__init__`` sets the fields in the instance ``__dict__`` and calls
  ``__post_init__`` if the class has one (which may set fields through
  ``object.__setattr__``, as with a frozen dataclass);
* ``__eq__`` compares the fields of two instances of the same class, ``__hash__`` hashes
  them, ``__repr__`` shows them; assigning or deleting a field raises
  :class:`FrozenInstanceError`; ``functools.cached_property`` works (it writes the
  instance ``__dict__``; equality, hashing and :func:`asdict` read the fields only).

:func:`replace`, :func:`asdict` and :func:`field_names` stand for ``dataclasses``'
``replace``, ``asdict`` and ``fields``. No ``order``, ``slots``, ``InitVar`` or
``ClassVar`` handling: no class here uses them (a ``ClassVar`` annotation is refused
rather than taken for a field). The measuring package and the tests, which import torch
or MLX anyway, keep ``dataclasses``.
"""

from __future__ import annotations

from operator import attrgetter

TYPE_CHECKING = False  # typing's own flag, without importing typing (about 2 ms)
if TYPE_CHECKING:
    from typing import dataclass_transform
else:

    def dataclass_transform(**_):
        return lambda decorator: decorator


#: A field's default when it has none.
MISSING = object()


class FrozenInstanceError(AttributeError):
    """A field of a record was assigned or deleted (``dataclasses.FrozenInstanceError``)."""


class Field:
    """A field's name and default (``default`` or ``default_factory``; MISSING if none)."""

    __slots__ = ("name", "default", "default_factory")

    def __init__(self, name: str, default: object = MISSING, default_factory=MISSING) -> None:
        self.name = name
        self.default = default
        self.default_factory = default_factory

    @property
    def required(self) -> bool:
        return self.default is MISSING and self.default_factory is MISSING

    def __repr__(self) -> str:
        return f"Field({self.name!r})"


def field(*, default: object = MISSING, default_factory=MISSING):
    """A field's default given explicitly (``dataclasses.field``'s two arguments)."""
    if default is not MISSING and default_factory is not MISSING:
        raise ValueError("cannot specify both default and default_factory")
    return Field("", default, default_factory)


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def record(cls: type | None = None, /, *, kw_only: bool = False):
    """``@record`` or ``@record(kw_only=True)``: ``cls`` as a frozen record (above)."""

    def wrap(cls: type) -> type:
        return _make_record(cls, kw_only)

    return wrap if cls is None else wrap(cls)


def _make_record(cls: type, kw_only: bool) -> type:
    fields: dict[str, Field] = {}
    for base in reversed(cls.__mro__[1:]):
        fields.update(getattr(base, "__record_fields__", {}))
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():
        if "ClassVar" in str(annotation):
            raise TypeError(f"{cls.__name__}.{name}: ClassVar is not supported by record")
        value = cls.__dict__.get(name, MISSING)
        if isinstance(value, Field):
            value.name = name
            if value.default is MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, value.default)
            fields[name] = value
        else:
            fields[name] = Field(name, value)
    positional = () if kw_only else tuple(fields)
    seen_default = False
    for name in positional:
        if not fields[name].required:
            seen_default = True
        elif seen_default:
            raise TypeError(f"non-default argument {name!r} follows default argument")
    cls.__record_fields__ = fields
    cls.__init__ = _init(cls, tuple(fields.values()), positional)
    cls.__repr__ = _repr
    cls.__eq__ = _eq
    cls.__hash__ = _hash
    cls.__setattr__ = _setattr
    cls.__delattr__ = _delattr
    values = attrgetter(*fields) if len(fields) > 1 else (lambda self: (getattr(self, name),))
    cls._record_values = values
    return cls


def _init(cls: type, fields: tuple[Field, ...], positional: tuple[str, ...]):
    post_init = getattr(cls, "__post_init__", None)
    names = frozenset(f.name for f in fields)
    qualname = cls.__qualname__

    def __init__(self, *args, **kwargs) -> None:
        if len(args) > len(positional):
            raise TypeError(
                f"{qualname}.__init__() takes {len(positional) + 1} positional arguments "
                f"but {len(args) + 1} were given"
            )
        state = self.__dict__
        for name, value in zip(positional, args, strict=False):
            if name in kwargs:
                raise TypeError(f"{qualname}.__init__() got multiple values for {name!r}")
            state[name] = value
        given = len(args)
        for f in fields[given:] if given else fields:
            if f.name in kwargs:
                state[f.name] = kwargs[f.name]
            elif f.default is not MISSING:
                state[f.name] = f.default
            elif f.default_factory is not MISSING:
                state[f.name] = f.default_factory()
            else:
                raise TypeError(f"{qualname}.__init__() missing required argument {f.name!r}")
        if not names.issuperset(kwargs):
            unknown = sorted(set(kwargs) - names)
            raise TypeError(f"{qualname}.__init__() got unexpected keyword arguments {unknown}")
        if post_init is not None:
            post_init(self)

    __init__.__qualname__ = f"{qualname}.__init__"
    return __init__


def _repr(self) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__record_fields__)
    return f"{type(self).__qualname__}({shown})"


def _eq(self, other: object):
    if other.__class__ is not self.__class__:
        return NotImplemented
    return self._record_values(self) == other._record_values(other)


def _hash(self) -> int:
    return hash(self._record_values(self))


def _setattr(self, name: str, value: object) -> None:
    if name in type(self).__record_fields__:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")
    object.__setattr__(self, name, value)


def _delattr(self, name: str) -> None:
    if name in type(self).__record_fields__:
        raise FrozenInstanceError(f"cannot delete field {name!r}")
    object.__delattr__(self, name)


def is_record(obj: object) -> bool:
    """Whether ``obj`` is a record or a record class."""
    return hasattr(obj if isinstance(obj, type) else type(obj), "__record_fields__")


def field_names(obj: object) -> tuple[str, ...]:
    """The fields of a record or record class, in order."""
    cls = obj if isinstance(obj, type) else type(obj)
    return tuple(cls.__record_fields__)


def replace(obj, /, **changes):
    """A copy of the record ``obj`` with ``changes`` (``__post_init__`` runs again)."""
    unknown = set(changes) - set(obj.__record_fields__)
    if unknown:
        raise TypeError(f"{type(obj).__qualname__} has no field {sorted(unknown)[0]!r}")
    values = {name: getattr(obj, name) for name in obj.__record_fields__}
    values.update(changes)
    return type(obj)(**values)


def asdict(obj) -> dict:
    """The record's fields as a dict, records inside it (also in lists, tuples and dicts)
    turned into dicts too (``dataclasses.asdict``)."""
    return {name: _plain(getattr(obj, name)) for name in obj.__record_fields__}


def _plain(value):
    if is_record(value) and not isinstance(value, type):
        return asdict(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_plain(v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return type(value)((_plain(k), _plain(v)) for k, v in value.items())
    return value
