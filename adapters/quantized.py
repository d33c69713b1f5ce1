"""Quantized checkpoints counted as parameters, not storage elements.

A quantized tensor's header shape counts bytes or packed words, and its scales sit
beside it as extra tensors. :func:`unpack` rewrites a header inventory so that every
quantized weight counts the parameters it stands for and its scales and zero points
count as buffers (stored, not parameters):

* FP8 (DeepSeek-V3, ``quant_method: fp8``): ``…weight`` is ``F8_E4M3``, one element per
  parameter already; its ``…weight_scale_inv`` (or ``…weight_scale``) block scales are
  not parameters.
* MXFP4 (gpt-oss): ``…X_blocks`` (``U8 [..., G, 16]``, two FP4 values a byte) stands for
  ``X`` of shape ``[..., G·32]``; ``…X_scales`` (one ``U8`` exponent per 32 values) is not
  a parameter.
* Packed integers (GPTQ, AWQ): ``…qweight`` (``I32``) holds 32/bits values per element;
  ``qzeros``, ``scales`` and ``g_idx`` are not parameters.
* bitsandbytes 4-bit: ``…weight`` (``U8``, two values a byte) with ``…weight.absmax`` /
  ``quant_map`` / ``quant_state…`` companions.

Sources: gpt-oss's ``transformers/integrations/mxfp4.py`` (blocks and scales, 32 values
per scale), DeepSeek-V3's ``weight_scale_inv`` (``transformers/integrations/
finegrained_fp8.py``), AutoGPTQ/AutoAWQ's ``qweight``/``qzeros`` layout, bitsandbytes'
``Params4bit`` serialization.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from .tensor_roles import BUFFER, TensorInfo, tensor_info

_BNB_COMPANIONS = (".absmax", ".quant_map", ".nested_absmax", ".nested_quant_map")


def unpack(
    tensors: list[TensorInfo], config: dict | None = None
) -> tuple[list[TensorInfo], list[str]]:
    """The inventory with quantized weights counted as parameters, and one note per
    quantization found. ``config`` (config.json) gives ``quantization_config.bits`` and
    the method (GPTQ stores ``qweight`` as ``[in/pack, out]``, AWQ as ``[in, out/pack]``)."""
    quant = (config or {}).get("quantization_config") or {}
    bits = quant.get("bits") if isinstance(quant.get("bits"), int) else 4
    method = str(quant.get("quant_method", "")).lower()
    names = {t.name for t in tensors}
    out: list[TensorInfo] = []
    found: Counter[str] = Counter()
    for t in tensors:
        n = t.name
        if n.endswith("_blocks") and n[: -len("_blocks")] + "_scales" in names:
            base = n[: -len("_blocks")]
            shape = (*t.shape[:-2], t.shape[-2] * t.shape[-1] * 2)
            out.append(tensor_info(base, shape, "MXFP4", t.file))
            found["MXFP4 (blocks of 32 FP4 values, two a byte)"] += 1
        elif n.endswith("_scales") and n[: -len("_scales")] + "_blocks" in names:
            out.append(_scale(t))
        elif n.endswith((".weight_scale_inv", ".weight_scale")) and (
            n.rpartition(".")[0] + ".weight" in names
        ):
            out.append(_scale(t))
            found["FP8 weights with block scales"] += 1
        elif n.endswith(".qweight") and t.dtype in ("I32", "U32"):
            per = 32 // bits
            base = n[: -len(".qweight")] + ".weight"
            rows, cols = (t.shape + (1,))[:2]
            shape = (cols * per, rows) if method == "awq" else (cols, rows * per)
            out.append(tensor_info(base, shape, f"INT{bits} (packed {t.dtype})", t.file))
            found[f"{bits}-bit integers packed in {t.dtype} ({method or 'gptq'})"] += 1
        elif n.endswith((".qzeros", ".scales", ".g_idx")) and (
            n.rpartition(".")[0] + ".qweight" in names
        ):
            out.append(_scale(t))
        elif t.dtype == "U8" and n.endswith(".weight") and n + ".absmax" in names:
            shape = (t.shape[0] * 2, *t.shape[1:]) if t.shape else (2,)
            out.append(tensor_info(n, shape, "NF4/FP4 (packed U8)", t.file))
            found["bitsandbytes 4-bit (two values a byte)"] += 1
        elif (
            ".weight." in n
            and (n.endswith(_BNB_COMPANIONS) or ".quant_state." in n)
            and n.partition(".weight.")[0] + ".weight" in names
        ):
            out.append(_scale(t))
        else:
            out.append(t)
    notes = [
        f"quantized: {what}: {k} tensors counted as the parameters they hold; their scales "
        "and zero points are stored but are not parameters"
        for what, k in found.items()
    ]
    return out, notes


def _scale(t: TensorInfo) -> TensorInfo:
    return dataclasses.replace(t, component=BUFFER, role="quantization")
