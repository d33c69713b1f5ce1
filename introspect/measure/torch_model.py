"""A reference decoder-only transformer in torch, built from any ModelSpec.

Pre-norm blocks as the seed describes them (norm → attention → residual, norm →
feed-forward → residual), with the spec's variants: LayerNorm or RMSNorm, multi-head or
grouped-query attention, a plain (d→f→d) or gated (SwiGLU-style gate·up→down)
feed-forward, tied or untied embeddings, biases, RoPE or learned positions, and eager or
memory-efficient attention (``TrainingSetup.attention``). Module names follow Hugging
Face's Llama (``embed_tokens``, ``layers.N.self_attn.q_proj``, ``mlp.down_proj``,
``norm``, ``lm_head``) so the census and the tracker name the same things users see.

Eager attention is written as Hugging Face's ``eager_attention_forward``: scores = QKᵀ·
scale + causal mask, softmax, probs·V. Memory-efficient attention is
``F.scaled_dot_product_attention(is_causal=True)``. torch is imported here, so only code
paths that build a torch model import this module.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from introspect.errors import IntrospectError
from introspect.spec import ModelSpec

#: Hugging Face ``hidden_act`` names → torch functions.
ACTIVATIONS = {
    "gelu": F.gelu,
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "swish": F.silu,
    "relu": F.relu,
}


def activation(name: str):
    try:
        return ACTIVATIONS[name]
    except KeyError:
        known = ", ".join(ACTIVATIONS)
        raise IntrospectError(
            f"hidden_act {name!r} has no reference implementation; known: {known}"
        ) from None


def check_buildable(spec: ModelSpec) -> None:
    """The reference models cover dense decoders; say so for anything else."""
    if spec.is_moe:
        raise IntrospectError(
            "the reference models are dense; a mixture-of-experts spec cannot be measured "
            "(use `introspect profile` for its estimate)"
        )
    if spec.norms_per_layer != 2:
        raise IntrospectError(
            f"the reference models are pre-norm blocks with 2 norms; this spec has "
            f"norms_per_layer={spec.norms_per_layer}"
        )


def make_norm(spec: ModelSpec, width: int) -> nn.Module:
    if spec.norm == "rmsnorm":
        return nn.RMSNorm(width, eps=1e-6)
    return nn.LayerNorm(width, eps=1e-5, bias=spec.norm_bias)


def rotary(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """RoPE on ``x`` of shape (B, heads, T, head_size), rotate-half form (Llama)."""
    half = x.shape[-1] // 2
    inv_freq = 1.0 / (base ** (torch.arange(half, dtype=torch.float32, device=x.device) / half))
    angles = positions[:, None].to(torch.float32) * inv_freq[None, :]
    emb = torch.cat((angles, angles), dim=-1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec, attention: str) -> None:
        super().__init__()
        d = spec.hidden_size
        self.heads, self.kv_heads, self.head_size = (
            spec.num_attention_heads,
            spec.kv_heads,
            spec.head_size,
        )
        self.rope = spec.position_embedding == "rope"
        self.memory_efficient = attention == "memory_efficient"
        self.q_proj = nn.Linear(d, spec.q_dim, bias=spec.qkv_bias)
        self.k_proj = nn.Linear(d, spec.kv_dim, bias=spec.qkv_bias)
        self.v_proj = nn.Linear(d, spec.kv_dim, bias=spec.qkv_bias)
        self.o_proj = nn.Linear(spec.q_dim, d, bias=spec.o_bias)
        if spec.qk_norm == "head":
            self.q_norm = make_norm(spec, spec.head_size)
            self.k_norm = make_norm(spec, spec.head_size)
        elif spec.qk_norm == "full":
            self.q_norm = make_norm(spec, spec.q_dim)
            self.k_norm = make_norm(spec, spec.kv_dim)
        self.qk_norm = spec.qk_norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if self.qk_norm == "full":
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.view(B, T, self.heads, self.head_size).transpose(1, 2)
        k = k.view(B, T, self.kv_heads, self.head_size).transpose(1, 2)
        v = v.view(B, T, self.kv_heads, self.head_size).transpose(1, 2)
        if self.qk_norm == "head":
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rope:
            positions = torch.arange(T, device=x.device)
            q, k = rotary(q, positions), rotary(k, positions)
        if self.memory_efficient:
            out = F.scaled_dot_product_attention(
                q, k, v, is_causal=True, enable_gqa=self.kv_heads != self.heads
            )
        else:
            out = eager_attention(q, k, v, self.heads // self.kv_heads)
        out = out.transpose(1, 2).reshape(B, T, self.heads * self.head_size)
        return self.o_proj(out)


def eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, groups: int):
    """Hugging Face's eager attention: repeat K/V for GQA, QKᵀ·scale + causal mask,
    softmax in FP32, probs·V."""
    if groups > 1:
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
    T = q.shape[-2]
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    mask = torch.full((T, T), float("-inf"), device=q.device, dtype=scores.dtype).triu(1)
    probs = F.softmax(scores + mask, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(probs, v)


class MLP(nn.Module):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        d, f = spec.hidden_size, spec.ffn_dim
        self.gated = spec.ffn == "gated"
        self.act = activation(spec.hidden_act)
        if self.gated:
            self.gate_proj = nn.Linear(d, f, bias=spec.mlp_bias)
        self.up_proj = nn.Linear(d, f, bias=spec.mlp_bias)
        self.down_proj = nn.Linear(f, d, bias=spec.mlp_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gated:
            return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))
        return self.down_proj(self.act(self.up_proj(x)))


class Block(nn.Module):
    def __init__(self, spec: ModelSpec, attention: str) -> None:
        super().__init__()
        self.input_layernorm = make_norm(spec, spec.hidden_size)
        self.self_attn = Attention(spec, attention)
        self.post_attention_layernorm = make_norm(spec, spec.hidden_size)
        self.mlp = MLP(spec)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class ReferenceModel(nn.Module):
    """Token ids (B, T) → logits (B, T, V)."""

    def __init__(self, spec: ModelSpec, attention: str = "eager") -> None:
        super().__init__()
        check_buildable(spec)
        d, V = spec.hidden_size, spec.vocab_size
        self.embed_tokens = nn.Embedding(V, d)
        if spec.position_embedding == "learned":
            self.embed_positions = nn.Embedding(spec.max_position_embeddings, d)
        self.layers = nn.ModuleList(Block(spec, attention) for _ in range(spec.num_hidden_layers))
        self.norm = make_norm(spec, d)
        self.lm_head = nn.Linear(d, V, bias=spec.lm_head_bias)
        if spec.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(input_ids)
        if hasattr(self, "embed_positions"):
            x = x + self.embed_positions(torch.arange(input_ids.shape[1], device=x.device))
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))


def build(spec: ModelSpec, attention: str = "eager", dtype=None, device=None) -> ReferenceModel:
    """The reference model for ``spec``, created directly on ``device`` in ``dtype`` (FP32
    by default) — no conversion afterwards, so it also builds inside FakeTensorMode."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype or torch.float32)
    try:
        with torch.device(device or "cpu"):
            return ReferenceModel(spec, attention)
    finally:
        torch.set_default_dtype(previous)


def parameter_count(model: nn.Module) -> int:
    """Parameters counted once each (a tied lm_head shares the embedding)."""
    return sum(p.numel() for p in model.parameters())
