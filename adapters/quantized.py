"""Quantized checkpoints counted as parameters, not storage elements, by each format's
packing rule. A packed tensor's header shape counts bytes or words; :func:`unpack`
rewrites the inventory so every quantized weight has the shape of the float weight it
stands for, and its scales, zero points and quant states count as buffers (stored, not
parameters). Every rule is checked against the companions' shapes, so a wrongly packed
tensor is one line naming it and the shape it should have.

* GPTQ (the ``register_buffer`` calls of AutoGPTQ's and GPTQModel's ``QuantLinear``,
  which ``transformers/quantizers/quantizer_gptq.py`` loads; neither is installed here,
  so the shapes are theirs as published): ``qweight`` int32 ``[in // 32 · bits, out]``
  (the in-dimension packs 32 values into ``bits`` words, so 3-bit packs 32 values per 3
  words), ``qzeros`` int32 ``[groups, out // 32 · bits]``, ``scales`` ``[groups, out]``,
  ``g_idx`` ``[in]``; ``groups = ceil(in / group_size)`` (1 when ``group_size`` is -1),
  and without ``g_idx``, ``in = words · 32 / bits``, which must be whole. Bits 2, 3, 4, 8
  (``GPTQConfig.post_init`` in ``transformers/utils/quantization_config.py``).
* AWQ (AutoAWQ ``WQLinear_GEMM``; ``_transform_awq_weights`` in ``mlx_lm/utils.py``
  reads the same layout): the out-dimension is packed, ``qweight`` ``[in, out · bits /
  32]``, ``qzeros`` ``[in // group_size, out · bits / 32]``, ``scales`` ``[in //
  group_size, out]``; the ``gemv`` format stores ``qweight`` ``[out, in · bits / 32]``.
  Bits 4 only (AutoAWQ's kernels raise for any other width). With no settings, the
  side ``scales`` shares with ``qweight`` tells GPTQ from AWQ, and ``g_idx`` or the
  companions' widths give the bits.
* bitsandbytes 4-bit (``Params4bit``; ``bitsandbytes/_ops.py`` and ``QuantState.as_dict``
  in ``bitsandbytes/functional.py``): the weight is flat, ``[(n + 1) // (2 · itemsize),
  1]`` of the storage dtype for ``n`` values, and ``weight.quant_state.bitsandbytes__nf4``
  (or ``__fp4``) is the JSON of the original ``shape``, ``blocksize`` and ``quant_type``;
  ``weight.absmax`` holds ``ceil(n / blocksize)`` values. 8-bit (``Int8Params``,
  ``bitsandbytes/nn/modules.py``): the weight keeps its ``[out, in]`` shape in int8, with
  ``SCB`` ``[out]`` and ``weight_format`` beside it.
* FP8 (``transformers/integrations/finegrained_fp8.py``, ``FP8Linear``): the weight is
  ``[out, in]`` float8, one value per parameter, and ``weight_scale_inv`` is
  ``[ceil(out / b0), ceil(in / b1)]`` for ``weight_block_size [b0, b1]`` (default
  ``[128, 128]``; a null block size means one per-tensor scale).
* MXFP4 (gpt-oss, ``transformers/integrations/mxfp4.py``): ``X_blocks`` uint8 ``[..., G,
  16]`` (blocks of 32 FP4 values, two a byte) stands for ``X`` ``[..., G · 32]``;
  ``X_scales`` uint8 ``[..., G]``, one exponent per block (``blocks.shape[:-1] ==
  scales.shape``, asserted in ``_convert_moe_packed_tensors``).
* MLX (``mlx.core.quantize``, saved by mlx-lm with a ``quantization`` block in
  config.json): the weight is uint32 ``[..., out, in · bits / 32]``, ``scales`` (and, in
  the ``affine`` mode, ``biases``) ``[..., out, in / group_size]``; affine takes bits 1–6
  or 8 and group sizes 32, 64, 128; ``mxfp4``/``mxfp8``/``nvfp4`` take (4, 32), (8, 32)
  and (4, 16); a module path inside the block overrides them for that module
  (``mlx_lm/utils.py``, ``quantize_model``).

Illegal settings (``quantization_config.bits`` 0, 64, ``true`` or ``"4"``; a
``weight_block_size`` that is not two positive integers) are refused naming the key and
the file, as transformers' own config classes refuse them.
"""

