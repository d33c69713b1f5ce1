"""Quantized checkpoints count parameters, not storage elements: real safetensors files
laid out as FP8 (DeepSeek-V3), MXFP4 (gpt-oss), GPTQ, AWQ and bitsandbytes checkpoints
store them, each built from a float model's tensors (transformers' own class on the meta
device, or the factory's Llama layout) by the format's packing rule, at every legal bit
width — the count must equal the float model's. bitsandbytes files hold the real output
of bitsandbytes' quantize_4bit / int8_vectorwise_quant. Illegal settings and wrongly
packed tensors are one line and exit code 2."""

from __future__ import annotations

import json
import math
import struct

import checkpoint_factory as cf
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from introspect.adapters.hf_config import spec_from_config
from introspect.adapters.safetensors import read_checkpoint

from introspect.cli import main
from introspect.errors import CheckpointError, ConfigError
from introspect.params import parameter_count

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

_BYTES = {"F8_E4M3": 1, "U8": 1, "I32": 4, "F32": 4, "BF16": 2, "F16": 2}


def write_safetensors(path, entries: list[tuple[str, str, tuple[int, ...]]]) -> None:
    """A valid safetensors file: the JSON header and zero bytes for every tensor."""
    header, offset = {}, 0
    for name, dtype, shape in entries:
        size = math.prod(shape) * _BYTES[dtype]
        header[name] = {
            "dtype": dtype,
            "shape": list(shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))


def built(config: dict):
    keys = {k: v for k, v in config.items() if k != "model_type"}
    cfg = transformers.AutoConfig.for_model(config["model_type"], **keys)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    return model, sum(p.numel() for p in model.parameters())


def _folder(tmp_path, config, entries):
    (tmp_path / "config.json").write_text(json.dumps(config))
    write_safetensors(tmp_path / "model.safetensors", entries)
    return read_checkpoint(tmp_path)


SMALL = dict(
    hidden_size=256,
    num_hidden_layers=2,
    num_attention_heads=8,
    vocab_size=1024,
    intermediate_size=512,
)


