"""The caching-allocator model against what torch's own allocator tests assert.

Scenarios from pytorch/pytorch ``test/test_cuda.py`` (``TestCuda.test_allocator_settings``,
``test_max_split_expandable``, ``test_garbage_collect_expandable``,
``TestMemPool.test_mempool_with_allocator``), each with the reserved/allocated figure or
verdict the test states; plus the rules of ``c10/cuda/CUDACachingAllocator.cpp`` the
model names, and the recorder in the live tracker on a real CPU step.
"""

from __future__ import annotations

import pytest

from introspect.allocator import config, synthetic
from introspect.allocator.caching import CachingAllocator, OutOfMemory
from introspect.allocator.config import AllocatorConfig, parse
from introspect.allocator.replay import both, replay, steps
from introspect.errors import IntrospectError

MiB = 2**20


def power2_div(size: int, div_factor: int) -> int:
    """test_allocator_settings' own reference rounding."""
    pow2 = 1
    while pow2 < size:
        pow2 *= 2
    if pow2 == size:
        return pow2
    step = pow2 / 2 / div_factor
    ret = pow2 / 2
    while ret < size:
        ret += step
    return int(ret)


def test_roundup_power2_divisions_as_torch_asserts():
    nbytes = 4 * 21 * MiB  # test_allocator_settings' nelems = 21 Mi floats
    assert CachingAllocator(parse("")).malloc(nbytes).size == nbytes
    assert CachingAllocator(parse("roundup_power2_divisions:4")).malloc(nbytes).size == power2_div(
        nbytes, 4
    )
    knobs = "garbage_collection_threshold:0.5,"
    knobs += "roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]"
    alloc = CachingAllocator(parse(knobs))
    assert alloc.malloc(nbytes).size == power2_div(nbytes, 8)
    assert alloc.malloc(4 * 100 * MiB).size == power2_div(4 * 100 * MiB, 2)
    # each parseArgs resets the divisions: max_split_size_mb alone rounds to 512 B again
    later = parse("garbage_collection_threshold:0.5,max_split_size_mb:40")
    assert CachingAllocator(later).malloc(nbytes).size == nbytes


