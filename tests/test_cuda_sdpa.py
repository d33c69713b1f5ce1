"""CUDA's fused attention kernels, dry-run through their meta functions (the shapes the
CUDA kernels return, ``torch/_meta_registrations.py``; no GPU needed): what each keeps
for backward equals the closed form's attention terms on ``--device cuda``, for the
kernel :mod:`introspect.refined.cuda_sdpa` says ``select_sdp_backend`` picks.

Why meta tensors and not a fake CUDA device: under ``FakeTensorMode`` the CPU-only build
makes ``device="cuda"`` fake tensors, but the first op on them aborts the process
(``getDeviceGuardImpl``, c10/core/impl/DeviceGuardImplInterface.h: "PyTorch is not
linked with support for cuda devices"), so the meta kernels are called directly."""

from __future__ import annotations

import pytest
import torch
from specs import STACK_ATTENTION, STACK_BASE, STACK_DENSE
from specs import stack as _spec

from introspect.layers import Attention, FeedForward, LayerKind
from introspect.refined import cuda_sdpa, hf_saved, reference, saved
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

aten = torch.ops.aten
CUDA = TrainingSetup(seq_len=100, batch_size=2, attention="memory_efficient", device="cuda")
KEPT = ("q", "k", "v", "context")
#: transformers' class with grouped-query attention (4 query heads, 2 key/value heads).
GQA = ModelSpec(**STACK_BASE, num_key_value_heads=2)


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _meta_saved(kernel: str, B: int, h: int, kv: int, T: int, D: int, dtype) -> int:
    """Bytes the kernel's backward reads: q, k, v as given (transformers' layout, the
    (B, T, h, D) projection transposed), the output and the log-sum-exp."""

    def heads(n: int) -> torch.Tensor:
        return torch.empty(B, T, n, D, device="meta", dtype=dtype).transpose(1, 2)

    q, k, v = heads(h), heads(kv), heads(kv)
    if kernel == "flash":
        out, lse, *_ = aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True)
    else:
        out, lse, *_ = aten._scaled_dot_product_efficient_attention(q, k, v, None, True)
    assert lse.dtype == torch.float32
    return sum(_nbytes(t) for t in (q, k, v, out, lse))


@pytest.mark.parametrize(
    ("precision", "packed", "kernel"),
    [
        ("fp32", False, "efficient"),  # no FP32 flash: the memory-efficient kernel
        ("bf16", False, "flash"),
        ("amp", False, "flash"),  # autocast casts SDPA's inputs to BF16
        ("bf16", True, "efficient"),  # a mask: not flash
    ],
)
def test_attention_saved_bytes_equal_the_cuda_kernels_meta_outputs(precision, packed, kernel):
    spec = GQA
    setup = CUDA.replace(precision=precision, packed_sequences=packed)
    terms = saved.per_layer(spec, setup)
    B, T, D, h = setup.batch_size, setup.seq_len, spec.head_size, spec.num_attention_heads
    # A mask turns off transformers' enable_gqa: K and V repeated to every head.
    kv = h if packed else spec.kv_heads
    query = 2 if precision == "amp" else setup.activation_bytes
    assert cuda_sdpa.backend(query, D, D, masked=packed) == kernel
    dtype = torch.float32 if query == 4 else torch.bfloat16
    closed = sum(terms[f"attention/linear/{n}"] for n in KEPT) + terms["attention/logsumexp"]
    assert closed == _meta_saved(kernel, B, h, kv, T, D, dtype)


def test_the_memory_efficient_log_sum_exp_is_padded_to_32_rows():
    setup = CUDA.replace(precision="fp32")
    spec = _spec((STACK_DENSE, 4))
    B, h, T = setup.batch_size, spec.num_attention_heads, setup.seq_len
    assert saved.per_layer(spec, setup)["attention/logsumexp"] == B * h * 128 * 4
    # On CPU (the flash kernel for CPU) and for CUDA's flash: T rows.
    cpu = saved.per_layer(spec, setup.replace(device="cpu"))
    assert cpu["attention/logsumexp"] == B * h * T * 4
    bf16 = saved.per_layer(spec, setup.replace(precision="bf16"))
    assert bf16["attention/logsumexp"] == B * h * T * 4


def test_cudnn_keeps_flash_sized_log_sum_exp():
    q = torch.empty(2, 4, 100, 16, device="meta", dtype=torch.bfloat16)
    out, lse, *_ = aten._scaled_dot_product_cudnn_attention(q, q, q, None, True)
    flash = aten._scaled_dot_product_flash_attention(q, q, q, 0.0, True)[1]
    assert _nbytes(lse) == _nbytes(flash)


def test_backend_selection_follows_sdp_utils():
    assert cuda_sdpa.backend(2, 128, 128, masked=False) == "flash"
    assert cuda_sdpa.backend(4, 128, 128, masked=False) == "efficient"
    assert cuda_sdpa.backend(2, 320, 320, masked=False) == "efficient"  # flash: ≤ 256
    assert cuda_sdpa.backend(2, 192, 128, masked=False) == "efficient"  # MLA's widths
    assert cuda_sdpa.backend(2, 128, 128, masked=True) == "efficient"


def test_reference_model_mla_on_cuda_runs_memory_efficient():
    mla = LayerKind(
        attention=Attention(
            kind="mla",
            **STACK_ATTENTION | {"num_key_value_heads": 4},
            qk_nope_head_dim=16,
            qk_rope_head_dim=8,
            v_head_dim=16,
            kv_lora_rank=32,
        ),
        feed_forward=FeedForward(intermediate_size=96),
    )
    setup = CUDA.replace(implementation="reference", precision="bf16")
    terms = reference.per_layer(_spec((mla, 4)), setup, mla)
    assert terms["attention/logsumexp"] == 2 * 4 * 128 * 4


def test_dropout_inside_the_fused_kernels_keeps_rng_state_not_a_mask():
    q = torch.empty(2, 4, 100, 16, device="meta", dtype=torch.bfloat16)
    flash = aten._scaled_dot_product_flash_attention(q, q, q, 0.1, True)
    efficient = aten._scaled_dot_product_efficient_attention(q, q, q, None, True, 0.1, True)
    for returned in (flash, efficient):
        tensors = [t for t in returned if isinstance(t, torch.Tensor)]
        # Nothing T×T: the output, the log-sum-exp, a philox seed and offset (and
        # flash's empty debug mask).
        assert max(t.numel() for t in tensors) == q.numel()
        assert sum(_nbytes(t) for t in tensors if t.dtype in (torch.int64, torch.uint64)) <= 24


def test_cuda_dropout_mask_is_one_byte():
    x = torch.empty(2, 100, 64, device="meta", dtype=torch.bfloat16)
    _, mask = aten.native_dropout(x, 0.1, True)
    assert mask.dtype == torch.bool
    assert hf_saved.dropout_mask_bytes(CUDA, 2) == mask.element_size() == 1
