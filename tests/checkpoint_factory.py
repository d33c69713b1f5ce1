"""Small real safetensors checkpoints laid out as Hugging Face families store them.

Names and shapes are written out by hand from the families' modeling code (Linear weights
``[out, in]``, GPT-2's Conv1D ``[in, out]``), so a reader that gets a role or a shape
wrong disagrees with the config-derived count. Tensors are zeros; only headers matter.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

F16, F32 = np.float16, np.float32


def _z(*shape: int, dtype=F16) -> np.ndarray:
    return np.zeros(shape, dtype=dtype)


def llama(
    *,
    layers: int = 2,
    hidden: int = 32,
    heads: int = 4,
    kv_heads: int = 2,
    head_dim: int | None = None,
    ffn: int = 48,
    vocab: int = 64,
    tied: bool = False,
    inv_freq: bool = False,
    qkv_bias: bool = False,
    qk_norm: str = "none",
) -> tuple[dict[str, np.ndarray], dict]:
    """Llama / Mistral / Qwen2 / Qwen3 / OLMo2 layout and the matching config.json.
    ``inv_freq`` adds Llama-2-era rotary buffers (head_dim/2 float32 values per layer)."""
    hd = head_dim or hidden // heads
    q, kv = heads * hd, kv_heads * hd
    t: dict[str, np.ndarray] = {"model.embed_tokens.weight": _z(vocab, hidden)}
    for i in range(layers):
        p = f"model.layers.{i}."
        t |= {
            p + "self_attn.q_proj.weight": _z(q, hidden),
            p + "self_attn.k_proj.weight": _z(kv, hidden),
            p + "self_attn.v_proj.weight": _z(kv, hidden),
            p + "self_attn.o_proj.weight": _z(hidden, q),
            p + "mlp.gate_proj.weight": _z(ffn, hidden),
            p + "mlp.up_proj.weight": _z(ffn, hidden),
            p + "mlp.down_proj.weight": _z(hidden, ffn),
            p + "input_layernorm.weight": _z(hidden, dtype=F32),
            p + "post_attention_layernorm.weight": _z(hidden, dtype=F32),
        }
        if qkv_bias:
            t |= {
                p + f"self_attn.{n}_proj.bias": _z(w) for n, w in (("q", q), ("k", kv), ("v", kv))
            }
        if qk_norm == "head":
            t |= {p + "self_attn.q_norm.weight": _z(hd), p + "self_attn.k_norm.weight": _z(hd)}
        elif qk_norm == "full":
            t |= {p + "self_attn.q_norm.weight": _z(q), p + "self_attn.k_norm.weight": _z(kv)}
        if inv_freq:
            t[p + "self_attn.rotary_emb.inv_freq"] = _z(hd // 2, dtype=F32)
    t["model.norm.weight"] = _z(hidden, dtype=F32)
    if not tied:
        t["lm_head.weight"] = _z(vocab, hidden)
    model_type = {"head": "qwen3", "full": "olmo2"}.get(qk_norm, "qwen2" if qkv_bias else "llama")
    config = {
        "model_type": model_type,
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "intermediate_size": ffn,
        "vocab_size": vocab,
        "tie_word_embeddings": tied,
        "hidden_act": "silu",
    }
    if head_dim:
        config["head_dim"] = head_dim
    return t, config


def mixtral(*, layers=2, hidden=32, heads=4, kv_heads=2, ffn=40, vocab=64, experts=4):
    """Mixtral: block_sparse_moe with w1 (gate), w3 (up), w2 (down) per expert."""
    t, config = llama(
        layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, vocab=vocab
    )
    for i in range(layers):
        p = f"model.layers.{i}."
        for n in ("gate", "up", "down"):
            del t[p + f"mlp.{n}_proj.weight"]
        t[p + "block_sparse_moe.gate.weight"] = _z(experts, hidden)
        for e in range(experts):
            q = p + f"block_sparse_moe.experts.{e}."
            t |= {
                q + "w1.weight": _z(ffn, hidden),
                q + "w3.weight": _z(ffn, hidden),
                q + "w2.weight": _z(hidden, ffn),
            }
    config |= {"model_type": "mixtral", "num_local_experts": experts, "num_experts_per_tok": 2}
    return t, config


def gpt2(*, layers=2, hidden=32, heads=4, vocab=64, positions=16):
    """GPT-2 (no prefix, as openai-community/gpt2 stores it): Conv1D [in, out] weights,
    learned positions, tied lm_head, and the causal-mask ``attn.bias`` buffers."""
    t = {"wte.weight": _z(vocab, hidden), "wpe.weight": _z(positions, hidden)}
    for i in range(layers):
        p = f"h.{i}."
        t |= {
            p + "ln_1.weight": _z(hidden),
            p + "ln_1.bias": _z(hidden),
            p + "attn.c_attn.weight": _z(hidden, 3 * hidden),
            p + "attn.c_attn.bias": _z(3 * hidden),
            p + "attn.c_proj.weight": _z(hidden, hidden),
            p + "attn.c_proj.bias": _z(hidden),
            p + "attn.bias": _z(1, 1, positions, positions, dtype=np.uint8),
            p + "ln_2.weight": _z(hidden),
            p + "ln_2.bias": _z(hidden),
            p + "mlp.c_fc.weight": _z(hidden, 4 * hidden),
            p + "mlp.c_fc.bias": _z(4 * hidden),
            p + "mlp.c_proj.weight": _z(4 * hidden, hidden),
            p + "mlp.c_proj.bias": _z(hidden),
        }
    t |= {"ln_f.weight": _z(hidden), "ln_f.bias": _z(hidden)}
    config = {
        "model_type": "gpt2",
        "n_embd": hidden,
        "n_layer": layers,
        "n_head": heads,
        "vocab_size": vocab,
        "n_positions": positions,
    }
    return t, config


def qwen(*, layers=2, hidden=32, heads=4, ffn=96, vocab=64):
    """Original Qwen (remote code): transformer.h.{}, fused c_attn [3d, d] with bias, w1/w2
    each ffn/2 wide, config intermediate_size = ffn."""
    t = {"transformer.wte.weight": _z(vocab, hidden)}
    for i in range(layers):
        p = f"transformer.h.{i}."
        t |= {
            p + "ln_1.weight": _z(hidden),
            p + "ln_2.weight": _z(hidden),
            p + "attn.c_attn.weight": _z(3 * hidden, hidden),
            p + "attn.c_attn.bias": _z(3 * hidden),
            p + "attn.c_proj.weight": _z(hidden, hidden),
            p + "mlp.w1.weight": _z(ffn // 2, hidden),
            p + "mlp.w2.weight": _z(ffn // 2, hidden),
            p + "mlp.c_proj.weight": _z(hidden, ffn // 2),
        }
    t |= {"transformer.ln_f.weight": _z(hidden), "lm_head.weight": _z(vocab, hidden)}
    config = {
        "model_type": "qwen",
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "kv_channels": hidden // heads,
        "intermediate_size": ffn,
        "vocab_size": vocab,
    }
    return t, config


def phi(*, layers=2, hidden=32, heads=4, ffn=64, vocab=64):
    """Phi-2: one LayerNorm per block, biases everywhere, ``dense`` output, fc1/fc2."""
    t = {"model.embed_tokens.weight": _z(vocab, hidden)}
    for i in range(layers):
        p = f"model.layers.{i}."
        for n in ("q_proj", "k_proj", "v_proj", "dense"):
            t |= {
                p + f"self_attn.{n}.weight": _z(hidden, hidden),
                p + f"self_attn.{n}.bias": _z(hidden),
            }
        t |= {
            p + "mlp.fc1.weight": _z(ffn, hidden),
            p + "mlp.fc1.bias": _z(ffn),
            p + "mlp.fc2.weight": _z(hidden, ffn),
            p + "mlp.fc2.bias": _z(hidden),
            p + "input_layernorm.weight": _z(hidden),
            p + "input_layernorm.bias": _z(hidden),
        }
    t |= {
        "model.final_layernorm.weight": _z(hidden),
        "model.final_layernorm.bias": _z(hidden),
        "lm_head.weight": _z(vocab, hidden),
        "lm_head.bias": _z(vocab),
    }
    config = {
        "model_type": "phi",
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "intermediate_size": ffn,
        "vocab_size": vocab,
    }
    return t, config


def write(
    folder: Path,
    tensors: dict[str, np.ndarray],
    config: dict | None = None,
    *,
    shards: int = 1,
) -> Path:
    """Write ``tensors`` into ``folder`` as model.safetensors, or as ``shards`` files with
    a model.safetensors.index.json; add config.json when given. Returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    names = list(tensors)
    if shards == 1:
        save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    else:
        weight_map = {}
        for s in range(shards):
            file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            part = {n: tensors[n] for n in names[s::shards]}
            save_file(part, str(folder / file), metadata={"format": "pt"})
            weight_map |= dict.fromkeys(part, file)
        total = sum(a.nbytes for a in tensors.values())
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    return folder