from __future__ import annotations

import json
from collections import Counter
from math import gcd, prod
from pathlib import Path

from introspect._record import field, record, replace
from introspect.errors import CheckpointError, ConfigError

TYPE_CHECKING = False  # typing's flag without importing typing (see introspect._record)
if TYPE_CHECKING:
    from collections.abc import Callable

    from .tensor_roles import TensorInfo

    #: Reads a small tensor's bytes (the bitsandbytes quant state) from its file.
    ReadBytes = Callable[[TensorInfo], bytes]

#: Legal bit widths: GPTQConfig.post_init (transformers), AutoAWQ's WQLinear kernels.
GPTQ_BITS = (2, 3, 4, 8)
AWQ_BITS = (4,)
#: MLX: mx.quantize's widths and group sizes per mode (mlx 0.32; affine refuses 7 bits).
MLX_MODES = {
    "affine": ((1, 2, 3, 4, 5, 6, 8), (32, 64, 128)),
    "mxfp4": ((4,), (32,)),
    "mxfp8": ((8,), (32,)),
    "nvfp4": ((4,), (16,)),
}
#: Settings that name no method could be any of the integer formats' widths.
ANY_BITS = (1, 2, 3, 4, 5, 6, 8)
#: bitsandbytes blocksizes (``quantize_4bit`` in bitsandbytes/functional.py).
BNB_BLOCKSIZES = (32, 64, 128, 256, 512, 1024, 2048, 4096)
#: AutoGPTQ / GPTQModel write their settings here when config.json has none.
QUANTIZE_CONFIG = "quantize_config.json"
#: A bitsandbytes quant state is a short JSON; anything larger is not one.
MAX_QUANT_STATE_BYTES = 65_536
_WORD = 32  # bits in the int32 words GPTQ and AWQ pack into
_FP8 = ("F8_E4M3", "F8_E5M2")
_ITEMSIZE = {"U8": 1, "I8": 1, "F16": 2, "BF16": 2, "F32": 4, "F64": 8, "I32": 4, "U32": 4}
_BNB_STATE = ".quant_state.bitsandbytes__"
_BNB_COMPANIONS = (".absmax", ".quant_map", ".nested_absmax", ".nested_quant_map")
_FP8_COMPANIONS = (
    ".weight_scale_inv",
    ".weight_scale",
    ".input_scale",
    ".input_scale_ub",  # fbgemm_fp8
    ".activation_scale",
)
#: Methods whose packing rules :func:`unpack` applies ("" = settings naming none).
UNPACKED = ("", "gptq", "awq", "bitsandbytes", "fp8", "mxfp4", "mlx")
_PACKED_COMPANIONS = (".qzeros", ".scales", ".g_idx")


@record
class QuantConfig:
    """What the checkpoint's quantization settings say, validated.

    ``method`` is ``""`` when no settings were found; ``bits`` and ``group_size`` are
    ``None`` when not given; ``block`` is FP8's ``weight_block_size`` (``None`` for a
    per-tensor scale); ``source`` names the file and ``prefix`` the key path
    (``quantization_config.`` inside config.json, empty in quantize_config.json)."""

    method: str = ""
    bits: int | None = None
    group_size: int | None = None
    awq_format: str = "gemm"
    block: tuple[int, int] | None = (128, 128)
    source: str = ""
    prefix: str = "quantization_config."
    #: MLX: (bits, group_size, mode) per module path, ``None`` for a module left in float.
    mlx: dict[str, tuple[int, int, str] | None] = field(default_factory=dict)

    def key(self, name: str) -> str:
        return f"{self.prefix}{name} in {self.source}"


def read_quant_config(config: dict | None, config_path: Path | None, folder: Path) -> QuantConfig:
    """The quantization settings: config.json's ``quantization_config``, else AutoGPTQ's
    quantize_config.json beside it. Raises :class:`ConfigError` naming the key and file
    for a value the format does not admit."""
    quant = config_quant(config, str(config_path))
    own = config or {}
    if (
        isinstance(own.get("quantization"), dict)
        or own.get("quantization_config") is not None
        or not (folder / QUANTIZE_CONFIG).is_file()
    ):
        return quant
    from .config_file import load_config

    raw = load_config(folder / QUANTIZE_CONFIG)
    raw.setdefault("quant_method", "gptq")
    return _settings(raw, QuantConfig(source=str(folder / QUANTIZE_CONFIG), prefix=""))