@pytest.mark.parametrize(
    "text, words",
    [
        ("foo:1,bar:2", "Unrecognized key 'foo'"),
        ("garbage_collection_threshold:1.2", "garbage_collect_threshold is invalid"),
        ("max_split_size_mb:2", "max_split_size_mb too small, must be >= 20"),
        ("expandable_segments:yes", "Expected 'True' or 'False'"),
        ("roundup_power2_divisions:3", "power of 2"),
        ("backend:cudaMallocAsync", "not modelled"),
    ],
)
def test_settings_torch_refuses_are_one_line(text, words):
    with pytest.raises(IntrospectError) as err:
        parse(text)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_environment_read_as_torch_reads_it():
    cfg, name = config.from_environ({"PYTORCH_ALLOC_CONF": "expandable_segments:True"})
    assert (name, cfg.expandable_segments) == ("PYTORCH_ALLOC_CONF", True)
    env = {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64", "PYTORCH_ALLOC_CONF": "x:1"}
    cfg, name = config.from_environ(env)  # CUDAAllocatorConfig::instance: CUDA's first
    assert (name, cfg.max_split_size) == ("PYTORCH_CUDA_ALLOC_CONF", 64 * MiB)
    assert config.from_environ({}) == (AllocatorConfig(), None)


def test_max_split_expandable():
    """120 MiB allowed, max_split_size_mb:40: three 40 MiB blocks (expandable off, on,
    off) fit, a fourth raises; freed, 120 MiB fits after the cached blocks are released."""
    alloc = CachingAllocator(parse("expandable_segments:False,max_split_size_mb:40"), 2**40)
    alloc.set_memory_fraction(120 * MiB / 2**40)
    a = alloc.malloc(40 * MiB)
    alloc.cfg = parse("expandable_segments:True,max_split_size_mb:40")
    b = alloc.malloc(40 * MiB)
    alloc.cfg = parse("expandable_segments:False,max_split_size_mb:40")
    c = alloc.malloc(40 * MiB)
    with pytest.raises(OutOfMemory):
        alloc.malloc(40 * MiB)
    for block in (a, b, c):
        alloc.free(block)
    alloc.malloc(120 * MiB)  # release_cached_blocks with an expandable block in the list
    assert alloc.reserved == 120 * MiB and alloc.num_alloc_retries >= 1


def test_garbage_collect_expandable():
    alloc = CachingAllocator(
        parse("expandable_segments:False,garbage_collection_threshold:0.5"), 2**40
    )
    alloc.set_memory_fraction(120 * MiB / 2**40)
    a = alloc.malloc(40 * MiB)
    alloc.cfg = parse("expandable_segments:True,garbage_collection_threshold:0.5")
    b = alloc.malloc(40 * MiB)
    alloc.free(a)
    alloc.free(b)
    alloc.malloc(80 * MiB)  # GC runs: frees the unsplit 40 MiB segment, not the expandable
    assert alloc.reserved <= 120 * MiB


def test_small_requests_share_2mib_segments():
    """test_mempool_with_allocator: 1 MiB requests — one 2 MiB segment for two, a second
    for the third."""
    alloc = CachingAllocator(AllocatorConfig())
    counts = []
    for _ in range(3):
        alloc.malloc(MiB)
        counts.append(alloc.segments)
    assert counts == [1, 1, 2] and alloc.reserved == 4 * MiB


def test_segment_sizes_and_splitting():
    alloc = CachingAllocator(AllocatorConfig())
    alloc.malloc(11 * MiB + 1)  # >= 10 MiB: its own segment rounded to 2 MiB; the
    assert alloc.reserved == alloc.allocated == 12 * MiB  # remainder (< 1 MiB) stays in it
    alloc.malloc(5 * MiB)  # 1-10 MiB: a 20 MiB segment, split
    assert alloc.reserved == 32 * MiB and alloc.allocated == 17 * MiB
    alloc.malloc(11 * MiB)  # best fit: the 15 MiB left of the 20 MiB segment
    assert alloc.reserved == 32 * MiB and alloc.allocated == 28 * MiB


def test_oversize_blocks_are_not_split():
    alloc = CachingAllocator(parse("max_split_size_mb:20"))
    big = alloc.malloc(100 * MiB)
    alloc.free(big)
    alloc.malloc(30 * MiB)  # a smaller request: the 100 MiB oversize block is not used
    assert alloc.reserved == 130 * MiB
    alloc.malloc(95 * MiB)  # within 20 MiB of it: rounded up into it, unsplit
    assert alloc.reserved == 130 * MiB and alloc.allocated == 130 * MiB


def test_free_blocks_coalesce_and_empty_cache_returns_them():
    alloc = CachingAllocator(AllocatorConfig())
    blocks = [alloc.malloc(2 * MiB) for _ in range(5)]  # five from one 20 MiB segment
    assert alloc.segments == 1
    for b in blocks:
        alloc.free(b)
    alloc.malloc(9 * MiB)  # the merged free block serves it: no new segment
    assert alloc.segments == 1
    alloc2 = CachingAllocator(AllocatorConfig())
    alloc2.free(alloc2.malloc(64 * MiB))
    alloc2.empty_cache()
    assert alloc2.reserved == 0


def test_expandable_segments_grow_one_segment_and_unmap_pages():
    alloc = CachingAllocator(parse("expandable_segments:True"))
    blocks = [alloc.malloc(30 * MiB) for _ in range(3)]
    assert alloc.reserved == 100 * MiB  # 90 MiB in 20 MiB pages of one growing segment
    for b in blocks:
        alloc.free(b)
    alloc.empty_cache()
    assert alloc.reserved == 0


def test_fragmentation_is_what_expandable_segments_remove():
    """The allocator's own rationale (Note [Expandable Segments]): requests that grow by a
    little each time leave slivers in per-request segments, not in one growing segment."""
    events, key = [], 0
    for step in range(6):
        live = []
        for layer in range(8):
            key += 1
            events.append(("alloc", key, (40 + step) * MiB + layer * 4096, "forward"))
            live.append(key)
        events += [("free", k) for k in live]
    off, on = both(events, AllocatorConfig())
    assert off.reserved_peak > on.reserved_peak
    assert on.allocated_peak <= off.allocated_peak


def test_first_failure_at_a_capacity():
    events = [("alloc", i, 30 * MiB, "forward") for i in range(5)]
    r = replay(events, AllocatorConfig(), capacity=100 * MiB)
    assert r.failure is not None and r.failure.index == 3 and r.failure.reserved == 90 * MiB
    assert replay(events, AllocatorConfig(), capacity=200 * MiB).failure is None


def test_synthetic_stream_holds_the_peaks_bytes():
    from introspect.spec import ModelSpec

    spec = ModelSpec(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, vocab_size=1000)
    terms = {"weights": 4_000_000, "activations/layer/x": 4 * 3 * MiB, "logits": 5 * MiB}
    events = synthetic.stream(spec, terms)
    assert sum(e[2] for e in events) == sum(terms.values())
    r = synthetic.reserve(spec, terms, AllocatorConfig())
    assert r.reserved_peak >= r.allocated_peak >= sum(terms.values())


def test_tracker_records_the_stream_of_a_real_step():
    torch = pytest.importorskip("torch")
    from introspect.measure.live_tracker import LiveStorageTracker

    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(16, 32)
    off = LiveStorageTracker(model, opt)
    with off:
        model(x).sum().backward()
    assert off.events == []
    tracker = LiveStorageTracker(model, opt, record=True)
    with tracker:
        model(x).sum().backward()
        opt.step()
    (events,) = tracker.stream().values()
    allocs = [e for e in events if e[0] == "alloc"]
    assert {e[3] for e in allocs} >= {"state", "forward", "backward", "optimizer"}
    # the stream's live bytes at its highest are the tracker's own peak
    assert _live_peak(events) == tracker.peak_bytes


def test_config_as_torchs_own_cpp_test_reads_it():
    """c10/test/core/AllocatorConfig_test.cpp (allocator_config_test)'s setting and values."""
    cfg = parse(
        "max_split_size_mb:40,max_non_split_rounding_mb:30,garbage_collection_threshold:0.5,"
        "roundup_power2_divisions:[64:8,128:2,256:4,512:2,1024:4,>:1],"
        "expandable_segments:True,pinned_use_background_threads:True"
    )
    assert cfg.large_segment_size == 20 * MiB and cfg.max_split_size == 40 * MiB
    assert cfg.max_non_split_rounding_size == 30 * MiB
    assert cfg.garbage_collection_threshold == 0.5 and cfg.expandable_segments
    got = [cfg.divisions(mb * MiB) for mb in (32, 64, 128, 256, 512, 1024, 2048)]
    assert got == [8, 8, 2, 4, 2, 4, 1]


def test_a_second_step_meets_the_firsts_cache():
    """steps(): the state once, the step twice; what the first step left alive (its
    gradients) is freed before the second, as zero_grad(set_to_none=True) does."""
    events = [
        ("alloc", "w", 30 * MiB, "state"),
        ("alloc", "a", 64 * MiB, "forward"),
        ("alloc", "g", 30 * MiB, "backward"),
        ("free", "a"),
    ]
    two = steps(events, 2)
    assert [e[0] for e in two].count("alloc") == 5 and ("free", (0, "g")) in two
    one, again = replay(events, AllocatorConfig()), replay(two, AllocatorConfig())
    assert again.reserved_peak == one.reserved_peak  # the cache serves the second step


def test_measure_dry_run_prints_the_replay(capsys):
    pytest.importorskip("torch")
    import json

    from introspect.cli import main

    argv = ["measure", "--layers", "2", "--d-emb", "64", "--heads", "4", "--vocab", "128"]
    argv += ["--seq", "8", "--framework", "torch", "--device", "fake", "--no-census"]
    assert main([*argv, "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][0]
    (replays,) = row["measurement"]["allocator_replay"].values()
    for key in ("expandable_off", "expandable_on"):
        r = replays[key]
        assert (
            r["reserved_peak_bytes"]
            >= r["allocated_peak_bytes"]
            >= row["measurement"]["peak_bytes"]
        )
        assert r["source"] == "derived from torch's source, not measured on a GPU"
    assert main(argv) == 0
    assert "caching allocator replay" in capsys.readouterr().out


def _issue_123548(cfg: str, cycles: int, capacity: int | None = None):
    """pytorch/pytorch#123548 (and PR #193400)'s reproducer: a 64 MiB canary, then per
    cycle A = 91 MiB, B = 45.5 MiB, a 2 MiB block kept alive, A and B freed."""
    alloc = CachingAllocator(parse(cfg), capacity)
    kept = [alloc.malloc(64 * MiB)]
    seen = {}
    for cycle in range(cycles):
        retries = alloc.num_alloc_retries
        a, b = alloc.malloc(91 * MiB), alloc.malloc(int(45.5 * MiB))
        kept.append(alloc.malloc(2 * MiB))
        alloc.free(a)
        alloc.free(b)
        seen[cycle] = (alloc.allocated // MiB, alloc.reserved // MiB, alloc.num_alloc_retries)
        if alloc.num_alloc_retries > retries:
            break
    return alloc, seen


def test_reserved_growth_of_max_split_with_expandable_segments():
    """The published table (torch 2.12, git 13eab2b3): reserved 220 → 14,060 MiB over 100
    cycles while allocated goes 66 → 266 MiB; either option alone stays under 500 MiB."""
    _, seen = _issue_123548("max_split_size_mb:128,expandable_segments:True", 101)
    table = [seen[c][:2] for c in (0, 20, 40, 60, 80, 100)]
    assert table == [(66, 220), (106, 2980), (146, 5760), (186, 8520), (226, 11300), (266, 14060)]
    for alone in ("max_split_size_mb:128", "expandable_segments:True", ""):
        _, seen = _issue_123548(alone, 101)
        assert seen[100][1] < 500


def test_the_retry_that_empties_the_cache():
    """The same reproducer's JSON line at a 16,000 MiB ceiling (its max_reserved_mib): the
    first retry at cycle 115, then 296 MiB allocated, 2,680 MiB reserved, no OOM."""
    alloc, seen = _issue_123548("max_split_size_mb:128,expandable_segments:True", 200, 16000 * MiB)
    last = max(seen)
    assert (last, *seen[last]) == (115, 296, 2680, 1)
    assert alloc.peak_reserved == 16000 * MiB and alloc.num_ooms == 0


@pytest.mark.parametrize("sharding", [("--fsdp",), ("--zero", "1")])
def test_sharded_dry_run_replays_every_rank_run(capsys, sharding):
    pytest.importorskip("torch")
    import json

    from introspect.cli import main

    argv = ["measure", "--layers", "2", "--d-emb", "64", "--heads", "4", "--vocab", "128"]
    argv += ["--seq", "8", "--framework", "torch", "--device", "fake", "--no-census"]
    assert main([*argv, *sharding, "--devices", "2", "--json"]) == 0
    ranks = json.loads(capsys.readouterr().out)["rows"][0]["measured"]["ranks"]
    assert len(ranks) == (2 if "--zero" in sharding else 1)
    for rank in ranks:
        (replays,) = rank["allocator_replay"].values()
        off = replays["expandable_off"]
        assert off["reserved_peak_bytes"] >= off["allocated_peak_bytes"] > 0


def test_environment_setting_is_read_and_a_bad_one_refused(capsys, monkeypatch):
    from introspect.cli import main

    monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    assert main(["profile", "Qwen/Qwen2.5-0.5B"]) == 0
    out = capsys.readouterr().out
    assert "read PYTORCH_CUDA_ALLOC_CONF='expandable_segments:True'" in out
    assert "expandable on *" in out
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:2")
    assert main(["fit", "Qwen/Qwen2.5-0.5B", "--gpu", "h200"]) == 2
    err = capsys.readouterr().err.strip()
    assert "max_split_size_mb too small" in err and len(err.splitlines()) == 1


def test_moment_stream_walks_the_closed_forms_moments():
    """The closed form's moments as frees and allocations: the stream's live bytes at
    each moment are that moment's total, so its highest is the closed-form peak; the
    backward frees activations the optimizer's temporaries cannot all reuse."""
    from introspect import overhead, refined
    from introspect.setup import TrainingSetup
    from introspect.spec import ModelSpec

    spec = ModelSpec(hidden_size=512, num_hidden_layers=4, num_attention_heads=8, vocab_size=8000)
    spec = spec.replace(num_parameters=None)
    setup = TrainingSetup(seq_len=512)
    moments = overhead.step_moments(spec, setup)
    events = synthetic.moment_stream(spec, moments)
    peak = _live_peak(events)
    assert peak == refined.execution_estimate(spec, setup, notes=False).total
    assert any(e[0] == "free" for e in events)
    off = synthetic.moment_reserve(spec, moments, AllocatorConfig())
    on = synthetic.moment_reserve(spec, moments, AllocatorConfig(expandable_segments=True))
    assert off.reserved_peak >= on.reserved_peak >= peak


def _live_peak(events) -> int:
    """The most bytes alive at once over a stream of ``("alloc", id, nbytes, …)`` and
    ``("free", id)`` events, counted here apart from the allocator model."""
    live, now, peak = {}, 0, 0
    for e in events:
        if e[0] == "alloc":
            live[e[1]] = e[2]
            now += e[2]
            peak = max(peak, now)
        else:
            now -= live.pop(e[1])
    return peak
