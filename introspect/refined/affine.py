"""MLX's affine quantization of a frozen base (``mx.quantize``, mode ``affine``): the bytes
of one quantized weight, and which bits a setup's ``--base-quant`` names. A leaf module
(no other ``introspect.refined`` import) so that the torch-side LoRA state and the MLX
moments both read it without an import cycle."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from introspect.setup import TrainingSetup


def affine_bits(setup: TrainingSetup) -> int | None:
    """The bits of an MLX affine base (``--base-quant affine4``/``affine8``), else None."""
    return {"affine4": 4, "affine8": 8}.get(setup.base_quant) if setup.finetune == "lora" else None


def affine_tensor_bytes(d_in: int, d_out: int, bits: int, group_size: int, s: int) -> int:
    """One ``[d_out, d_in]`` weight as ``mx.quantize(w, group_size, bits)`` stores it in the
    affine mode (``mlx/ops.cpp`` ``quantize``; ``QuantizedLinear.from_linear`` in
    ``mlx/nn/layers/quantized.py``): uint32 words ``[d_out, d_in·bits/32]`` — bits/8 bytes
    per value — and ``scales`` and ``biases`` ``[d_out, d_in/group_size]`` each in the
    weight's own dtype (``s`` bytes: 2 for a BF16 checkpoint, 4 for FP32)."""
    return d_out * d_in * bits // 8 + 2 * d_out * (d_in // group_size) * s


def constant_bytes(setup: TrainingSetup) -> int:
    """Bytes of each scale and bias: the weights' dtype, which MLX steps in — 2 under
    ``bf16``/``mixed`` precision or 16-bit weights, else 4 (``introspect.refined.mlx``
    ``dtype_of``)."""
    return 2 if setup.precision in ("mixed", "bf16") or setup.weight_bytes == 2 else 4