def config_quant(config: dict | None, source: str) -> QuantConfig:
    """The settings config.json itself holds: mlx-lm's ``quantization`` block, else
    ``quantization_config``; ``QuantConfig()`` when it has neither. ``source`` names the
    file in errors. A config.json read alone (no weights) is checked by the same rules,
    so an illegal setting is refused whether or not the weights are beside it."""
    if isinstance((config or {}).get("quantization"), dict):  # mlx-lm's own block
        return _mlx_config(config["quantization"], source)
    raw = (config or {}).get("quantization_config")
    if raw is None:
        return QuantConfig()
    return _settings(raw, QuantConfig(source=source))


def _settings(raw: object, blank: QuantConfig) -> QuantConfig:
    """``quantization_config`` (or quantize_config.json) validated by its method's rules."""
    source = blank.source
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{source}: quantization_config is {raw!r}, not an object; "
            "give it as the quantizer wrote it or remove it"
        )
    method = raw.get("quant_method", "")
    if not isinstance(method, str):
        raise ConfigError(f"{blank.key('quant_method')} is {method!r}; it must be a string")
    method = method.lower()
    if method in ("", "bitsandbytes") and _bnb_flags(raw, blank):
        method = "bitsandbytes"
    quant = replace(blank, method=method)
    if method in ("gptq", "awq", ""):
        legal = {"awq": AWQ_BITS, "gptq": GPTQ_BITS}.get(method, ANY_BITS)
        # An explicit null is refused, not read as "infer from the shapes": GPTQConfig
        # and AutoAWQ take an integer width, and a null width hides a broken config.
        key = next((k for k in ("bits", "w_bit") if k in raw), None)
        if key is not None:
            quant = replace(quant, bits=_legal_bits(raw[key], legal, quant, key))
        size = raw.get("group_size", raw.get("q_group_size"))
        if size is not None:
            if type(size) is not int or (size != -1 and size <= 0):
                raise ConfigError(
                    f"{quant.key('group_size')} is {size!r}; it must be a positive integer "
                    "or -1 (one group per column)"
                )
            quant = replace(quant, group_size=size)
        if method == "awq":
            form = str(raw.get("version", raw.get("format", "gemm"))).lower()
            if form not in ("gemm", "gemv"):
                raise ConfigError(
                    f"{quant.key('version')} is {form!r}: introspect reads AWQ's gemm and gemv "
                    "packings only; give the checkpoint in one of them"
                )
            quant = replace(quant, awq_format=form)
    if method == "fp8":
        block = raw.get("weight_block_size", [128, 128])
        if block is not None and (
            not isinstance(block, list | tuple)
            or len(block) != 2
            or any(type(b) is not int or b <= 0 for b in block)
        ):
            raise ConfigError(
                f"{quant.key('weight_block_size')} is {block!r}; it must be two positive "
                "integers such as [128, 128], or null for one scale per tensor"
            )
        quant = replace(quant, block=tuple(block) if block is not None else None)
    return quant


def _mlx_config(raw: dict, source: str) -> QuantConfig:
    """mlx-lm's ``quantization`` block: defaults, and per-module overrides (an object, or
    ``false`` for a module kept in float)."""
    quant = QuantConfig(method="mlx", source=source, prefix="quantization.")
    default = _mlx_params(raw, quant, "")
    modules: dict[str, tuple[int, int, str] | None] = {"": default}
    for path, value in raw.items():
        if isinstance(value, dict):
            modules[path] = _mlx_params(value, quant, path + ".")
        elif value is False:
            modules[path] = None
    return replace(quant, mlx=modules)


def _mlx_params(raw: dict, quant: QuantConfig, path: str) -> tuple[int, int, str]:
    mode = raw.get("mode", "affine")
    if mode not in MLX_MODES:
        raise ConfigError(
            f"{quant.key(path + 'mode')} is {json.dumps(mode)}; MLX quantizes in the modes "
            f"{', '.join(MLX_MODES)}"
        )
    widths, sizes = MLX_MODES[mode]
    bits, size = raw.get("bits", 4), raw.get("group_size", 64)
    if type(bits) is not int or bits not in widths:
        raise ConfigError(
            f"{quant.key(path + 'bits')} is {json.dumps(bits)}; MLX's {mode} mode packs "
            f"{', '.join(map(str, widths))} bits (a JSON integer); fix the value"
        )
    if type(size) is not int or size not in sizes:
        raise ConfigError(
            f"{quant.key(path + 'group_size')} is {json.dumps(size)}; MLX's {mode} mode takes "
            f"groups of {', '.join(map(str, sizes))}; fix the value"
        )
    return bits, size, mode


