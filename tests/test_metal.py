"""introspect.metal: the rules read from MLX's Metal backend, and that profile and fit
say what is derived for Metal and what is verified on the CPU."""

from __future__ import annotations

import json

import pytest

from introspect import metal
from introspect.cli import main
from introspect.devices import lookup
from introspect.setup import TrainingSetup
from tests.specs import VARIANTS


@pytest.mark.parametrize(
    ("size", "rounded"),
    [(0, 0), (1, 1), (255, 255), (16384, 16384), (16385, 32768), (3 * 16384 + 7, 4 * 16384)],
)
def test_page_rounding_is_metal_allocators(size, rounded):
    # metal/allocator.cpp:124-126: only requests above one page are rounded
    assert metal.page_rounded(size) == rounded


def test_reuse_slack_is_the_buffer_caches_window():
    # common/buffer_cache.h:33-35: reuse while length < min(2·size, size + 2·page)
    assert metal.reuse_slack_bound(100) == 99  # 2·size binds for small requests
    assert metal.reuse_slack_bound(10**8) == 2 * metal.APPLE_PAGE - 1
    assert metal.reuse_slack_bound(10**8, page=metal.CPU_PAGE) == 2 * metal.CPU_PAGE - 1


@pytest.mark.parametrize(
    ("arch", "limits"),
    [
        ("applegpu_g15p", (20, 40)),
        ("applegpu_g15g", (40, 40)),
        ("applegpu_g15s", (50, 50)),
        ("applegpu_g14d", (50, 50)),
        ("", (40, 40)),
        (None, (40, 40)),
    ],
)
def test_commit_limits_by_chip(arch, limits):
    assert metal.commit_limits(arch) == limits
    ops = limits[0]
    assert metal.pinned_ops_bound(arch) == (metal.MAX_ACTIVE_TASKS + 1) * (ops + 1)


def test_memory_limits_follow_the_allocator():
    mac = lookup("m2-8gb")
    ws = int(0.75 * mac.memory_bytes)
    lim = metal.memory_limits(mac.memory_bytes, ws)
    assert lim["memory_limit"] == int(min(1.5 * ws, 0.95 * mac.memory_bytes))
    assert lim["gc_limit"] == int(0.95 * ws) <= lim["memory_limit"]


@pytest.mark.parametrize(
    ("version", "kept"),
    [
        ("0.19.3", True),
        ("0.23.2", True),
        ("0.24.0", False),
        ("0.24.2", False),
        ("0.25.0", True),
        ("0.29.3", True),
        ("1.0.0rc1", True),
        (None, None),
    ],
)
def test_attention_kept_by_version(version, kept):
    assert metal.attention_kept_in_training(version) == kept


def test_rounding_counts_each_buffer():
    spec = VARIANTS["rmsnorm-gqa-gated"]
    full = TrainingSetup(framework="mlx")
    sizes = metal.buffer_sizes(spec, full)
    expected = sum(n * (metal.page_rounded(b) - b) for b, n in sizes)
    assert metal.rounding_bytes(spec, full) == expected
    # four copies (value, grad, m, v) of every weight under full fine-tuning
    assert sum(n for _, n in sizes) == 4 * sum(n for _, n in sizes[: len(sizes) // 2])
    lora = TrainingSetup(framework="mlx", finetune="lora", lora_rank=8)
    assert metal.rounding_bytes(spec, lora) >= 0


def test_profile_mlx_says_derived_for_metal(capsys):
    assert main(["profile", "meta-llama/Llama-3.2-1B", "--framework", "mlx", "--seq", "64"]) == 0
    out = capsys.readouterr().out
    assert "derived for Metal" in out and "not measured" in out
    assert "verified on the CPU" in out
    assert "what nvidia-smi shows" not in out


def test_profile_mlx_json_carries_the_metal_view(capsys):
    argv = ["profile", "meta-llama/Llama-3.2-1B", "--framework", "mlx", "--seq", "64", "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    view = data["metal"]
    assert view["allocated_peak_bytes"] == view["estimate_bytes"] + view["page_rounding_bytes"]
    assert view["estimate_bytes"] == data["estimates"]["refined"]["total_bytes"]
    assert "derived for Metal" in view["status"]


def test_profile_torch_has_no_metal_view(capsys):
    assert main(["profile", "meta-llama/Llama-3.2-1B", "--seq", "64", "--json"]) == 0
    assert "metal" not in json.loads(capsys.readouterr().out)


def test_fit_on_a_mac_says_derived_for_metal(capsys):
    argv = ["fit", "meta-llama/Llama-3.2-1B", "--framework", "mlx", "--gpu", "m2-8gb"]
    assert main([*argv, "--seq", "64"]) == 0
    out = capsys.readouterr().out
    assert "Metal: derived for Metal" in out and "CUDA context" not in out


def test_moments_rebuilt_as_the_closed_form():
    from introspect.adapters import resolve

    from introspect import refined
    from introspect.refined.implementations import resolve_attention

    spec = resolve("meta-llama/Llama-3.2-1B").spec
    for flags in (
        dict(finetune="lora", lora_rank=8, num_layers=16, batch_size=4, precision="bf16"),
        dict(batch_size=2),
    ):
        setup = resolve_attention(spec, TrainingSetup(framework="mlx", seq_len=512, **flags))
        total = refined.estimate(spec, setup).total
        # the T×T kinds at the step's depth: exactly the closed form's peak
        assert max(metal._moment_totals(spec, setup, None)) == total
        fused = metal.fused_attention_peak(spec, setup)
        assert fused is not None and fused < total


def test_fused_attention_not_derived_for_checkpointing():
    from introspect.adapters import resolve

    spec = resolve("meta-llama/Llama-3.2-1B").spec
    setup = TrainingSetup(framework="mlx", seq_len=256, activation_checkpointing=True)
    assert metal.fused_attention_peak(spec, setup) is None
