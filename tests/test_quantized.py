"""Quantized checkpoints count parameters, not storage elements: small header-only
safetensors files (zeros) laid out as FP8 (DeepSeek-V3), MXFP4 (gpt-oss), GPTQ/AWQ and
bitsandbytes 4-bit checkpoints store them, each built from the tensors transformers'
own class has for a small config (meta device) — the count must equal that model's."""

from __future__ import annotations

import json
import math
import struct

import pytest
from introspect.adapters.safetensors import read_checkpoint

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


def test_bitsandbytes_4bit_weights_count_two_values_a_byte(tmp_path):
    config = dict(model_type="llama", **SMALL, num_key_value_heads=2)
    model, expected = built(config)
    entries = []
    for name, p in model.named_parameters():
        if p.dim() == 2 and ".layers." in name:
            n = p.numel()
            entries += [
                (name, "U8", (n // 2, 1)),
                (name + ".absmax", "F32", (n // 64,)),
                (name + ".quant_map", "F32", (16,)),
                (name + ".quant_state.bitsandbytes__nf4", "U8", (100,)),
            ]
        else:
            entries.append((name, "BF16", tuple(p.shape)))
    ckpt = _folder(tmp_path, config, entries)
    assert ckpt.parameter_count == expected