def _legal_bits(bits: object, legal: tuple[int, ...], quant: QuantConfig, key: str = "bits") -> int:
    if type(bits) is not int or bits not in legal:
        widths = (
            " or ".join(map(str, legal))
            if len(legal) < 3
            else (", ".join(map(str, legal[:-1])) + f" or {legal[-1]}")
        )
        raise ConfigError(
            f"{quant.key(key)} is {json.dumps(bits)}; {quant.method.upper() or 'GPTQ'} "
            f"packs {widths} bits (a JSON integer); fix the value"
        )
    return bits


def _bnb_flags(raw: dict, quant: QuantConfig) -> bool:
    """Whether ``load_in_4bit``/``load_in_8bit`` ask for bitsandbytes; each must be a
    boolean and at most one true (BitsAndBytesConfig's setters)."""
    flags = {}
    for name in ("load_in_4bit", "load_in_8bit"):
        value = raw.get(name, raw.get("_" + name, False))
        if not isinstance(value, bool):
            raise ConfigError(f"{quant.key(name)} is {value!r}; it must be true or false")
        flags[name] = value
    if all(flags.values()):
        raise ConfigError(
            f"{quant.prefix}load_in_4bit and {quant.prefix}load_in_8bit in {quant.source} "
            "are both true; bitsandbytes "
            "stores one of 4 or 8 bits, so set one of them false"
        )
    kind = raw.get("bnb_4bit_quant_type", "nf4")
    if flags["load_in_4bit"] and kind not in ("nf4", "fp4"):
        raise ConfigError(f"{quant.key('bnb_4bit_quant_type')} is {kind!r}; it must be nf4 or fp4")
    return any(flags.values())


def unpack(
    tensors: list[TensorInfo],
    quant: QuantConfig | None = None,
    *,
    where: str = "",
    read: ReadBytes | None = None,
) -> tuple[list[TensorInfo], list[str]]:
    """The inventory with quantized weights at their float shapes and their companions as
    buffers, and one note per format found. ``where`` names the checkpoint in error
    lines; ``read`` gives a tensor's bytes (only bitsandbytes' quant-state JSON is read).
    Raises :class:`CheckpointError` for a tensor whose shape breaks its format's rule or
    whose companions are missing."""
    quant = quant or QuantConfig()
    by_name = {t.name: t for t in tensors}
    states: dict[str, list[TensorInfo]] = {}  # bitsandbytes weight → its quant states
    for t in tensors:
        if ".quant_state." in t.name:
            states.setdefault(t.name.partition(".quant_state.")[0], []).append(t)
    found: Counter[str] = Counter()
    out: list[TensorInfo] = []
    for t in tensors:
        n = t.name
        stem, _, last = n.rpartition(".")
        if n.endswith("_blocks") and (n[:-7] + "_scales" in by_name or quant.method == "mxfp4"):
            out.append(_mxfp4(t, by_name.get(n[:-7] + "_scales"), where))
            found["MXFP4 (blocks of 32 FP4 values, two a byte)"] += 1
        elif n.endswith("_scales") and (n[:-7] + "_blocks" in by_name or quant.method == "mxfp4"):
            if n[:-7] + "_blocks" not in by_name:
                raise _incomplete(where, t, n[:-7] + "_blocks", "the packed FP4 values")
            out.append(_buffer(t))
        elif last == "qweight":
            weight, what = _packed(t, stem, by_name, quant, where)
            out.append(weight)
            found[what] += 1
        elif "." + last in _PACKED_COMPANIONS and stem + ".qweight" in by_name:
            out.append(_buffer(t))
        elif last in ("qzeros", "g_idx") and quant.method in ("gptq", "awq"):
            # (an orphan ``scales`` may be AWQ's ScaledActivation parameter, so only these)
            raise _incomplete(where, t, stem + ".qweight", "the packed integer weights")
        elif n + ".absmax" in by_name or n in states:
            weight, what = _bnb4(t, states.get(n, []), by_name, where, read)
            out.append(weight)
            found[what] += 1
        elif _bnb4_companion(n, by_name):
            out.append(_buffer(t))
        elif last == "weight" and t.dtype == "U32" and stem + ".scales" in by_name:
            weight, what = _mlx(t, stem, by_name, quant, where)
            out.append(weight)
            found[what] += 1
        elif last in ("scales", "biases") and by_name.get(stem + ".weight", t).dtype == "U32":
            out.append(_buffer(t))
        elif last in ("SCB", "weight_format") and stem + ".weight" in by_name:
            if last == "SCB":
                _bnb8(by_name[stem + ".weight"], t, where)
                found["bitsandbytes 8-bit (LLM.int8, one int8 a value)"] += 1
            out.append(_buffer(t))
        elif "." + last in _FP8_COMPANIONS and stem + ".weight" in by_name:
            if last == "weight_scale_inv" and quant.method == "fp8":
                _fp8_scale(by_name[stem + ".weight"], t, quant, where)
            if last.startswith("weight_scale"):
                found["FP8 weights (one float8 a value) with scales"] += 1
            out.append(_buffer(t))
        else:
            if quant.method == "fp8" and t.dtype in _FP8 and n + "_scale_inv" not in by_name:
                raise _incomplete(where, t, n + "_scale_inv", "its block scales")
            out.append(t)
    notes = [
        f"quantized: {what}: {k} weights counted at their unpacked shapes; their scales, "
        "zero points and quant states are stored but are not parameters"
        for what, k in found.items()
    ]
    if quant.method not in UNPACKED:
        notes.append(
            f"{quant.key('quant_method')} is {quant.method!r}, whose packing introspect does "
            "not unpack: packed tensors are counted as the elements they store, so the count "
            "may be below the model's"
        )
    return out, notes


