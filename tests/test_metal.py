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
    assert view["mlx_0_24_fused_attention_bytes"] <= view["allocated_peak_bytes"]
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


def test_no_t2_floor_sits_under_the_fused_peak():
    from introspect.adapters import resolve

    from introspect import refined
    from introspect.refined.implementations import resolve_attention

    spec = resolve("meta-llama/Llama-3.2-1B").spec
    flags = dict(finetune="lora", lora_rank=8, num_layers=16, batch_size=4, precision="bf16")
    setup = resolve_attention(spec, TrainingSetup(framework="mlx", seq_len=512, **flags))
    total = refined.estimate(spec, setup).total
    floor, fused = metal.t2_free_peak(spec, setup), metal.fused_attention_peak(spec, setup)
    assert floor is not None and floor < fused < total
    # the floor is the one-layer line with the T×T kinds' per-layer and fixed parts dropped
    assert floor == max(metal._moment_totals(spec, setup, 0, t2_fixed=False))
    assert floor <= max(metal._moment_totals(spec, setup, 0))


@pytest.mark.parametrize(
    ("date", "compiled"),
    [
        ("2024-03-11", False),
        ("2024-03-12", True),  # mlx-lm 93a8ac0f (#528)
        ("2024-03-23", True),
        ("2024-03-24", False),  # 0cd45a2b (#608) removed it
        ("2024-10-30", False),
        ("2025-03-22", False),  # a5322574: step() is a plain function
        ("2025-03-25", True),  # b92c8f3e (#53)
        ("2026-05-19T10:00", True),
        (None, None),
        ("", None),
    ],
)
def test_mlx_lm_compiled_its_step_by_date(date, compiled):
    assert metal.mlx_lm_step_compiled(date) == compiled


def test_force_fused_takes_the_024_path_on_any_version():
    # scaled_dot_product_attention.cpp:728-743: force_fused is checked before is_training
    assert metal.attention_kept_in_training("0.31.0") is True
    assert metal.attention_kept_in_training("0.31.0", force_fused=True) is False
    assert metal.attention_kept_in_training(None, force_fused=True) is False


def test_fused_attention_not_derived_for_checkpointing():
    from introspect.adapters import resolve

    spec = resolve("meta-llama/Llama-3.2-1B").spec
    setup = TrainingSetup(framework="mlx", seq_len=256, activation_checkpointing=True)
    assert metal.fused_attention_peak(spec, setup) is None


def test_profile_mlx_on_the_cpu_has_no_metal_view(capsys):
    argv = ["profile", "meta-llama/Llama-3.2-1B", "--framework", "mlx", "--device", "cpu"]
    assert main([*argv, "--seq", "64", "--json"]) == 0
    assert "metal" not in json.loads(capsys.readouterr().out)


@pytest.mark.slow
def test_emulated_metal_kernels_keep_values_and_gradients():
    mx = pytest.importorskip("mlx.core")
    from introspect.measure.mlx_metal_kernels import metal_kernels

    x = mx.random.normal((2, 5, 16), key=mx.random.key(0))
    w = mx.random.normal((16,), key=mx.random.key(1))

    def norm_loss(x, w):
        return (mx.fast.rms_norm(x, w, 1e-5) ** 2).sum()

    def rope_loss(x):
        return (mx.fast.rope(x, 16, traditional=False, base=1e4, scale=1.0, offset=3) ** 3).sum()

    plain = mx.grad(norm_loss, argnums=(0, 1))(x, w), mx.grad(rope_loss)(x)
    with metal_kernels():
        fused = mx.grad(norm_loss, argnums=(0, 1))(x, w), mx.grad(rope_loss)(x)
        assert mx.allclose(
            mx.fast.rms_norm(x, w, 1e-5),
            x * mx.rsqrt(mx.mean(x * x, axis=-1, keepdims=True) + 1e-5) * w,
            atol=1e-5,
        )
    for a, b in zip((*plain[0], plain[1]), (*fused[0], fused[1]), strict=True):
        assert mx.allclose(a, b, atol=1e-4).item()


