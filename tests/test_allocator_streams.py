"""Per-stream blocks in the caching-allocator model (CUDACachingAllocator.cpp's BlockPool
orders free blocks by stream, size, address: a block freed on one stream is not reused by
another), the sharded wrappers' side streams and their load streams
(introspect.allocator.synthetic.side_terms, load_stream, with_overflow_check), and the
reserve they add (introspect.overhead.cuda_reserve)."""

from __future__ import annotations

import pytest

from introspect import overhead
from introspect.allocator import synthetic
from introspect.allocator.caching import CachingAllocator
from introspect.allocator.config import AllocatorConfig, with_expandable
from introspect.allocator.replay import replay
from introspect.refined import deepspeed, execution
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

MiB = 2**20
OFF = AllocatorConfig()
ON = with_expandable(AllocatorConfig(), True)
SPEC = ModelSpec(
    hidden_size=512, num_hidden_layers=4, num_attention_heads=8, vocab_size=32000
).replace(num_parameters=None)
ZERO3 = TrainingSetup(
    seq_len=256, sharding="zero", zero_stage=3, devices=1, precision="mixed",
    activation_dtype="fp16",
)  # fmt: skip


@pytest.mark.parametrize("cfg", [OFF, ON], ids=["off", "on"])
def test_a_block_freed_on_one_stream_serves_only_that_stream(cfg):
    a = CachingAllocator(cfg)
    side = a.malloc(64 * MiB, stream=1)
    a.free(side)
    held = a.reserved
    again = a.malloc(64 * MiB, stream=1)  # the same stream: the cached block
    assert a.reserved == held
    a.free(again)
    a.malloc(64 * MiB, stream=0)  # the default stream: a segment of its own
    assert a.reserved == 2 * held  # (expandable: 20 MiB pages, the same count again)


def test_replay_reads_the_stream_of_each_request():
    one = [("alloc", 1, 64 * MiB, "a"), ("free", 1), ("alloc", 2, 64 * MiB, "b")]
    two = [("alloc", 1, 64 * MiB, "a", 1), ("free", 1), ("alloc", 2, 64 * MiB, "b", 0)]
    assert replay(one, OFF).reserved_peak == 64 * MiB
    assert replay(two, OFF).reserved_peak == 128 * MiB


def test_the_wrappers_gather_on_a_side_stream():
    assert synthetic.side_terms(ZERO3) == {"weights/gathered": 1, "comm/all_gather": 1}
    fsdp = TrainingSetup(sharding="fsdp", devices=2)
    assert synthetic.side_terms(fsdp) == {"comm/fsdp_all_gather": 1}
    assert synthetic.side_terms(TrainingSetup()) == {}
    two = ZERO3.replace(devices=2)  # one rank gathers nothing (views of the partition)
    moments = overhead.step_moments(SPEC, two)
    events = synthetic.moment_stream(SPEC, moments, synthetic.side_terms(two))
    streams = {e[4] for e in events if e[0] == "alloc"}
    assert streams == {0, 1}


def test_zero3_load_leaves_the_state_the_step_starts_with():
    """stage3.py's construction, one rank: the flat fp16 partition, the FP32 copy, Adam's
    m and v, the IPG bucket and the gradient partition stay held, as the step's state
    terms; the whole tensors, the per-tensor partitions and the zero FP32 gradient of
    initialize_optimizer_states are freed, their blocks left cached."""
    events, held = synthetic.load_stream(SPEC, ZERO3)
    state = execution.state_terms(SPEC, ZERO3)
    first = overhead.step_moments(SPEC, ZERO3)[0][1]
    for name, tensors in held.items():
        assert sum(n for _, n in tensors) == first[name], name
    assert state["optimizer/master_weights"] == sum(n for _, n in held["optimizer/master_weights"])
    run = replay(events, OFF)
    kept = sum(n for tensors in held.values() for _, n in tensors)
    assert run.allocated_peak > kept  # the wrapper's transients came and went
    assert synthetic.load_stream(SPEC, TrainingSetup()) is None


def test_zero3_overflow_check_runs_on_the_reduce_stream():
    moments = overhead.step_moments(SPEC, ZERO3)
    events = synthetic.moment_stream(SPEC, moments)
    checked = synthetic.with_overflow_check(events, SPEC, ZERO3)
    extra = [e for e in checked if e not in events]
    n = deepspeed.local_parameters(SPEC, ZERO3)
    assert [e[2] for e in extra if e[0] == "alloc"] == [n, n]
    assert {e[4] for e in extra if e[0] == "alloc"} == {synthetic.REDUCE_STREAM}
    bf16 = ZERO3.replace(activation_dtype="bf16")
    assert synthetic.with_overflow_check(events, SPEC, bf16) == events


@pytest.mark.parametrize("cfg", [OFF, ON], ids=["off", "on"])
def test_side_streams_and_the_load_add_to_zero3s_reserve(cfg):
    """The replayed reserve with the load, the side streams and the overflow check is
    at least the single-stream replay's from an empty cache: a stream's cached blocks
    serve no other stream, with expandable segments too (each stream its own segment)."""
    moments = overhead.step_moments(SPEC, ZERO3)
    plain = replay(synthetic.moment_stream(SPEC, moments), cfg)
    terms = dict(execution.moments(SPEC, ZERO3)[-1][1])
    full = overhead.cuda_reserve(SPEC, ZERO3, terms, cfg)
    assert full + sum(v for v in terms.values() if v > 0) >= plain.reserved_peak