def _buffer(t: TensorInfo) -> TensorInfo:
    import dataclasses

    from .tensor_roles import BUFFER

    return dataclasses.replace(t, component=BUFFER, role="quantization")


def tensor_info(name: str, shape: tuple[int, ...], dtype: str, file: str = "") -> TensorInfo:
    """:func:`introspect.adapters.tensor_roles.tensor_info`, imported when a checkpoint is
    unpacked: tensor_roles imports ``dataclasses``, which a config.json read alone (the
    closed-form path, :func:`config_quant`) must not pay for."""
    from .tensor_roles import tensor_info as make

    return make(name, shape, dtype, file)


def _at(where: str, t: TensorInfo) -> str:
    return f"{where}: tensor {t.name} (in {t.file})" if where else f"tensor {t.name}"


def _incomplete(where: str, t: TensorInfo, missing: str, what: str) -> CheckpointError:
    return CheckpointError(
        f"{_at(where, t)} has no {missing} ({what}) beside it; the checkpoint is "
        "incomplete (re-download or re-save it)"
    )


def _wrong_shape(where: str, t: TensorInfo, expected: object, rule: str) -> CheckpointError:
    return CheckpointError(
        f"{_at(where, t)} has shape {list(t.shape)}, expected {expected} ({rule}); "
        "the checkpoint is corrupt or its quantization settings disagree with it"
    )


# ---- MXFP4 ---------------------------------------------------------------------------


def _mxfp4(blocks: TensorInfo, scales: TensorInfo | None, where: str) -> TensorInfo:
    """``X_blocks`` ``[..., G, 16]`` → ``X`` ``[..., G · 32]``; ``X_scales`` is ``[..., G]``."""
    base = blocks.name[: -len("_blocks")]
    if scales is None:
        raise _incomplete(where, blocks, base + "_scales", "one exponent per 32 values")
    if len(blocks.shape) < 2 or blocks.shape[-1] != 16 or blocks.dtype != "U8":
        expected = [*blocks.shape[:-1], 16] if len(blocks.shape) >= 2 else "[..., G, 16]"
        raise _wrong_shape(where, blocks, f"U8 {expected}", "MXFP4: 16 bytes hold 32 values")
    if scales.shape != blocks.shape[:-1]:
        raise _wrong_shape(
            where, scales, list(blocks.shape[:-1]), f"one scale per block of {blocks.name}"
        )
    shape = (*blocks.shape[:-2], blocks.shape[-2] * 32)
    return tensor_info(base, shape, "MXFP4", blocks.file)


