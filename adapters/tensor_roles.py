"""What each tensor in a checkpoint is: templated name tables, as torchtitan's state-dict
adapters keep them (``model.layers.{}.self_attn.q_proj.weight`` → attention, q).

A name is reduced to its template by replacing every purely numeric path segment with
``{}`` (the first one is the layer index, a second one the expert index) and dropping one
leading ``model.`` or ``transformer.``; the template is then looked up in one dict. A
name no table knows gets the role ``other`` and is still counted, so a total never
silently loses a tensor.

Buffers are tensors a checkpoint stores that no optimizer ever sees: the rotary
``inv_freq`` that Llama-2-era checkpoints saved in every layer, GPT-2's causal-mask
``attn.bias``. They are reported apart from the parameters, which is why the Hub's
safetensors total for Llama-2-7B (6,738,417,664) exceeds its parameters (6,738,415,616)
by 32 layers × 64 values.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from math import prod

#: Component name for tensors that are not parameters.
BUFFER = "buffer"
#: Component and role for names no table knows.
OTHER = "other"

_W = (".weight",)
_WB = (".weight", ".bias")

# (template without the leading "model."/"transformer.", suffixes, component, role).
# Families: Llama, Mistral, Qwen2, Qwen3, Gemma, OLMo2 and Phi share the first block;
# then Mixtral and Qwen-MoE experts, Phi, GPT-2 and the original Qwen (remote code).
_TABLE: tuple[tuple[str, tuple[str, ...], str, str], ...] = (
    # ---- Llama family (model.layers.{}.…) ----------------------------------------------
    ("embed_tokens", _W, "embeddings", "embedding"),
    ("layers.{}.self_attn.q_proj", _WB, "attention", "q"),
    ("layers.{}.self_attn.k_proj", _WB, "attention", "k"),
    ("layers.{}.self_attn.v_proj", _WB, "attention", "v"),
    ("layers.{}.self_attn.o_proj", _WB, "attention", "o"),
    ("layers.{}.self_attn.dense", _WB, "attention", "o"),  # Phi
    ("layers.{}.self_attn.qkv_proj", _WB, "attention", "qkv"),  # Phi-3 (fused)
    ("layers.{}.self_attn.q_norm", _WB, "norms", "q_norm"),  # Qwen3, OLMo2
    ("layers.{}.self_attn.k_norm", _WB, "norms", "k_norm"),
    ("layers.{}.self_attn.q_layernorm", _WB, "norms", "q_norm"),  # Phi (qk_layernorm)
    ("layers.{}.self_attn.k_layernorm", _WB, "norms", "k_norm"),
    ("layers.{}.mlp.gate_proj", _WB, "mlp", "gate"),
    ("layers.{}.mlp.up_proj", _WB, "mlp", "up"),
    ("layers.{}.mlp.down_proj", _WB, "mlp", "down"),
    ("layers.{}.mlp.gate_up_proj", _WB, "mlp", "gate_up"),  # Phi-3 (fused)
    ("layers.{}.mlp.fc1", _WB, "mlp", "up"),  # Phi
    ("layers.{}.mlp.fc2", _WB, "mlp", "down"),
    ("layers.{}.input_layernorm", _WB, "norms", "attn_norm"),
    ("layers.{}.post_attention_layernorm", _WB, "norms", "post_attn_norm"),
    ("layers.{}.pre_feedforward_layernorm", _WB, "norms", "ffn_norm"),  # Gemma-2
    ("layers.{}.post_feedforward_layernorm", _WB, "norms", "post_ffn_norm"),  # Gemma-2, OLMo2
    ("norm", _WB, "norms", "final_norm"),
    ("final_layernorm", _WB, "norms", "final_norm"),  # Phi
    ("lm_head", _WB, "lm_head", "lm_head"),
    # ---- Mixtral: block_sparse_moe (w1 gate, w3 up, w2 down) ------------------------------
    ("layers.{}.block_sparse_moe.gate", _W, "router", "router"),
    ("layers.{}.block_sparse_moe.experts.{}.w1", _W, "experts", "gate"),
    ("layers.{}.block_sparse_moe.experts.{}.w3", _W, "experts", "up"),
    ("layers.{}.block_sparse_moe.experts.{}.w2", _W, "experts", "down"),
    # ---- Qwen2-MoE / Qwen3-MoE: mlp.gate and mlp.experts.{} ---------------------------
    ("layers.{}.mlp.gate", _W, "router", "router"),
    ("layers.{}.mlp.experts.{}.gate_proj", _W, "experts", "gate"),
    ("layers.{}.mlp.experts.{}.up_proj", _W, "experts", "up"),
    ("layers.{}.mlp.experts.{}.down_proj", _W, "experts", "down"),
    # Shared experts are always active: ``mlp``, as introspect.params counts them.
    ("layers.{}.mlp.shared_expert.gate_proj", _W, "mlp", "shared_gate"),
    ("layers.{}.mlp.shared_expert.up_proj", _W, "mlp", "shared_up"),
    ("layers.{}.mlp.shared_expert.down_proj", _W, "mlp", "shared_down"),
    ("layers.{}.mlp.shared_expert_gate", _W, "mlp", "shared_expert_gate"),
    # ---- DeepSeek-V3: MLA projections and their norms, shared experts -------------------
    ("layers.{}.self_attn.q_a_proj", _WB, "attention", "q_a"),
    ("layers.{}.self_attn.q_a_layernorm", _W, "attention", "q_a_norm"),
    ("layers.{}.self_attn.q_b_proj", _W, "attention", "q_b"),
    ("layers.{}.self_attn.kv_a_proj_with_mqa", _WB, "attention", "kv_a"),
    ("layers.{}.self_attn.kv_a_layernorm", _W, "attention", "kv_a_norm"),
    ("layers.{}.self_attn.kv_b_proj", _W, "attention", "kv_b"),
    ("layers.{}.mlp.shared_experts.gate_proj", _W, "mlp", "shared_gate"),
    ("layers.{}.mlp.shared_experts.up_proj", _W, "mlp", "shared_up"),
    ("layers.{}.mlp.shared_experts.down_proj", _W, "mlp", "shared_down"),
    # ---- gpt-oss: fused expert tensors (no .weight), a biased router, sinks -------------
    ("layers.{}.self_attn.sinks", ("",), "attention", "sinks"),
    ("layers.{}.mlp.router", _WB, "router", "router"),
    ("layers.{}.mlp.experts.gate_up_proj", ("", "_bias"), "experts", "gate_up"),
    ("layers.{}.mlp.experts.down_proj", ("", "_bias"), "experts", "down"),
    # ---- GPT-2 (h.{}.…, Conv1D weights stored [in, out]) --------------------------------
    ("wte", _W, "embeddings", "embedding"),
    ("wpe", _W, "embeddings", "position"),
    ("h.{}.ln_1", _WB, "norms", "attn_norm"),
    ("h.{}.ln_2", _WB, "norms", "ffn_norm"),
    ("h.{}.attn.c_attn", _WB, "attention", "qkv"),
    ("h.{}.attn.c_proj", _WB, "attention", "o"),
    ("h.{}.mlp.c_fc", _WB, "mlp", "up"),
    ("h.{}.mlp.c_proj", _WB, "mlp", "down"),
    ("ln_f", _WB, "norms", "final_norm"),
    # ---- original Qwen (transformer.h.{}.…; out = w1(x) · silu(w2(x)), then c_proj) -----
    ("h.{}.mlp.w1", _WB, "mlp", "up"),
    ("h.{}.mlp.w2", _WB, "mlp", "gate"),
)

# Buffers: exact templates, plus any name ending in ``.inv_freq`` (rotary tables have
# lived under several module paths).
_BUFFERS: dict[str, str] = {
    "h.{}.attn.bias": "causal_mask",  # GPT-2
    "h.{}.attn.masked_bias": "causal_mask",
    "layers.{}.mlp.gate.e_score_correction_bias": "router_correction_bias",  # DeepSeek-V3
}

_PREFIXES = ("model.", "transformer.")
_NUMERIC = re.compile(r"(?<=\.)\d+(?=\.)")

ROLES: dict[str, tuple[str, str]] = {
    template + suffix: (component, role + ("_bias" if suffix in (".bias", "_bias") else ""))
    for template, suffixes, component, role in _TABLE
    for suffix in suffixes
}


@dataclass(frozen=True)
class TensorInfo:
    """One tensor as a header describes it, and what it is for.

    ``component`` is one of :data:`introspect.params.COMPONENTS`, ``"buffer"`` or
    ``"other"``; ``role`` names the tensor within it (``q``, ``gate``, ``attn_norm``,
    ``inv_freq``; a bias has ``_bias`` appended); ``layer`` is the block index.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    component: str
    role: str
    layer: int | None
    expert: int | None = None
    file: str = ""

    @property
    def is_buffer(self) -> bool:
        return self.component == BUFFER

    @property
    def numel(self) -> int:
        """Elements: the product of the shape (1 for a scalar, as safetensors counts it)."""
        return prod(self.shape)


