"""Memos for one estimate: the execution layer asks the same questions many times.

One refined estimate builds several moments (forward end, the lm_head's and each
candidate layer's backward, the embedding's backward, the optimizer step), and each
moment asks again for the state, the saved activations of every layer, one layer's
saved set, the parameters of one block, … — pure functions of ``(spec, setup)``, a
few dozen calls of each per estimate, several hundred per ``introspect fit``.
:func:`per_estimate` answers the repeated calls from a memo while a :func:`scope` is
open (:func:`introspect.refined.execution_estimate` opens one; ``fit`` one around its
whole search, over one spec).

Why it gives the same answer as calling the function again:

* the memoised functions are pure: they read their arguments and module constants
  only, and :class:`~introspect.spec.ModelSpec`, :class:`~introspect.setup.TrainingSetup`
  and :class:`~introspect.layers.LayerKind` are frozen records (:mod:`introspect._record`);
* a memo lives only while its scope is open (one estimate, one search), so nothing
  outlives the call: a constant changed between two calls is read by the next one;
* keys are the arguments' identities (``id``), which costs nothing to hash, and the memo
  keeps the arguments themselves, so no other object can take one of those ids while the
  memo lives; a call with equal but distinct objects is computed again (never wrong);
* a dict or list answer is copied on the way out, so a caller that changes its answer
  changes nothing cached (the values are ints and tuples).

Without an open scope a memoised function is the plain function.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

TYPE_CHECKING = False  # typing's flag without importing typing (see introspect._record)
if TYPE_CHECKING:
    from typing import Any, TypeVar

    F = TypeVar("F", bound=Callable[..., Any])

_MEMO: ContextVar[dict | None] = ContextVar("introspect_estimate_memo", default=None)


@contextmanager
def scope() -> Iterator[None]:
    """Memoise :func:`per_estimate` functions until the block ends (an open scope is
    kept: the outermost one decides how long answers live)."""
    if _MEMO.get() is not None:
        yield
        return
    token = _MEMO.set({})
    try:
        yield
    finally:
        _MEMO.reset(token)


def per_estimate(fn: F) -> F:
    """``fn`` answered from the open scope's memo (calls with keyword arguments are
    not memoised)."""

    @functools.wraps(fn)
    def memoised(*args: Any, **kwargs: Any) -> Any:
        memo = _MEMO.get()
        if memo is None or kwargs:
            return fn(*args, **kwargs)
        key = (fn, *map(id, args))
        hit = memo.get(key)
        if hit is None:
            hit = memo[key] = (args, fn(*args))  # the args keep their ids taken
        value = hit[1]
        kind = type(value)
        return kind(value) if kind is dict or kind is list else value

    return memoised  # type: ignore[return-value]