def test_mxfp4_blocks_count_two_values_a_byte_and_scales_are_not_parameters(tmp_path):
    config = dict(
        model_type="gpt_oss",
        **SMALL,
        num_key_value_heads=2,
        head_dim=32,
        num_local_experts=4,
        num_experts_per_tok=2,
        quantization_config={"quant_method": "mxfp4"},
    )
    model, expected = built(config)
    entries = []
    for name, p in model.named_parameters():
        if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            E, inp, out = p.shape  # transformers keeps [E, in, out]; the checkpoint [E, out, in]
            entries.append((name + "_blocks", "U8", (E, out, inp // 32, 16)))
            entries.append((name + "_scales", "U8", (E, out, inp // 32)))
        else:
            entries.append((name, "BF16", tuple(p.shape)))
    ckpt = _folder(tmp_path, config, entries)
    assert ckpt.parameter_count == expected
    assert ckpt.params_by_dtype["MXFP4"] == sum(
        p.numel() for n, p in model.named_parameters() if n.endswith(("gate_up_proj", "down_proj"))
    )
    assert sum(t.numel for t in ckpt.buffers) == sum(
        math.prod(s) for n, _, s in entries if n.endswith("_scales")
    )
    assert any("MXFP4" in n for n in ckpt.notes)
    assert ckpt.params_by_component["experts"] > 0 and ckpt.params_by_component.get("other", 0) == 0


def test_fp8_weights_count_once_and_their_block_scales_and_the_correction_bias_do_not(tmp_path):
    config = dict(
        model_type="deepseek_v3",
        **SMALL,
        num_key_value_heads=8,  # MLA: every head (DeepseekV3Config defaults to 128)
        n_routed_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=64,
        q_lora_rank=96,
        kv_lora_rank=64,
        qk_rope_head_dim=16,
        qk_nope_head_dim=32,
        v_head_dim=32,
        first_k_dense_replace=1,
        n_group=2,
        topk_group=1,
        quantization_config={"quant_method": "fp8"},
    )
    model, expected = built(config)
    entries = []
    for name, p in model.named_parameters():
        if name.endswith("mlp.experts.gate_up_proj"):  # the checkpoint keeps experts apart
            E, two_f, d = p.shape
            prefix = name[: -len("gate_up_proj")]
            for e in range(E):
                for proj in ("gate_proj", "up_proj"):
                    entries.append((f"{prefix}{e}.{proj}.weight", "F8_E4M3", (two_f // 2, d)))
                    entries.append((f"{prefix}{e}.{proj}.weight_scale_inv", "F32", (1, 2)))
        elif name.endswith("mlp.experts.down_proj"):
            E, d, f = p.shape
            prefix = name[: -len("down_proj")]
            for e in range(E):
                entries.append((f"{prefix}{e}.down_proj.weight", "F8_E4M3", (d, f)))
                entries.append((f"{prefix}{e}.down_proj.weight_scale_inv", "F32", (2, 1)))
        elif p.dim() == 2 and ".layers." in name and "norm" not in name:
            entries.append((name, "F8_E4M3", tuple(p.shape)))
            rows, cols = (math.ceil(s / 128) for s in p.shape)
            entries.append((name + "_scale_inv", "F32", (rows, cols)))
        else:
            entries.append((name, "BF16", tuple(p.shape)))
    for name, b in model.named_buffers():
        if "e_score_correction_bias" in name:
            entries.append((name, "F32", tuple(b.shape)))
    ckpt = _folder(tmp_path, config, entries)
    assert ckpt.parameter_count == expected
    assert ckpt.params_by_dtype["F8_E4M3"] > 0
    roles = {t.role for t in ckpt.buffers}
    assert roles == {"quantization", "router_correction_bias"}
    assert ckpt.params_by_component.get("other", 0) == 0


@pytest.mark.parametrize("method", ["gptq", "awq"])
def test_packed_4bit_integers_count_eight_values_a_word(tmp_path, method):
    config = dict(
        model_type="llama",
        **SMALL,
        num_key_value_heads=2,
        quantization_config={"quant_method": method, "bits": 4, "group_size": 128},
    )
    model, expected = built(config)
    entries = []
    for name, p in model.named_parameters():
        if p.dim() == 2 and ".layers." in name:
            out, inp = p.shape
            base = name[: -len(".weight")]
            qshape = (inp // 8, out) if method == "gptq" else (inp, out // 8)
            entries += [
                (base + ".qweight", "I32", qshape),
                (base + ".qzeros", "I32", (inp // 128, out // 8)),
                (base + ".scales", "F16", (inp // 128, out)),
            ]
            if method == "gptq":
                entries.append((base + ".g_idx", "I32", (inp,)))
        else:
            entries.append((name, "F16", tuple(p.shape)))
    ckpt = _folder(tmp_path, config, entries)
    assert ckpt.parameter_count == expected
    assert ckpt.params_by_component.get("other", 0) == 0
    assert not ckpt.mismatches  # unpacked shapes agree with the config's widths


# ---- GPTQ and AWQ at every legal width, on the factory's Llama layout --------------------

LLAMA = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 96,
    "tie_word_embeddings": False,
}
FLOAT = cf.llama_entries(LLAMA, dtype="F16")


def test_the_float_model_is_what_the_config_describes():
    assert cf.entries_numel(FLOAT) == parameter_count(spec_from_config(LLAMA))


def _write(tmp_path, entries, quantization=None, *, config=True):
    cfg = {**LLAMA, "quantization_config": quantization} if quantization else dict(LLAMA)
    return cf.write_sparse(tmp_path / "ckpt", entries, cfg if config else None)


@pytest.mark.parametrize("g_idx", [True, False])
@pytest.mark.parametrize("group_size", [-1, 32, 128])
@pytest.mark.parametrize("bits", [2, 3, 4, 8])
def test_gptq_counts_the_float_model_at_every_legal_width(tmp_path, bits, group_size, g_idx):
    packed = cf.gptq_entries(FLOAT, bits, group_size, g_idx)
    quant = {"quant_method": "gptq", "bits": bits, "group_size": group_size}
    ckpt = read_checkpoint(_write(tmp_path, packed, quant))
    assert ckpt.parameter_count == cf.entries_numel(FLOAT)
    assert ckpt.mismatches == ()  # unpacked [out, in] shapes agree with config.json's widths
    assert ckpt.params_by_dtype[f"INT{bits} (packed I32)"] == sum(
        math.prod(s) for n, _, s in FLOAT if cf._linear(n, s)
    )
    assert ckpt.buffer_count == sum(
        math.prod(s) for n, _, s in packed if n.endswith((".qzeros", ".scales", ".g_idx"))
    )
    assert any(f"GPTQ {bits}-bit" in n for n in ckpt.notes)


@pytest.mark.parametrize("g_idx", [True, False])
@pytest.mark.parametrize("bits", [2, 3, 4, 8])
def test_gptq_without_settings_reads_the_width_from_the_shapes(tmp_path, bits, g_idx):
    packed = cf.gptq_entries(FLOAT, bits, 128, g_idx)
    ckpt = read_checkpoint(_write(tmp_path, packed, config=False))
    assert ckpt.parameter_count == cf.entries_numel(FLOAT)
    assert ckpt.spec.intermediate_size == LLAMA["intermediate_size"]
    assert any(f"GPTQ {bits}-bit" in n for n in ckpt.notes)


def test_autogptq_quantize_config_json_gives_the_width(tmp_path):
    folder = _write(tmp_path, cf.gptq_entries(FLOAT, 3, 32))
    (folder / "quantize_config.json").write_text(json.dumps({"bits": 3, "group_size": 32}))
    assert read_checkpoint(folder).parameter_count == cf.entries_numel(FLOAT)
    (folder / "quantize_config.json").write_text(json.dumps({"bits": 4, "group_size": 32}))
    with pytest.raises(CheckpointError, match=r"qweight .* expected \[.*\]"):
        read_checkpoint(folder)  # 3-bit words read as 4-bit: the g_idx length disagrees


@pytest.mark.parametrize("fmt", ["gemm", "gemv"])
@pytest.mark.parametrize("group_size", [32, 64])
def test_awq_counts_the_float_model(tmp_path, fmt, group_size):
    packed = cf.awq_entries(FLOAT, 4, group_size, fmt)
    quant = {"quant_method": "awq", "bits": 4, "group_size": group_size, "version": fmt}
    ckpt = read_checkpoint(_write(tmp_path, packed, quant))
    assert ckpt.parameter_count == cf.entries_numel(FLOAT)
    assert ckpt.mismatches == ()
    assert any("AWQ 4-bit" in n for n in ckpt.notes)


def test_awq_without_settings_is_told_from_gptq_by_its_packed_side(tmp_path):
    ckpt = read_checkpoint(_write(tmp_path, cf.awq_entries(FLOAT), config=False))
    assert ckpt.parameter_count == cf.entries_numel(FLOAT)
    assert any("AWQ 4-bit" in n for n in ckpt.notes)


def _profile_error(capsys, folder) -> str:
    """``introspect profile folder`` in-process: exit code 2 and the one stderr line."""
    assert main(["profile", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize(
    "method, bits",
    [("gptq", 0), ("gptq", 64), ("gptq", True), ("gptq", "4"), ("gptq", 4.0), ("gptq", 5)]
    + [("awq", 3), ("awq", 8), ("awq", 0)],
)
def test_illegal_bits_are_one_line_naming_the_key_and_file(tmp_path, capsys, method, bits):
    entries = cf.gptq_entries(FLOAT, 4) if method == "gptq" else cf.awq_entries(FLOAT)
    folder = _write(tmp_path, entries, {"quant_method": method, "bits": bits})
    line = _profile_error(capsys, folder)
    assert "quantization_config.bits" in line and str(folder / "config.json") in line
    assert json.dumps(bits) in line
    with pytest.raises(ConfigError):
        read_checkpoint(folder)


def test_illegal_bits_in_quantize_config_json_name_that_file(tmp_path, capsys):
    folder = _write(tmp_path, cf.gptq_entries(FLOAT, 4))
    (folder / "quantize_config.json").write_text(json.dumps({"bits": 6}))
    line = _profile_error(capsys, folder)
    assert "bits" in line and str(folder / "quantize_config.json") in line


@pytest.mark.parametrize(
    "key, value", [("group_size", 0), ("group_size", "128"), ("group_size", -2)]
)
def test_illegal_group_size_is_one_line(tmp_path, capsys, key, value):
    folder = _write(tmp_path, cf.gptq_entries(FLOAT, 4), {"quant_method": "gptq", key: value})
    assert f"quantization_config.{key}" in _profile_error(capsys, folder)


def _replace(entries, name, shape):
    assert any(n == name for n, _, _ in entries)
    return [(n, d, shape if n == name else s) for n, d, s in entries]


Q = "model.layers.1.self_attn.q_proj"


@pytest.mark.parametrize(
    "bits, tensor, shape, expected",
    [
        (3, Q + ".qweight", [7, 64], "a multiple of 3"),  # no g_idx: 7 words hold 74.67 values
        (3, Q + ".scales", [3, 64], "[2, 64]"),  # ceil(64 / 32) groups
        (4, Q + ".qzeros", [2, 16], "[2, 8]"),  # 64 zero points of 4 bits: 8 words
        (4, Q + ".g_idx", [40], "[4, 64]"),  # 40 inputs of 4 bits fill 4 or 5 words, not 8
    ],
)
def test_wrongly_packed_gptq_is_one_line_naming_the_tensor_and_shape(
    tmp_path, capsys, bits, tensor, shape, expected
):
    entries = cf.gptq_entries(FLOAT, bits, 32)
    if tensor.endswith(".qweight"):
        entries = [e for e in entries if e[0] != Q + ".g_idx"]
    folder = _write(
        tmp_path,
        _replace(entries, tensor, shape),
        {"quant_method": "gptq", "bits": bits, "group_size": 32},
    )
    line = _profile_error(capsys, folder)
    assert Q in line and expected in line


def test_packed_weight_without_its_scales_is_incomplete(tmp_path, capsys):
    entries = [e for e in cf.gptq_entries(FLOAT, 4) if e[0] != Q + ".scales"]
    line = _profile_error(capsys, _write(tmp_path, entries, {"quant_method": "gptq", "bits": 4}))
    assert Q + ".scales" in line and "incomplete" in line


# ---- bitsandbytes: the real quantizer's output ---------------------------------------


def _bnb_checkpoint(folder, *, quant_type="nf4", nested=False, storage="uint8", eight=False):
    """The factory's float Llama with every block projection quantized by bitsandbytes,
    saved as Linear4bit / Linear8bitLt save them (``weight`` plus its quant state)."""
    bnb = pytest.importorskip("bitsandbytes")
    from safetensors.torch import save_file

    tensors, config = cf.llama(hidden=64, heads=4, kv_heads=2, ffn=96, vocab=80)
    out = {}
    for name, array in tensors.items():
        t = torch.from_numpy(array).float()
        if not (".layers." in name and t.dim() == 2):
            out[name] = t.to(torch.bfloat16)
        elif eight:
            cb, scb, _ = bnb.functional.int8_vectorwise_quant(t.half())
            prefix = name[: -len("weight")]
            out |= {name: cb, prefix + "SCB": scb, prefix + "weight_format": torch.tensor(0)}
            out[prefix + "weight_format"] = out[prefix + "weight_format"].to(torch.uint8)
        else:
            packed, state = bnb.functional.quantize_4bit(
                t,
                blocksize=64,
                compress_statistics=nested,
                quant_type=quant_type,
                quant_storage=getattr(torch, storage),
            )
            out[name] = packed
            out |= {f"{name}.{k}": v for k, v in state.as_dict(packed=True).items()}
    folder.mkdir()
    save_file(out, str(folder / "model.safetensors"))
    config["quantization_config"] = {
        "quant_method": "bitsandbytes",
        "load_in_4bit": not eight,
        "load_in_8bit": eight,
        "bnb_4bit_quant_type": quant_type,
    }
    (folder / "config.json").write_text(json.dumps(config))
    return folder, cf.numel(tensors), config


@pytest.mark.parametrize(
    "quant_type, nested, storage",
    [("nf4", False, "uint8"), ("fp4", False, "uint8"), ("nf4", True, "uint8")]
    + [("nf4", True, "bfloat16")],
)
def test_bitsandbytes_4bit_counts_the_float_model(tmp_path, quant_type, nested, storage):
    folder, expected, config = _bnb_checkpoint(
        tmp_path / "bnb", quant_type=quant_type, nested=nested, storage=storage
    )
    ckpt = read_checkpoint(folder)
    assert ckpt.parameter_count == expected == parameter_count(spec_from_config(config))
    assert ckpt.mismatches == ()
    assert any(f"bitsandbytes 4-bit {quant_type.upper()}" in n for n in ckpt.notes)
    assert {t.role for t in ckpt.buffers} == {"quantization"}


def test_bitsandbytes_8bit_counts_the_float_model(tmp_path, capsys):
    folder, expected, _ = _bnb_checkpoint(tmp_path / "bnb", eight=True)
    ckpt = read_checkpoint(folder)
    assert ckpt.parameter_count == expected and ckpt.mismatches == ()
    assert ckpt.params_by_dtype["I8"] > 0
    assert any("bitsandbytes 8-bit" in n for n in ckpt.notes)


def test_bitsandbytes_quant_state_that_disagrees_with_the_weight_is_one_line(tmp_path, capsys):
    from safetensors.torch import load_file, save_file

    folder, _, _ = _bnb_checkpoint(tmp_path / "bnb")
    tensors = load_file(str(folder / "model.safetensors"))
    name = "model.layers.0.mlp.up_proj.weight"
    tensors[name] = tensors[name][:-8]  # 16 values short of the [96, 64] the state records
    save_file(tensors, str(folder / "model.safetensors"))
    line = _profile_error(capsys, folder)
    assert name in line and "[3072, 1]" in line


@pytest.mark.parametrize(
    "quant",
    [
        {"load_in_4bit": True, "load_in_8bit": True},
        {"load_in_4bit": "yes"},
        {"load_in_4bit": True, "bnb_4bit_quant_type": "int4"},
    ],
)
def test_illegal_bitsandbytes_settings_are_one_line(tmp_path, capsys, quant):
    folder, _, config = _bnb_checkpoint(tmp_path / "bnb")
    config["quantization_config"] = {"quant_method": "bitsandbytes", **quant}
    (folder / "config.json").write_text(json.dumps(config))
    line = _profile_error(capsys, folder)
    assert "quantization_config." in line and str(folder / "config.json") in line


# ---- FP8 block scales and MXFP4 blocks --------------------------------------------------


@pytest.mark.parametrize("block", [(128, 128), (32, 64), None])
def test_fp8_counts_the_float_model_for_each_block_size(tmp_path, block):
    quant = {"quant_method": "fp8", "weight_block_size": list(block) if block else None}
    ckpt = read_checkpoint(_write(tmp_path, cf.fp8_entries(FLOAT, block), quant))
    assert ckpt.parameter_count == cf.entries_numel(FLOAT)
    assert ckpt.mismatches == ()


def test_fp8_block_scale_of_the_wrong_shape_is_one_line(tmp_path, capsys):
    entries = cf.fp8_entries(FLOAT, (32, 64))
    name = "model.layers.0.mlp.down_proj.weight_scale_inv"  # down_proj is [64, 128]
    folder = _write(
        tmp_path,
        _replace(entries, name, [1, 1]),
        {"quant_method": "fp8", "weight_block_size": [32, 64]},
    )
    line = _profile_error(capsys, folder)
    assert name in line and "expected [2, 2]" in line


@pytest.mark.parametrize("block", [[128], [0, 128], [128.0, 128], "128", [True, 1]])
def test_illegal_fp8_block_size_is_one_line(tmp_path, capsys, block):
    quant = {"quant_method": "fp8", "weight_block_size": block}
    folder = _write(tmp_path, cf.fp8_entries(FLOAT), quant)
    assert "quantization_config.weight_block_size" in _profile_error(capsys, folder)


def test_mxfp4_scales_of_the_wrong_shape_are_one_line(tmp_path, capsys):
    entries = list(FLOAT)
    for name, _, shape in FLOAT:
        if name.endswith("mlp.up_proj.weight"):
            out, inp = shape
            stem = name[: -len(".weight")] + "_x"
            entries += [(stem + "_blocks", "U8", [out, inp // 32, 16])]
            entries += [(stem + "_scales", "U8", [out, inp // 16])]
    folder = _write(tmp_path, entries, {"quant_method": "mxfp4"})
    line = _profile_error(capsys, folder)
    assert "_x_scales" in line and "expected [128, 2]" in line


# ---- MLX: the real mx.quantize output, as mlx-lm saves it ------------------------------


def _mlx_checkpoint(folder, quantization: dict):
    """The factory's float Llama with the embedding and every block projection quantized
    by mlx.core.quantize at the block's settings (per-module overrides honoured), saved
    with mlx's own safetensors writer and mlx-lm's ``quantization`` block."""
    mx = pytest.importorskip("mlx.core")
    tensors, config = cf.llama(hidden=128, heads=4, kv_heads=2, ffn=256, vocab=64)
    out = {}
    for name, array in tensors.items():
        module = name[: -len(".weight")]
        params = quantization.get(module, quantization)
        if array.ndim != 2 or params is False or "norm" in name:
            out[name] = mx.array(array)
            continue
        mode = params.get("mode", "affine")
        parts = mx.quantize(
            mx.array(array), group_size=params["group_size"], bits=params["bits"], mode=mode
        )
        out[name], out[module + ".scales"] = parts[0], parts[1]
        if mode == "affine":
            out[module + ".biases"] = parts[2]
    folder.mkdir()
    mx.save_safetensors(str(folder / "model.safetensors"), out)
    config |= {"quantization": quantization, "quantization_config": quantization}
    (folder / "config.json").write_text(json.dumps(config))
    return folder, cf.numel(tensors), config


@pytest.mark.parametrize(
    "bits, group_size, mode",
    [(b, 64, "affine") for b in (1, 2, 3, 4, 5, 6, 8)]
    + [(4, 32, "affine"), (4, 128, "affine"), (4, 32, "mxfp4"), (8, 32, "mxfp8")]
    + [(4, 16, "nvfp4")],
)
def test_mlx_counts_the_float_model_at_every_width_and_mode(tmp_path, bits, group_size, mode):
    quantization = {"group_size": group_size, "bits": bits, "mode": mode}
    folder, expected, config = _mlx_checkpoint(tmp_path / "mlx", quantization)
    ckpt = read_checkpoint(folder)
    assert ckpt.parameter_count == expected == parameter_count(spec_from_config(config))
    assert ckpt.mismatches == ()
    assert any(f"MLX {mode} {bits}-bit" in n for n in ckpt.notes)


def test_mlx_per_module_overrides(tmp_path):
    quantization = {
        "group_size": 64,
        "bits": 4,
        "model.layers.0.mlp.down_proj": {"group_size": 32, "bits": 8},
        "model.embed_tokens": False,
    }
    folder, expected, _ = _mlx_checkpoint(tmp_path / "mlx", quantization)
    ckpt = read_checkpoint(folder)
    assert ckpt.parameter_count == expected
    assert any("MLX affine 8-bit, groups of 32: 1 weights" in n for n in ckpt.notes)


@pytest.mark.parametrize(
    "key, value",
    [("bits", 7), ("bits", 0), ("bits", "4"), ("group_size", 48), ("mode", "int4")],
)
def test_illegal_mlx_settings_are_one_line(tmp_path, capsys, key, value):
    folder, _, config = _mlx_checkpoint(tmp_path / "mlx", {"group_size": 64, "bits": 4})
    config["quantization"][key] = value
    (folder / "config.json").write_text(json.dumps(config))
    line = _profile_error(capsys, folder)
    assert f"quantization.{key}" in line and str(folder / "config.json") in line


def test_mlx_settings_that_disagree_with_the_packing_are_one_line(tmp_path, capsys):
    folder, _, config = _mlx_checkpoint(tmp_path / "mlx", {"group_size": 64, "bits": 4})
    config["quantization"] = {"group_size": 64, "bits": 8}  # 4-bit words read as 8-bit
    (folder / "config.json").write_text(json.dumps(config))
    line = _profile_error(capsys, folder)
    assert ".scales" in line and "expected" in line


# ---- fuzzing: any packed shapes and settings give a count or one line -------------------

_JSON = st.none() | st.booleans() | st.integers(-3, 70) | st.text(max_size=3) | st.floats(0, 9)
_DIM = st.integers(0, 80)


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    method=st.sampled_from(["gptq", "awq", "fp8", "mxfp4", "bitsandbytes", "", "hqq"]),
    setting=st.sampled_from(["bits", "group_size", "weight_block_size", "version", "load_in_4bit"]),
    value=_JSON,
    suffix=st.sampled_from(["qweight", "qzeros", "scales", "g_idx", "weight_scale_inv"]),
    dtype=st.sampled_from(["I32", "U32", "F16", "U8", "F8_E4M3"]),
    shape=st.lists(_DIM, max_size=3),
)
def test_fuzz_packed_shapes_and_settings(tmp_path, method, setting, value, suffix, dtype, shape):
    entries = cf.gptq_entries(FLOAT, 4, 32) if method != "fp8" else cf.fp8_entries(FLOAT)
    name = f"{Q}.{suffix}"
    entries = [e for e in entries if e[0] != name] + [(name, dtype, shape)]
    folder = tmp_path / f"f{abs(hash((method, setting, str(value), suffix, dtype, str(shape))))}"
    cf.write_sparse(
        folder, entries, {**LLAMA, "quantization_config": {"quant_method": method, setting: value}}
    )
    try:
        ckpt = read_checkpoint(folder)
    except (CheckpointError, ConfigError) as e:
        assert "\n" not in str(e) and str(folder) in str(e)
    else:
        assert ckpt.parameter_count == sum(ckpt.params_by_component.values())


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    state=st.binary(max_size=64)
    | st.dictionaries(
        st.sampled_from(["shape", "blocksize", "quant_type", "dtype"]),
        _JSON | st.lists(st.integers(-2, 5000), max_size=3),
    ).map(lambda d: json.dumps(d).encode())
)
def test_fuzz_bitsandbytes_quant_state(tmp_path, state):
    from safetensors.numpy import save_file

    folder = tmp_path / f"s{abs(hash(state))}"
    folder.mkdir()
    tensors = {
        "model.layers.0.mlp.up_proj.weight": np.zeros((24, 1), np.uint8),
        "model.layers.0.mlp.up_proj.weight.absmax": np.zeros((1,), np.float32),
        "model.layers.0.mlp.up_proj.weight.quant_state.bitsandbytes__nf4": np.frombuffer(
            state or b" ", np.uint8
        ),
    }
    save_file(tensors, str(folder / "model.safetensors"))
    try:
        ckpt = read_checkpoint(folder / "model.safetensors")
    except CheckpointError as e:
        assert "\n" not in str(e)
    else:
        assert ckpt.parameter_count == sum(ckpt.params_by_component.values())


# ---- the Hub path: the same rules over headers fetched by range ------------------------


def test_hub_headers_of_a_3bit_gptq_repo_count_the_float_model(tmp_path):
    """The headers huggingface_hub fetches from a (loopback) Hub are unpacked as the
    local reader unpacks them: 22,688 for the issue's 3-bit GPTQ model, not 21,536."""
    import subprocess
    import sys

    from hubserver import HubServer, folder_files
    from test_hub import SNIPPET, _env

    tensors, config = cf.llama(hidden=32, ffn=64)
    float_entries = [(n, "F16", list(a.shape)) for n, a in tensors.items()]
    config["quantization_config"] = {"quant_method": "gptq", "bits": 3, "group_size": -1}
    folder = cf.write_sparse(tmp_path / "repo", cf.gptq_entries(float_entries, 3, -1), config)
    with HubServer() as server:
        server.add("TheBloke/Tiny-GPTQ", folder_files(folder))
        run = subprocess.run(
            [sys.executable, "-c", SNIPPET, "TheBloke/Tiny-GPTQ", ""],
            env=_env(tmp_path / "hf-home", server),
            capture_output=True,
            text=True,
            timeout=120,
        )
    got = json.loads(run.stdout)
    assert got["parameter_count"] == cf.numel(tensors) == 22_688
    assert any("GPTQ 3-bit" in n for n in got["notes"])


def test_a_method_introspect_does_not_unpack_is_said(tmp_path):
    quant = {"quant_method": "compressed-tensors", "format": "pack-quantized"}
    ckpt = read_checkpoint(_write(tmp_path, FLOAT, quant))
    assert ckpt.parameter_count == cf.entries_numel(FLOAT)  # nothing packed: exact anyway
    assert any("'compressed-tensors'" in n and "not unpack" in n for n in ckpt.notes)
