"""The optimizer in backward: one optimizer per parameter, stepped by its gradient's hook.

As torch's tutorial "How to save memory by fusing the optimizer step into the backward
pass" and torchtune's ``register_optim_in_bwd_hooks`` (``torchtune/training/memory.py``)
write it::

    optim = {p: torch.optim.Adam([p]) for p in model.parameters()}
    def step(p):
        optim[p].step()
        optim[p].zero_grad()      # set_to_none: the gradient is freed at once
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(step)

so each parameter is updated as soon as autograd has accumulated its gradient, and at
most one parameter's gradient exists (the closed form: :mod:`introspect.refined.offload`).
:class:`InBackward` is that dict with the few parts of an optimizer's interface the
measured step and its tracker read: the state of every parameter, step hooks on every
inner optimizer (so the live-storage tracker files what a step makes as optimizer state),
``zero_grad``, and a ``step`` that does nothing (the hooks ran the update).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch


class _Handles:
    """The removable handles of one hook registered on every inner optimizer."""

    def __init__(self, handles: list[Any]) -> None:
        self.handles = handles

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


class InBackward:
    """One optimizer per trainable parameter (``make([p])``), each stepped and its
    gradient set to None by the parameter's post-accumulate-grad hook."""

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        make: Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer],
    ) -> None:
        self.optimizers = {p: make([p]) for p in params}
        self._hooks = [p.register_post_accumulate_grad_hook(self._step) for p in self.optimizers]

    def _step(self, p: torch.Tensor) -> None:
        optimizer = self.optimizers[p]
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    @property
    def state(self) -> dict:
        """Every parameter's state, as one optimizer's ``state`` maps them."""
        return {p: s for o in self.optimizers.values() for p, s in o.state.items()}

    @property
    def param_groups(self) -> list[dict]:
        return [g for o in self.optimizers.values() for g in o.param_groups]

    def register_step_pre_hook(self, hook: Callable) -> _Handles:
        return _Handles([o.register_step_pre_hook(hook) for o in self.optimizers.values()])

    def register_step_post_hook(self, hook: Callable) -> _Handles:
        return _Handles([o.register_step_post_hook(hook) for o in self.optimizers.values()])

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.optimizers.values():
            o.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        """Nothing: each parameter was stepped inside backward."""
