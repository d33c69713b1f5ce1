"""ZeRO-3's gradient hand-off and gradient norm in the replay
(introspect.allocator.zero3): autograd's gradients freed under record_stream until the
epilogue's synchronize, reduce_scatter_coalesced's flat buffer on the reduce stream, the
float64 copies of get_grad_norm_direct (DeepSpeed v0.14.2 stage3.py)."""

from __future__ import annotations

import pytest
from test_allocator_streams import OFF, ON, SPEC, ZERO3  # the same small ZeRO-3 step

from introspect import overhead
from introspect.allocator import synthetic, zero3
from introspect.allocator.replay import replay
from introspect.setup import TrainingSetup


def test_buckets_close_when_the_next_gradient_would_overflow():
    assert zero3.buckets([5, 4, 3, 2], 6) == [[2, 3], [4], [5]]  # backward: last first
    assert zero3.buckets([10], 6) == [[10]]  # one larger than the bucket: alone
    assert zero3.flat_buffer_bytes([8], 2, 2) == 0  # one tensor D divides: its own view
    assert zero3.flat_buffer_bytes([7, 3], 2, 2) == 2 * 2 * (4 + 2)  # each padded to ⌈t/D⌉


def _named(event: tuple, name: str) -> bool:
    return isinstance(event[1], tuple) and event[1][0] == name


def _step_events(setup: TrainingSetup) -> list[tuple]:
    moments = overhead.step_moments(SPEC, setup)
    return synthetic.moment_stream(
        SPEC, moments, synthetic.side_terms(setup), synthetic.load_stream(SPEC, setup)
    )


def test_handoff_holds_every_gradient_to_the_epilogue_and_reduces_on_the_reduce_stream():
    events = _step_events(ZERO3)
    handed = zero3.with_gradient_handoff(events, SPEC, ZERO3)
    tensors = synthetic.parameter_tensors(SPEC)
    grads = [e for e in handed if e[0] == "alloc" and _named(e, "zero3_grad")]
    assert sorted(e[2] for e in grads) == sorted(2 * t for t in tensors)
    assert {e[4] for e in grads} == {0}
    flat = [e for e in handed if e[0] == "alloc" and _named(e, "zero3_flat_buffer")]
    assert [e[2] for e in flat] == [2 * sum(tensors)]  # one bucket: N < reduce_bucket_size
    assert {e[4] for e in flat} == {synthetic.REDUCE_STREAM}
    # the gradients are freed after the flat buffer (the epilogue), before the step
    first_free = min(i for i, e in enumerate(handed) if e == ("free", ("zero3_grad", 0)))
    at_flat = handed.index(flat[0])
    step = next(i for i, e in enumerate(handed) if e[0] == "alloc" and e[3] == "master_grads")
    assert at_flat < first_free < step
    assert zero3.with_gradient_handoff(events, SPEC, ZERO3.replace(zero_stage=2)) == events


def test_grad_norm_copies_each_partition_to_float64_before_the_conversion():
    events = _step_events(ZERO3)
    normed = zero3.with_grad_norm(events, SPEC, ZERO3)
    copies = [e for e in normed if e[0] == "alloc" and _named(e, "zero3_grad_norm")]
    assert [e[2] for e in copies] == [8 * t for t in synthetic.parameter_tensors(SPEC)]
    first = normed.index(copies[0])
    assert normed[first + 1] == ("free", copies[0][1])  # freed once its norm is taken


@pytest.mark.parametrize("cfg", [OFF, ON], ids=["off", "on"])
def test_the_reduce_streams_flat_buffer_stays_reserved_in_the_replay(cfg):
    """Replayed, the hand-off adds to the reserve: the default stream never reuses the
    reduce stream's block. Expandable segments off, at least the flat buffer's bytes less
    what the reduce stream held before (the overflow check's bool copies, which the flat
    buffer's block serves afterwards); on, the segment grows by whole pages."""
    events = synthetic.with_overflow_check(_step_events(ZERO3), SPEC, ZERO3)
    before = replay(events, cfg).reserved_peak
    handed = zero3.with_grad_norm(
        synthetic.with_overflow_check(
            zero3.with_gradient_handoff(_step_events(ZERO3), SPEC, ZERO3), SPEC, ZERO3
        ),
        SPEC,
        ZERO3,
    )
    after = replay(handed, cfg).reserved_peak
    n = sum(synthetic.parameter_tensors(SPEC))
    assert after > before
    if cfg is OFF:
        assert after - before >= 2 * n - n  # flat buffer (2n) less the check's block (n)
