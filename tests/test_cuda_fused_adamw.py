"""Fused AdamW (``torch.optim.AdamW(fused=True)``, the path ``--optimizer-impl fused``
prices): ``_fused_adam`` in ``torch/optim/adam.py`` runs ``_foreach_add_`` on the step
counters and ``torch._fused_adamw_``, both in place; the CUDA kernel
(``aten/src/ATen/native/cuda/fused_adamw_impl.cu``) updates the params, grads, m and v
lists in place through ``multi_tensor_apply_for_fused_optimizer`` and allocates nothing.
The Python path is the same for CPU and CUDA, so a real CPU step shows the ops it runs."""

from __future__ import annotations

import torch
from specs import STACK_BASE
from torch.utils._python_dispatch import TorchDispatchMode

from introspect.refined import execution
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.__name__)
        return func(*args, **(kwargs or {}))


def test_fused_adamw_step_runs_only_in_place_ops():
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    opt = torch.optim.AdamW(model.parameters(), fused=True)
    model(torch.randn(3, 8)).sum().backward()
    opt.step()  # the first step creates the state (m, v, step counters)
    model(torch.randn(3, 8)).sum().backward()
    with _Ops() as ops:
        opt.step()
    bookkeeping = ("detach", "alias", "lift", "_record_function")
    updates = [n for n in ops.names if not n.startswith(bookkeeping)]
    assert updates and all(n.split(".")[0].endswith("_") for n in updates), updates
    assert any(n.startswith("_fused_adamw_") for n in updates)


def test_the_closed_form_prices_no_fused_temporaries_on_cuda():
    spec = ModelSpec(**STACK_BASE)
    setup = TrainingSetup(seq_len=64, device="cuda", optimizer="adamw", optimizer_impl="fused")
    assert execution.optimizer_temporaries(spec, setup, 10_000) == 0
    foreach = setup.replace(optimizer_impl="foreach")
    assert execution.optimizer_temporaries(spec, foreach, 10_000) == 10_000 * 4