def template_of(name: str) -> tuple[str, tuple[int, ...]]:
    """``model.layers.3.mlp.experts.5.w1.weight`` → (``layers.{}.mlp.experts.{}.w1.weight``,
    (3, 5)): numeric path segments become ``{}``, one known prefix is dropped."""
    for prefix in _PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    numbers = tuple(int(m.group()) for m in _NUMERIC.finditer(name))
    return _NUMERIC.sub("{}", name), numbers


def classify(name: str) -> tuple[str, str, int | None, int | None]:
    """(component, role, layer, expert) for a tensor name; unknown names give
    (``"other"``, ``"other"``, layer, expert)."""
    template, numbers = template_of(name)
    layer = numbers[0] if numbers else None
    expert = numbers[1] if len(numbers) > 1 else None
    if template.endswith(".inv_freq") or template == "inv_freq":
        return BUFFER, "inv_freq", layer, expert
    if template in _BUFFERS:
        return BUFFER, _BUFFERS[template], layer, expert
    component, role = ROLES.get(template, (OTHER, OTHER))
    return component, role, layer, expert


def tensor_info(
    name: str, shape: list[int] | tuple[int, ...], dtype: str, file: str = ""
) -> TensorInfo:
    """A :class:`TensorInfo` with its role looked up."""
    component, role, layer, expert = classify(name)
    return TensorInfo(
        name=name,
        shape=tuple(int(n) for n in shape),
        dtype=str(dtype),
        component=component,
        role=role,
        layer=layer,
        expert=expert,
        file=file,
    )


