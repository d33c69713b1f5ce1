"""Dry run: the same torch step and tracker, with fake tensors and no real memory.

Under ``torch._subclasses.fake_tensor.FakeTensorMode`` every tensor has a shape, dtype
and device but no data, so the model, Adam's state and every activation are created and
freed exactly as in a real step while nothing is allocated. The live-storage tracker
counts their bytes the same way, so a 7B training step can be "measured" on a laptop:
the figures are what the real step would hold on CPU (kernels that pick a different
algorithm per device aside).
"""

from __future__ import annotations

from introspect.measure.record import Measurement
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec


def dry_run(spec: ModelSpec, setup: TrainingSetup, *, census: bool = False) -> Measurement:
    """Build the reference model for ``spec`` inside FakeTensorMode and track one step."""
    import dataclasses

    from torch._subclasses.fake_tensor import FakeTensorMode

    from introspect.measure.torch_step import build_reference, measure_step, run_census

    with FakeTensorMode(allow_non_fake_inputs=True):
        model = build_reference(spec, setup, "cpu")
        m = measure_step(model, setup, vocab=spec.vocab_size, device="fake")
        saved = run_census(model, setup, spec, "fake").terms if census else {}
    return dataclasses.replace(
        m,
        census=saved,
        notes=m.notes + ("dry run: FakeTensorMode, no memory allocated",),
    )