@pytest.mark.slow
def test_emulated_fused_norm_lowers_a_bf16_cpu_step():
    pytest.importorskip("mlx_lm")
    from introspect.adapters.hf_config import spec_from_config

    from introspect.measure import mlx_lm_models
    from introspect.measure.mlx_metal_kernels import metal_kernels

    raw = dict(
        model_type="llama", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=128, vocab_size=256,
        tie_word_embeddings=True, rms_norm_eps=1e-5, max_position_embeddings=256,
    )  # fmt: skip
    spec = spec_from_config(raw, source="tiny")
    setup = TrainingSetup(
        framework="mlx", implementation="mlx_lm", precision="bf16", activation_dtype="bf16",
        weights_dtype="bf16", attention="memory_efficient", batch_size=2, seq_len=64,
        finetune="lora", lora_rank=4,
    )  # fmt: skip

    def peak() -> int:
        return mlx_lm_models.measure(raw, "tiny", spec, setup, compiled=False, repeats=1).peak_bytes

    plain = peak()
    with metal_kernels(rope=False):
        fused = peak()
    assert fused < plain  # Metal's RMSNorm keeps x and w, the fallback its FP32 copy too


def test_fused_attention_vjp_replay_holds_three_t2_tensors():
    # MLX 0.24.x's Custom::vjp differentiates the fallback in the backward: a CPU replay of
    # that VJP at ten small shapes holds three B·h·T² tensors at once, in either dtype
    mx = pytest.importorskip("mlx.core")
    from introspect.measure.mlx_metal_kernels import attention_vjp_t2_bytes, sdpa_fallback_024

    shapes = [(1, 4, 8, 16), (1, 2, 8, 16), (1, 2, 8, 16)]
    q, k, v = (mx.random.normal(s, key=mx.random.key(i)) for i, s in enumerate(shapes))

    def loss(f):
        return lambda q, k, v: (f(q, k, v) ** 2).sum()

    def fused(q, k, v):
        return mx.fast.scaled_dot_product_attention(q, k, v, scale=0.25, mask="causal")

    ref = mx.grad(loss(fused), argnums=(0, 1, 2))(q, k, v)
    ours = mx.grad(loss(sdpa_fallback_024(0.25, 4, 2, causal=True)), argnums=(0, 1, 2))(q, k, v)
    assert all(mx.allclose(a, b, atol=1e-4).item() for a, b in zip(ref, ours, strict=True))
    for dtype, size in (("bf16", 2), ("fp32", 4)):
        held = attention_vjp_t2_bytes(dtype)
        assert held == pytest.approx(metal.FUSED_VJP_T2_TENSORS * size, rel=0.03)


def test_fused_peak_adds_one_layers_vjp_to_the_backward_moment():
    from introspect.adapters import resolve

    from introspect.refined.implementations import resolve_attention

    spec = resolve("meta-llama/Llama-3.2-1B").spec
    flags = dict(finetune="lora", lora_rank=8, num_layers=16, batch_size=4, precision="bf16")
    setup = resolve_attention(spec, TrainingSetup(framework="mlx", seq_len=4095, **flags))
    vjp = metal.fused_vjp_bytes(spec, setup)
    # three BF16 B·h·T² tensors and the T² bool mask
    assert vjp == 3 * 2 * 4 * 32 * 4095**2 + 4095**2
    free = metal._moment_totals(spec, setup, 0, t2_fixed=False)
    phases = metal._phases(spec, setup)
    backward = max(t for p, t in zip(phases, free, strict=True) if p == "backward")
    fused = max(backward + vjp, max(free))
    assert metal.fused_attention_peak(spec, setup) == min(
        fused, max(metal._moment_totals(spec, setup, None))
    )


@pytest.mark.slow
def test_emulated_024_attention_step_sits_between_floor_and_derived_peak():
    # a real mlx-lm LoRA step with 0.24.x's fused attention emulated (forward keeps only
    # its output, VJP the fallback's built in the backward) peaks above the T×T-free floor
    # and at most the derived peak: the VJP's three tensors on the backward moment's rest
    pytest.importorskip("mlx_lm")
    from introspect.adapters.hf_config import spec_from_config

    from introspect.measure import mlx_lm_models
    from introspect.measure.mlx_metal_kernels import fused_attention_024

    raw = dict(
        model_type="llama", hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=512, vocab_size=512, head_dim=64,
        tie_word_embeddings=True, rms_norm_eps=1e-5, max_position_embeddings=2048,
    )  # fmt: skip
    spec = spec_from_config(raw, source="tiny")
    setup = TrainingSetup(
        framework="mlx", implementation="mlx_lm", precision="bf16", activation_dtype="bf16",
        weights_dtype="bf16", attention="memory_efficient", batch_size=2, seq_len=640,
        finetune="lora", lora_rank=4,
    )  # fmt: skip
    with fused_attention_024():
        m = mlx_lm_models.measure(raw, "tiny", spec, setup, compiled=False, repeats=1)
    floor, derived = metal.t2_free_peak(spec, setup), metal.fused_attention_peak(spec, setup)
    assert floor < m.peak_bytes <= derived
