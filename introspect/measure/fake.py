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
    """Build the reference model for ``spec`` inside FakeTensorMode and track one step.

    A size torch cannot represent (a storage over 2⁶³ bytes: torch's
    ``Storage size calculation overflowed``) is one :class:`IntrospectError` line; torch's
    own log line about it (``torch._subclasses.fake_tensor``) is silenced."""
    import dataclasses
    import logging

    from torch._subclasses.fake_tensor import FakeTensorMode

    from introspect.errors import IntrospectError
    from introspect.measure.torch_step import build_reference, measure_step, run_census

    log = logging.getLogger("torch._subclasses.fake_tensor")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        with FakeTensorMode(allow_non_fake_inputs=True):
            model = build_reference(spec, setup, "cpu")
            m = measure_step(model, setup, vocab=spec.vocab_size, device="fake")
            saved = run_census(model, setup, spec, "fake").terms if census else {}
    except (RuntimeError, OverflowError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise IntrospectError(
            f"B={setup.batch_size}, T={setup.seq_len}: torch cannot build this step even "
            f"as fake tensors ({first[:200]}); use a smaller --seq or --batch"
        ) from e
    finally:
        log.setLevel(level)
    return dataclasses.replace(
        m,
        census=saved,
        notes=m.notes + ("dry run: FakeTensorMode, no memory allocated",),
    )