def numel(tensors: dict[str, np.ndarray], *, buffers: bool = False) -> int:
    """Elements in the parameters (names without inv_freq / attn.bias), or in the buffers."""

    def is_buffer(name: str) -> bool:
        return name.endswith(".inv_freq") or name.endswith(".attn.bias")

    return sum(a.size for n, a in tensors.items() if is_buffer(n) == buffers)


# ---- full-size checkpoints as headers over sparse files (no tensor bytes on disk) -------

DTYPE_BYTES = {
    "F16": 2,
    "BF16": 2,
    "F32": 4,
    "I32": 4,
    "U32": 4,
    "I8": 1,
    "U8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
}


def llama_entries(config: dict, *, inv_freq: bool = False, dtype: str = "BF16") -> list:
    """(name, dtype, shape) for every tensor a Llama / Qwen2 / Qwen3 / Gemma / Mixtral
    checkpoint of this config stores, in Hugging Face's names; ``inv_freq`` adds
    Llama-2-era F32 rotary buffers (head_dim / 2 values per layer)."""
    d, L, V = config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]
    heads = config["num_attention_heads"]
    hd = config.get("head_dim") or d // heads
    q, kv = heads * hd, config.get("num_key_value_heads", heads) * hd
    f = config["intermediate_size"]
    qwen2, qwen3 = config["model_type"] == "qwen2", config["model_type"] == "qwen3"
    experts = config.get("num_local_experts", 0)
    tied = config.get("tie_word_embeddings", config["model_type"] == "gemma")  # Gemma ties
    out = [("model.embed_tokens.weight", dtype, [V, d])]
    for i in range(L):
        p = f"model.layers.{i}."
        out += [
            (p + "self_attn.q_proj.weight", dtype, [q, d]),
            (p + "self_attn.k_proj.weight", dtype, [kv, d]),
            (p + "self_attn.v_proj.weight", dtype, [kv, d]),
            (p + "self_attn.o_proj.weight", dtype, [d, q]),
            (p + "input_layernorm.weight", dtype, [d]),
            (p + "post_attention_layernorm.weight", dtype, [d]),
        ]
        if experts:
            out.append((p + "block_sparse_moe.gate.weight", dtype, [experts, d]))
            for e in range(experts):
                q_ = p + f"block_sparse_moe.experts.{e}."
                out += [(q_ + "w1.weight", dtype, [f, d]), (q_ + "w3.weight", dtype, [f, d])]
                out.append((q_ + "w2.weight", dtype, [d, f]))
        else:
            out += [
                (p + "mlp.gate_proj.weight", dtype, [f, d]),
                (p + "mlp.up_proj.weight", dtype, [f, d]),
                (p + "mlp.down_proj.weight", dtype, [d, f]),
            ]
        if qwen2:
            out += [
                (p + f"self_attn.{n}_proj.bias", dtype, [w])
                for n, w in zip("qkv", (q, kv, kv), strict=True)
            ]
        if qwen3:
            out += [(p + f"self_attn.{n}_norm.weight", dtype, [hd]) for n in "qk"]
        if inv_freq:
            out.append((p + "self_attn.rotary_emb.inv_freq", "F32", [hd // 2]))
    out.append(("model.norm.weight", dtype, [d]))
    if not tied:
        out.append(("lm_head.weight", dtype, [V, d]))
    return out


def write_sparse(
    folder: Path, entries: list, config: dict | None = None, *, shards: int = 1
) -> Path:
    """Write safetensors files whose headers describe ``entries`` and whose data region is
    a hole (a sparse file): full-size checkpoints in a few kB of disk. Sharded with a
    model.safetensors.index.json when ``shards`` > 1."""
    folder.mkdir(parents=True, exist_ok=True)
    per = -(-len(entries) // shards)
    weight_map, total = {}, 0
    for s in range(shards):
        part = entries[s * per : (s + 1) * per]
        name = (
            "model.safetensors" if shards == 1 else f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        )
        header, offset = {"__metadata__": {"format": "pt"}}, 0
        for tensor, dtype, shape in part:
            size = DTYPE_BYTES[dtype] * int(np.prod(shape))
            header[tensor] = {
                "dtype": dtype,
                "shape": shape,
                "data_offsets": [offset, offset + size],
            }
            offset += size
            weight_map[tensor] = name
        raw = json.dumps(header).encode()
        raw += b" " * (-len(raw) % 8)
        with (folder / name).open("wb") as fh:
            fh.write(len(raw).to_bytes(8, "little") + raw)
            fh.truncate(8 + len(raw) + offset)
        total += offset
    if shards > 1:
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    return folder


# ---- quantized layouts: each format's packing rule applied to a float checkpoint --------


def _linear(name: str, shape: list) -> bool:
    """The projections quantizers replace: 2-D weights inside the blocks."""
    return ".layers." in name and name.endswith(".weight") and len(shape) == 2


def gptq_entries(entries: list, bits: int, group_size: int = 128, g_idx: bool = True) -> list:
    """AutoGPTQ / GPTQModel ``QuantLinear`` buffers for every block projection:
    qweight I32 [in // 32 · bits, out], qzeros I32 [groups, out // 32 · bits],
    scales F16 [groups, out], g_idx I32 [in] (left out when ``g_idx`` is false, as some
    exporters do); groups = ceil(in / group_size)."""
    out = []
    for name, dtype, shape in entries:
        if not _linear(name, shape):
            out.append((name, dtype, shape))
            continue
        rows, cols = shape  # nn.Linear [out, in]
        groups = 1 if group_size == -1 else -(-cols // group_size)
        base = name[: -len(".weight")]
        out += [
            (base + ".qweight", "I32", [cols // 32 * bits, rows]),
            (base + ".qzeros", "I32", [groups, rows // 32 * bits]),
            (base + ".scales", "F16", [groups, rows]),
        ]
        if g_idx:
            out.append((base + ".g_idx", "I32", [cols]))
    return out


def awq_entries(entries: list, bits: int = 4, group_size: int = 128, fmt: str = "gemm") -> list:
    """AutoAWQ ``WQLinear_GEMM`` buffers (qweight I32 [in, out · bits / 32], qzeros I32
    [in // group_size, out · bits / 32], scales F16 [in // group_size, out]), or GEMV's
    qweight [out, in · bits / 32] (its padded scales kept at [out, in // group_size])."""
    out = []
    for name, dtype, shape in entries:
        if not _linear(name, shape):
            out.append((name, dtype, shape))
            continue
        rows, cols = shape
        groups = 1 if group_size == -1 else cols // group_size
        base = name[: -len(".weight")]
        if fmt == "gemv":
            out += [
                (base + ".qweight", "I32", [rows, cols * bits // 32]),
                (base + ".qzeros", "I32", [rows, groups]),
                (base + ".scales", "F16", [rows, groups]),
            ]
        else:
            out += [
                (base + ".qweight", "I32", [cols, rows * bits // 32]),
                (base + ".qzeros", "I32", [groups, rows * bits // 32]),
                (base + ".scales", "F16", [groups, rows]),
            ]
    return out


def fp8_entries(entries: list, block: tuple[int, int] | None = (128, 128)) -> list:
    """DeepSeek-V3 / FP8Linear: float8 weights, and weight_scale_inv F32
    [ceil(out / b0), ceil(in / b1)] (one value when ``block`` is None)."""
    out = []
    for name, dtype, shape in entries:
        if not _linear(name, shape):
            out.append((name, dtype, shape))
            continue
        rows, cols = shape
        scale = [] if block is None else [-(-rows // block[0]), -(-cols // block[1])]
        out += [(name, "F8_E4M3", shape), (name + "_scale_inv", "F32", scale)]
    return out


def entries_numel(entries: list) -> int:
    """Elements over (name, dtype, shape) entries, buffers such as inv_freq excluded."""
    return sum(int(np.prod(s)) for n, _, s in entries if not n.endswith(".inv_freq"))