# ---- GPTQ / AWQ ----------------------------------------------------------------------


def _packed(
    qweight: TensorInfo, stem: str, by_name: dict[str, TensorInfo], quant: QuantConfig, where: str
) -> tuple[TensorInfo, str]:
    """``…qweight`` → ``…weight`` ``[out, in]`` by the GPTQ or AWQ packing rule, with the
    companions' shapes checked against it."""
    scales = by_name.get(stem + ".scales")
    qzeros, g_idx = by_name.get(stem + ".qzeros"), by_name.get(stem + ".g_idx")
    if qweight.dtype not in ("I32", "U32") or len(qweight.shape) != 2:
        raise _wrong_shape(where, qweight, "a 2-D I32 tensor", "32-bit words of packed integers")
    if scales is None:
        raise _incomplete(where, qweight, stem + ".scales", "one scale per group and column")
    if len(scales.shape) != 2:
        raise _wrong_shape(where, scales, "[groups, columns]", "one scale per group and column")
    method = quant.method
    if method not in ("gptq", "awq"):  # no settings: the layouts differ in which side is packed
        method = "gptq" if g_idx is not None or qweight.shape[1] == scales.shape[1] else "awq"
    gemv = method == "awq" and quant.awq_format == "gemv"
    bits = quant.bits or _bits_from_shapes(qweight, scales, qzeros, g_idx, method, gemv, where)
    if bits not in (GPTQ_BITS if method == "gptq" else AWQ_BITS):
        raise ConfigError(
            f"{quant.key('bits')} is {bits} but {qweight.name} is {method.upper()}-packed, "
            f"which takes {', '.join(map(str, GPTQ_BITS if method == 'gptq' else AWQ_BITS))} "
            "bits; fix the value"
        )
    rows, cols = qweight.shape
    size = quant.group_size
    if method == "gptq":  # [in // 32 · bits, out]; groups = ceil(in / group_size)
        out = cols
        if g_idx is not None:
            if len(g_idx.shape) != 1:
                raise _wrong_shape(where, g_idx, "[in]", "one group index per input")
            inp = g_idx.shape[0]
            if rows not in _words(inp, bits):
                expected = [min(_words(inp, bits)), out]
                raise _wrong_shape(where, qweight, expected, f"{inp} inputs of {bits} bits")
        else:
            inp = _unpacked(where, qweight, 0, bits)
        groups = {1} if size in (None, -1) else {-(-inp // size)}
    elif gemv:  # [out, in · bits / 32]; its scales are padded for the kernel, not checked
        out, inp = rows, _unpacked(where, qweight, 1, bits)
    else:  # AWQ gemm: [in, out · bits / 32]; groups = in // group_size
        inp, out = rows, _unpacked(where, qweight, 1, bits)
        groups = {1} if size in (None, -1) else {inp // size, -(-inp // size)}
    if not gemv:
        if size is None:
            groups = {scales.shape[0]}
        if scales.shape[0] not in groups or scales.shape[1] != out:
            rule = f"one scale per output and per group of {size or 'all'} inputs"
            raise _wrong_shape(where, scales, [min(groups), out], rule)
        if qzeros is not None and (
            len(qzeros.shape) != 2
            or qzeros.shape[0] != scales.shape[0]
            or qzeros.shape[1] not in _words(out, bits)
        ):
            expected = [scales.shape[0], min(_words(out, bits))]
            raise _wrong_shape(where, qzeros, expected, f"{out} zero points of {bits} bits a group")
    label = f"INT{bits} (packed {qweight.dtype})"
    weight = tensor_info(stem + ".weight", (out, inp), label, qweight.file)
    per = f"{_WORD // bits} values a word" if _WORD % bits == 0 else f"32 values per {bits} words"
    return weight, f"{method.upper()} {bits}-bit ({per})"


def _words(values: int, bits: int) -> set[int]:
    """Words that hold ``values`` packed at ``bits``: ``values // 32 · bits`` as AutoGPTQ
    and GPTQModel allocate them, or ``ceil(values · bits / 32)``; equal when 32 divides
    ``values``."""
    return {values // _WORD * bits, -(-values * bits // _WORD)}


def _bits_from_shapes(qweight, scales, qzeros, g_idx, method, gemv, where) -> int:
    """The bit width the companions imply when no settings give it: packed words · 32
    over the values they hold."""
    if method == "gptq" and g_idx is not None and g_idx.shape and g_idx.shape[0]:
        words, values = qweight.shape[0], g_idx.shape[0]
    elif method == "awq" and not gemv and scales.shape[1]:
        words, values = qweight.shape[1], scales.shape[1]
    elif qzeros is not None and len(qzeros.shape) == 2 and scales.shape[1] and not gemv:
        words, values = qzeros.shape[1], scales.shape[1]
    else:
        raise CheckpointError(
            f"{_at(where, qweight)}: the bit width is not stored and the shapes do not fix "
            "it; give the config.json with its quantization_config.bits"
        )
    bits, rest = divmod(words * _WORD, values)
    legal = GPTQ_BITS if method == "gptq" else AWQ_BITS
    if rest or bits not in legal:
        raise CheckpointError(
            f"{_at(where, qweight)}: its shape {list(qweight.shape)} packs "
            f"{words * _WORD / values:g} bits a value, not one of {method.upper()}'s "
            f"{', '.join(map(str, legal))}; the checkpoint is corrupt"
        )
    return bits


def _unpacked(where: str, t: TensorInfo, axis: int, bits: int) -> int:
    """Values held along ``axis``: ``words · 32 / bits``, which must be whole."""
    values, rest = divmod(t.shape[axis] * _WORD, bits)
    if rest:
        step = bits // gcd(bits, _WORD)
        expected: list = list(t.shape)
        expected[axis] = f"a multiple of {step}"
        raise _wrong_shape(where, t, expected, f"{bits}-bit values packed 32 per {step} words")
    return values


# ---- MLX -----------------------------------------------------------------------------


def _mlx(
    packed: TensorInfo, stem: str, by_name: dict[str, TensorInfo], quant: QuantConfig, where: str
) -> tuple[TensorInfo, str]:
    """``…weight`` uint32 ``[..., out, in · bits / 32]`` → ``[..., out, in]``, with
    ``scales``/``biases`` ``[..., out, in / group_size]``."""
    if quant.method != "mlx":
        raise CheckpointError(
            f"{_at(where, packed)} is MLX-packed (uint32 with {stem}.scales) but no "
            "config.json with mlx-lm's quantization block (bits, group_size) is beside it; "
            "give the model's config.json"
        )
    params = quant.mlx.get(stem, quant.mlx[""])  # overrides are keyed by module path
    if params is None:
        raise CheckpointError(
            f"{_at(where, packed)} is packed but {quant.key(stem)} says that "
            "module is not quantized; the checkpoint and its config.json disagree"
        )
    bits, size, mode = params
    if len(packed.shape) < 2:
        raise _wrong_shape(where, packed, "[..., out, packed words]", "MLX-packed rows")
    inp = _unpacked(where, packed, len(packed.shape) - 1, bits)
    expected = (*packed.shape[:-1], inp // size)
    companions = ("scales", "biases") if mode == "affine" else ("scales",)
    for name in companions:
        t = by_name.get(f"{stem}.{name}")
        if t is None:
            raise _incomplete(where, packed, f"{stem}.{name}", f"MLX {mode} quantization's {name}")
        if t.shape != expected or inp % size:
            rule = f"one per group of {size} of the {inp} inputs ({bits}-bit {mode})"
            raise _wrong_shape(where, t, list(expected), rule)
    label = f"MLX {mode} {bits}-bit (packed U32)"
    weight = tensor_info(packed.name, (*packed.shape[:-1], inp), label, packed.file)
    return weight, f"MLX {mode} {bits}-bit, groups of {size}"


# ---- bitsandbytes --------------------------------------------------------------------


def _bnb4_companion(name: str, by_name: dict[str, TensorInfo]) -> bool:
    if ".weight." not in name:
        return False
    weight = name.partition(".weight.")[0] + ".weight"
    return weight in by_name and (name.endswith(_BNB_COMPANIONS) or ".quant_state." in name)


def _bnb4(
    weight: TensorInfo,
    states: list[TensorInfo],
    by_name: dict[str, TensorInfo],
    where: str,
    read: ReadBytes | None,
) -> tuple[TensorInfo, str]:
    """The flat packed weight at the shape its quant state records."""
    kinds = [weight.name + _BNB_STATE + k for k in ("nf4", "fp4")]
    if len(states) != 1 or states[0].name not in kinds:
        raise _incomplete(
            where, weight, kinds[0], "exactly one quant state, which records the weight's shape"
        )
    state = _quant_state(states[0], where, read)
    shape, blocksize = state["shape"], state["blocksize"]
    n = prod(shape)
    size = _ITEMSIZE.get(weight.dtype)
    stored = (n + 1) // (2 * size) if size else None
    if stored is None or weight.shape not in ((stored, 1), (stored,)):
        raise _wrong_shape(
            where, weight, [stored, 1], f"{n} 4-bit values of shape {list(shape)}, two a byte"
        )
    absmax = by_name.get(weight.name + ".absmax")
    if absmax is not None and absmax.numel != -(-n // blocksize):
        raise _wrong_shape(
            where, absmax, [-(-n // blocksize)], f"one absmax per block of {blocksize} values"
        )
    kind = state["quant_type"].upper()
    unpacked = tensor_info(weight.name, shape, f"{kind} (packed {weight.dtype})", weight.file)
    return unpacked, f"bitsandbytes 4-bit {kind} (two values a byte)"


def _quant_state(t: TensorInfo, where: str, read: ReadBytes | None) -> dict:
    """The JSON a bitsandbytes quant state packs (``pack_dict_to_tensor``), validated."""
    if t.dtype != "U8" or len(t.shape) != 1 or t.numel > MAX_QUANT_STATE_BYTES:
        raise _wrong_shape(where, t, "U8 [bytes of JSON]", "bitsandbytes' packed quant state")
    if read is None:
        raise CheckpointError(
            f"{_at(where, t)}: bitsandbytes 4-bit weights keep their shape in this tensor's "
            "data, which only a local copy gives; download the checkpoint and give its folder"
        )
    try:
        state = json.loads(read(t).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise CheckpointError(f"{_at(where, t)} is not a quant state's JSON ({e})") from e
    shape = state.get("shape") if isinstance(state, dict) else None
    ok = (
        isinstance(shape, list)
        and 0 < len(shape) <= 8
        and all(type(s) is int and s >= 0 for s in shape)
        and state.get("blocksize") in BNB_BLOCKSIZES
        and type(state.get("blocksize")) is int
        and state.get("quant_type") in ("nf4", "fp4")
    )
    if not ok:
        raise CheckpointError(
            f"{_at(where, t)} does not hold a bitsandbytes quant state (a 'shape' list of "
            f"integers, a 'blocksize' of {', '.join(map(str, BNB_BLOCKSIZES))} and "
            "'quant_type' nf4 or fp4); the checkpoint is corrupt"
        )
    return state


def _bnb8(weight: TensorInfo, scb: TensorInfo, where: str) -> None:
    """LLM.int8: the weight is int8 ``[out, in]`` and ``SCB`` one scale per row."""
    if weight.dtype != "I8" or len(weight.shape) != 2:
        raise _wrong_shape(where, weight, "I8 [out, in]", f"the int8 weight {scb.name} scales")
    if scb.shape != weight.shape[:1]:
        raise _wrong_shape(where, scb, [weight.shape[0]], f"one scale per row of {weight.name}")


# ---- FP8 -----------------------------------------------------------------------------


def _fp8_scale(weight: TensorInfo, scale: TensorInfo, quant: QuantConfig, where: str) -> None:
    """``weight_scale_inv`` is ``[..., ceil(out / b0), ceil(in / b1)]``, or one value for
    a per-tensor scale (FP8Linear)."""
    if quant.block is None:
        if scale.numel != 1:
            raise _wrong_shape(where, scale, [], "one per-tensor scale (weight_block_size null)")
        return
    if len(weight.shape) < 2:
        return
    b0, b1 = quant.block
    *lead, rows, cols = weight.shape
    expected = (*lead, -(-rows // b0), -(-cols // b1))
    if scale.shape != expected:
        raise _wrong_shape(
            where,
            scale,
            list(expected),
            f"ceil([{rows}, {cols}] / weight_block_size [{b0}, {b1}]) of {quant.source}",
        )
