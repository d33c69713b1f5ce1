"""Device overhead: the CUDA caching allocator's rounding and segments, the context, the
Mac's working set; kept apart from the tensors. (CUDA-checked rows are pending: no GPU.)"""

from __future__ import annotations

import pytest

from introspect import overhead, refined
from introspect.devices import lookup
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

MiB = 2**20


def test_block_rounding_is_the_allocators():
    assert overhead.block_bytes(1) == 512
    assert overhead.block_bytes(512) == 512
    assert overhead.block_bytes(513) == 1024
    # Pooled requests (≤ 10 MiB) share segments; larger ones get their own, rounded to 2 MiB.
    assert overhead.segment_waste(5 * MiB) == 0
    assert overhead.segment_waste(64 * MiB) == MiB


def test_torch_constants_match_its_header():
    torch = pytest.importorskip("torch")
    from pathlib import Path

    header = Path(torch.__file__).parent / "include/c10/core/AllocatorConfig.h"
    if not header.exists():
        pytest.skip("torch headers not installed")
    text = header.read_text()
    for name, value in (
        ("kSmallBuffer", overhead.K_SMALL_BUFFER),
        ("kMinBlockSize", overhead.K_MIN_BLOCK),
        ("kSmallSize", overhead.K_SMALL_SIZE),
        ("kMinLargeAlloc", overhead.K_MIN_LARGE_ALLOC),
        ("kRoundLarge", overhead.K_ROUND_LARGE),
    ):
        assert f"constexpr size_t {name} = {value};" in text


def test_tensor_count_is_the_modules():
    pytest.importorskip("transformers")
    from introspect.measure.implementations import transformers_llama

    spec = ModelSpec(
        hidden_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=96,
        vocab_size=256,
        norm="rmsnorm",
        norm_bias=False,
        ffn="gated",
        hidden_act="silu",
        model_type="llama",
    )
    model = transformers_llama(spec)
    assert overhead.tensor_count(spec) == len(list(model.parameters()))


def test_cuda_view_keeps_the_tensors_apart():
    spec = ModelSpec(hidden_size=512, num_hidden_layers=8, num_attention_heads=8, vocab_size=32000)
    spec = spec.replace(num_parameters=None)
    setup = TrainingSetup(seq_len=1024)
    device = lookup("a100-80gb")
    view = overhead.device_view(spec, setup, device, environ={})
    assert view.allocated == refined.estimate(spec, setup).total
    assert view.reserve > 0 and view.context == overhead.cuda_context(device, {})[0]
    assert view.shown == view.allocated + view.workspaces + view.reserve + view.context
    assert set(view.sources) == {"allocated", "workspaces", "reserve", "context", "nccl"}


def test_mac_view_uses_the_working_set():
    spec = ModelSpec(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, vocab_size=8192)
    mac = lookup("m2-8gb")
    view = overhead.device_view(spec, TrainingSetup(framework="mlx_compiled"), mac)
    assert view.usable == overhead.metal_usable(mac) < mac.memory_bytes
    assert view.shown == view.allocated
