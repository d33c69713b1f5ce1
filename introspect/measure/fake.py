"""Dry run: the same torch step and tracker, with fake tensors and no real memory.

Under ``torch._subclasses.fake_tensor.FakeTensorMode`` every tensor has a shape, dtype
and device but no data, so the model, Adam's state and every activation are created and
freed exactly as in a real step while nothing is allocated. The live-storage tracker
counts their bytes the same way, so a 7B training step can be "measured" on a laptop:
the figures are what the real step would hold on CPU (kernels that pick a different
algorithm per device aside).

Mixture-of-experts models: transformers' default experts kernel (``grouped_mm``,
``transformers/integrations/moe.py``) routes without data-dependent shapes (sort, histc,
cumsum, then ``torch.nn.functional.grouped_mm`` over all experts with offsets), so it
runs under fake tensors as it is — except that torch's fake (meta) kernel for
``aten._grouped_mm`` (``torch/_meta_registrations.py`` ``_meta_grouped_mm_common``)
checks the CUDA kernel's BF16-only rule while the CPU kernel computes FP32 too.
:func:`grouped_mm_any_dtype` replaces that meta kernel, for the dry run only, by the
output allocation the meta kernel itself makes (``_create_grouped_mm_output_tensor``:
an (S, out) tensor in the input dtype) without the dtype check. Autograd's node
(``GroupedMmBackward0``) and the backward's own ``_grouped_mm`` calls are torch's, so the
step keeps the real code path and allocates what the real CPU step allocates
(``tests/test_measure_hf.py`` checks an FP32 Mixtral byte for byte).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from introspect.measure.record import Measurement
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

#: The note a dry run of a mixture-of-experts model carries.
GROUPED_MM_NOTE = (
    "MoE experts: transformers' grouped_mm kernel, run as is; torch's fake grouped_mm "
    "accepts only BF16, so the dry run uses its allocation (an (S, out) output in the input "
    "dtype) without that check: exact for FP32 too"
)


@contextmanager
def fake_mode() -> Iterator[None]:
    """FakeTensorMode with :func:`grouped_mm_any_dtype`."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True), grouped_mm_any_dtype():
        yield


@contextmanager
def grouped_mm_any_dtype() -> Iterator[None]:
    """``aten._grouped_mm``'s Meta kernel without the BF16-only check (see the module
    docstring), restored on exit. Only the Meta dispatch key is touched: real CPU and
    CUDA kernels are unchanged."""
    import torch
    from torch._meta_registrations import _create_grouped_mm_output_tensor

    if not hasattr(torch.ops.aten, "_grouped_mm"):
        yield
        return

    def meta(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
        torch._check(mat_a.dtype == mat_b.dtype, lambda: "grouped_mm: operand dtypes differ")
        return _create_grouped_mm_output_tensor(mat_a, mat_b, offs, out_dtype)

    lib = torch.library.Library("aten", "IMPL")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
        lib.impl("_grouped_mm", meta, "Meta")
    try:
        yield
    finally:
        lib._destroy()


def dry_run(spec: ModelSpec, setup: TrainingSetup, *, census: bool = False) -> Measurement:
    """Build the reference model for ``spec`` inside FakeTensorMode and track one step."""
    import dataclasses

    from introspect.measure.torch_step import build_reference, measure_step, run_census

    with fake_mode():
        model = build_reference(spec, setup, "cpu")
        m = measure_step(model, setup, vocab=spec.vocab_size, device="fake")
        saved = run_census(model, setup, spec, "fake").terms if census else {}
    return dataclasses.replace(
        m,
        census=saved,
        notes=m.notes + ("dry run: FakeTensorMode, no memory allocated",),
    )