@dataclass(frozen=True)
class Tally:
    """Exact counts over a tensor inventory: parameters (buffers excluded) in total, per
    dtype and per component, and the values held in buffers."""

    parameter_count: int
    params_by_dtype: dict[str, int]
    params_by_component: dict[str, int]
    buffers: tuple[TensorInfo, ...]
    #: Names counted under ``other``.
    unknown: tuple[str, ...] = ()

    @property
    def buffer_count(self) -> int:
        return sum(t.numel for t in self.buffers)


def tally(tensors: Iterable[TensorInfo]) -> Tally:
    """Sum a tensor inventory. ``params_by_component`` has every key of
    :data:`introspect.params.COMPONENTS` (zero when absent) plus ``other`` only when some
    names are unrecognised; its values sum to ``parameter_count``."""
    from introspect.params import COMPONENTS

    by_dtype: dict[str, int] = {}
    by_component = dict.fromkeys(COMPONENTS, 0)
    buffers, unknown = [], []
    for t in tensors:
        if t.is_buffer:
            buffers.append(t)
            continue
        by_dtype[t.dtype] = by_dtype.get(t.dtype, 0) + t.numel
        by_component[t.component] = by_component.get(t.component, 0) + t.numel
        if t.component == OTHER:
            unknown.append(t.name)
    return Tally(
        parameter_count=sum(by_component.values()),
        params_by_dtype=by_dtype,
        params_by_component=by_component,
        buffers=tuple(buffers),
        unknown=tuple(unknown),
    )
