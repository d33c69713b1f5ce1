"""Which fused SDPA kernel torch runs on CUDA, and the log-sum-exp it keeps for backward.

Selection (``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp``, ``select_sdp_backend``
and ``priority_order``; read at pytorch commit 001f694a): the first kernel whose filters
pass, in the order cuDNN (first only where ``check_prefer_cudnn_attention``: sm90/sm100
with a cuDNN runtime above 9.15), flash, memory-efficient, math. On sm80 and newer:

* **flash** (``can_use_flash_attention``): FP16/BF16 only (``check_dtypes_low_precision``),
  no ``attn_mask`` (``check_for_attn_mask``), q, k, v head dims equal and ≤ 256
  (``check_head_dim_size_flash``); dropout and GQA (``enable_gqa``) accepted.
* **memory-efficient** (``can_use_mem_efficient_attention``): FP32, FP16, BF16; a mask,
  dropout and GQA accepted; head dims divisible by the GEMM alignment (8 for 16-bit,
  4 for FP32: ``minimum_gemm_alignment``), no upper bound; Q/K and V widths may differ.
* **cuDNN** (``can_use_cudnn_attention``): FP16/BF16, a mask accepted.

The query's dtype is the activations' dtype; under autocast 16-bit, because
``scaled_dot_product_attention`` is on autocast's lower-precision list
(``AT_FORALL_LOWER_PRECISION_FP`` in ``aten/src/ATen/autocast_mode.h``). transformers
passes a mask only for packed sequences or a window shorter than the sequence
(``integrations/sdpa_attention.py``), and ``is_causal`` otherwise.

Saved for backward, from the meta kernels in ``torch/_meta_registrations.py`` (the
shapes the CUDA kernels return): flash — the output and an FP32 log-sum-exp
``(B, h, T)`` (``meta__scaled_dot_product_flash_attention``); memory-efficient — the
output and an FP32 log-sum-exp ``(B, h, ⌈T/32⌉·32)``, padded to 32 rows
(``meta__scaled_dot_product_efficient_attention``); cuDNN — the output and an FP32
``(B, h, T, 1)`` (``meta__scaled_dot_product_cudnn_attention``). Each also returns a
philox seed and offset (scalar or two-element 64-bit tensors: the RNG state its dropout
backward regenerates the mask from, so no mask is kept); a few bytes per layer, not
modelled. cuDNN, where preferred, keeps flash's log-sum-exp size; with a mask it differs
from the memory-efficient kernel assumed here by at most 31 rows per head (not modelled).
Head dims off the GEMM alignment fall back to the math kernel: not modelled. Not
modelled either: before the memory-efficient kernel, ``preprocess_mask``
(``aten/src/ATen/native/transformers/attention.cpp``) pads a mask whose strides are not
multiples of 8 to ``T + 8 − T mod 8`` columns (``pad_bias``) and the kernel keeps that
padded storage, so a packed or sliding-window mask on CUDA is up to 8 columns wider
than the B·T·T counted when T is not a multiple of 8.
"""

from __future__ import annotations

FP32 = 4

#: Rows the memory-efficient kernel pads its log-sum-exp to
#: (``math.ceil(M / 32) * 32`` in ``meta__scaled_dot_product_efficient_attention``).
EFFICIENT_LSE_ROWS = 32


def backend(query_bytes: int, qk_head_dim: int, v_head_dim: int, masked: bool) -> str:
    """``"flash"`` or ``"efficient"``: the kernel ``select_sdp_backend`` picks on sm80+
    (cuDNN aside, which keeps flash's set) for a 16-bit or FP32 query."""
    sixteen_bit = query_bytes < FP32
    if sixteen_bit and not masked and qk_head_dim == v_head_dim and qk_head_dim <= 256:
        return "flash"
    return "efficient"


def logsumexp_rows(kernel: str, seq_len: int) -> int:
    """Rows of the FP32 log-sum-exp per (batch, head) the kernel keeps."""
    if kernel == "efficient":
        return -(-seq_len // EFFICIENT_LSE_ROWS) * EFFICIENT_LSE_ROWS
    return seq_len


def logsumexp_bytes(
    batch: int,
    heads: int,
    seq_len: int,
    *,
    device: str,
    query_bytes: int,
    qk_head_dim: int,
    v_head_dim: int,
    masked: bool,
) -> int:
    """Bytes of one layer's log-sum-exp: ``B·h·rows·4``, rows = T on CPU (the flash
    kernel for CPU, ``_scaled_dot_product_flash_attention_for_cpu``) and for CUDA's
    flash, ⌈T/32⌉·32 for CUDA's memory-efficient kernel."""
    rows = seq_len
    if device == "cuda":
        rows = logsumexp_rows(backend(query_bytes, qk_head_dim, v_head_dim, masked), seq_len)
    return batch * heads * rows * FP32
