"""Consecutive steps whose sequence length changes, replayed through the caching-allocator
model (introspect.allocator.synthetic.steps_stream, introspect.overhead.cuda_reserve_steps):
the state held across steps, each step's own activations, and the reserve a longer step
after shorter ones leaves with expandable segments off and not with them on."""

from __future__ import annotations

import pytest

from introspect import overhead
from introspect.allocator import synthetic
from introspect.allocator.config import AllocatorConfig, with_expandable
from introspect.errors import IntrospectError
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

SPEC = ModelSpec(
    hidden_size=512, num_hidden_layers=4, num_attention_heads=8, vocab_size=32000
).replace(num_parameters=None)
SETUP = TrainingSetup(seq_len=1024, precision="bf16", batch_size=2)
OFF = AllocatorConfig()
ON = with_expandable(AllocatorConfig(), True)


def _steps(*seqs: int) -> list:
    return [overhead.step_moments(SPEC, SETUP.replace(seq_len=t)) for t in seqs]


def test_one_step_is_the_moment_stream():
    (moments,) = _steps(1024)
    assert synthetic.steps_stream(SPEC, [moments]) == synthetic.moment_stream(SPEC, moments)


def test_the_state_is_allocated_once_across_steps():
    """Weights, gradients and Adam's moments stay held: a second step of the same T adds
    only what one step frees and makes again, so the stream's allocated bytes grow by
    the step's transient bytes, not by the state's."""
    (moments,) = _steps(1024)
    one = synthetic.steps_stream(SPEC, [moments])
    two = synthetic.steps_stream(SPEC, [moments, moments])
    made = lambda events: sum(e[2] for e in events if e[0] == "alloc")  # noqa: E731
    state = sum(
        v for name, v in moments[-1][1].items() if name.startswith(("weights", "optimizer/adam"))
    )
    assert state > 0
    assert made(two) - made(one) < made(one) - state + 1


def test_repeating_one_length_reuses_the_cache():
    single = overhead.cuda_reserve_steps(SPEC, SETUP, [1024], OFF)
    again = overhead.cuda_reserve_steps(SPEC, SETUP, [1024] * 3, OFF)
    assert again.reserved_peak == single.reserved_peak
    assert again.allocated_peak == single.allocated_peak


def test_rising_lengths_leave_cached_blocks_unless_segments_expand():
    """Each longer step cannot reuse the smaller blocks the shorter ones left cached
    (expandable segments off); with them on, the segment's pages are reused."""
    rising = [256, 512, 768, 1024]
    single_off = overhead.cuda_reserve_steps(SPEC, SETUP, [1024], OFF)
    steps_off = overhead.cuda_reserve_steps(SPEC, SETUP, rising, OFF)
    single_on = overhead.cuda_reserve_steps(SPEC, SETUP, [1024], ON)
    steps_on = overhead.cuda_reserve_steps(SPEC, SETUP, rising, ON)
    assert steps_off.reserved_peak > single_off.reserved_peak
    assert steps_on.reserved_peak - single_on.reserved_peak < (
        steps_off.reserved_peak - single_off.reserved_peak
    )
    # the longest step's tensors are the allocated peak wherever it falls
    assert steps_on.allocated_peak == single_on.allocated_peak
    falling = overhead.cuda_reserve_steps(SPEC, SETUP, rising[::-1], OFF)
    assert falling.reserved_peak <= steps_off.reserved_peak


def test_no_lengths_is_one_line():
    with pytest.raises(IntrospectError, match="at least one sequence length"):
        overhead.cuda_reserve_steps(SPEC, SETUP, [])
