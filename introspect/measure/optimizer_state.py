"""The optimizer's state, created at its real shapes and dtypes without a warm-up step.

A measured step must start with the optimizer's state in place (the seed measures "after
the Adam state has been created"). A warm-up forward, backward and step creates it, at
the cost of a whole step; here it is made directly, as the optimizer's own lazy
initialisation would on its first step:

* ``torch.optim.Adam`` / ``AdamW`` (torch/optim/adam.py, ``Adam._init_group``; AdamW
  subclasses Adam): per parameter ``step`` — a 0-d tensor, on CPU in
  ``_get_scalar_dtype()`` (FP32 unless the default dtype is FP64), or on the parameter's
  device in ``_get_scalar_dtype(is_fused)`` when ``capturable`` or ``fused`` — then
  ``exp_avg`` and ``exp_avg_sq`` = ``zeros_like(p, memory_format=preserve_format)``, and
  ``max_exp_avg_sq`` the same with ``amsgrad``;
* ``torch.optim.SGD`` (torch/optim/sgd.py, ``_single_tensor_sgd``): with momentum,
  ``momentum_buffer`` = ``grad.detach().clone()`` on the first step, which has the
  gradient's shape, dtype and layout, i.e. the parameter's; without momentum, no state.

Only parameters that will receive a gradient (``requires_grad``) get state, as only they
do in a real first step. ``tests/test_optimizer_state.py`` checks that the state matches a
warm-up step's tensor for tensor (shape, dtype, device, stride) and that the measured
peak is byte-identical.
"""

from __future__ import annotations

import torch
from torch import nn


def prime_optimizer(model: nn.Module, optimizer: torch.optim.Optimizer) -> bool:
    """Create ``optimizer``'s state for ``model``'s trainable parameters, as its first
    step would. Returns False (and creates nothing) for an optimizer it does not know,
    so the caller can run a warm-up step instead."""
    del model  # the optimizer's param_groups name the parameters
    kind = type(optimizer)
    if kind in (torch.optim.Adam, torch.optim.AdamW):
        _prime_adam(optimizer)
        return True
    if kind is torch.optim.SGD:
        _prime_sgd(optimizer)
        return True
    return False


def _trainable(group: dict):
    return (p for p in group["params"] if p.requires_grad)


def _prime_adam(optimizer: torch.optim.Optimizer) -> None:
    from torch.optim.optimizer import _get_scalar_dtype

    zeros = torch.zeros_like
    for group in optimizer.param_groups:
        on_device = group["capturable"] or group["fused"]
        for p in _trainable(group):
            state = optimizer.state[p]
            if state:
                continue
            if on_device:
                dtype = _get_scalar_dtype(is_fused=group["fused"])
                state["step"] = torch.zeros((), dtype=dtype, device=p.device)
            else:
                state["step"] = torch.tensor(0.0, dtype=_get_scalar_dtype(), device="cpu")
            state["exp_avg"] = zeros(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = zeros(p, memory_format=torch.preserve_format)
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = zeros(p, memory_format=torch.preserve_format)


def _prime_sgd(optimizer: torch.optim.Optimizer) -> None:
    for group in optimizer.param_groups:
        if group["momentum"] == 0:
            continue
        for p in _trainable(group):
            state = optimizer.state[p]
            if state.get("momentum_buffer") is None:
                state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
