"""The reference decoder-only transformer in MLX, built from any ModelSpec.

The same model as :mod:`introspect.measure.torch_model` — pre-norm blocks, LayerNorm or
RMSNorm, MHA or GQA, plain or gated feed-forward, tied or untied embeddings, biases,
RoPE or learned positions — written as plain MLX modules the way the seed's
measurement was. Eager attention computes the T×T scores and softmax explicitly;
memory-efficient attention calls ``mx.fast.scaled_dot_product_attention``. Module names
follow mlx-lm's Llama so a parameter tree reads the same in both.
"""

from __future__ import annotations

import math

import mlx.core as mx
import mlx.nn as nn

from introspect.errors import IntrospectError
from introspect.measure.torch_model import check_buildable
from introspect.spec import ModelSpec

ACTIVATIONS = {
    "gelu": nn.gelu,
    "gelu_new": nn.gelu_approx,
    "gelu_pytorch_tanh": nn.gelu_approx,
    "silu": nn.silu,
    "swish": nn.silu,
    "relu": nn.relu,
}


def make_norm(spec: ModelSpec, width: int) -> nn.Module:
    if spec.norm == "rmsnorm":
        return nn.RMSNorm(width, eps=1e-6)
    return nn.LayerNorm(width, eps=1e-5, bias=spec.norm_bias)


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec, attention: str) -> None:
        super().__init__()
        d = spec.hidden_size
        self.heads, self.kv_heads, self.head_size = (
            spec.num_attention_heads,
            spec.kv_heads,
            spec.head_size,
        )
        self.scale = 1.0 / math.sqrt(self.head_size)
        self.memory_efficient = attention == "memory_efficient"
        self.q_proj = nn.Linear(d, spec.q_dim, bias=spec.qkv_bias)
        self.k_proj = nn.Linear(d, spec.kv_dim, bias=spec.qkv_bias)
        self.v_proj = nn.Linear(d, spec.kv_dim, bias=spec.qkv_bias)
        self.o_proj = nn.Linear(spec.q_dim, d, bias=spec.o_bias)
        self.qk_norm = spec.qk_norm
        if spec.qk_norm == "head":
            self.q_norm = make_norm(spec, spec.head_size)
            self.k_norm = make_norm(spec, spec.head_size)
        elif spec.qk_norm == "full":
            self.q_norm = make_norm(spec, spec.q_dim)
            self.k_norm = make_norm(spec, spec.kv_dim)
        self.rope = nn.RoPE(self.head_size) if spec.position_embedding == "rope" else None

    def __call__(self, x: mx.array, mask: mx.array) -> mx.array:
        B, T, _ = x.shape
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if self.qk_norm == "full":
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.reshape(B, T, self.heads, self.head_size).transpose(0, 2, 1, 3)
        k = k.reshape(B, T, self.kv_heads, self.head_size).transpose(0, 2, 1, 3)
        v = v.reshape(B, T, self.kv_heads, self.head_size).transpose(0, 2, 1, 3)
        if self.qk_norm == "head":
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rope is not None:
            q, k = self.rope(q), self.rope(k)
        if self.memory_efficient:
            out = mx.fast.scaled_dot_product_attention(q, k, v, scale=self.scale, mask="causal")
        else:
            groups = self.heads // self.kv_heads
            if groups > 1:
                k, v = mx.repeat(k, groups, axis=1), mx.repeat(v, groups, axis=1)
            scores = (q * self.scale) @ k.transpose(0, 1, 3, 2) + mask
            out = mx.softmax(scores, axis=-1, precise=True) @ v
        return self.o_proj(out.transpose(0, 2, 1, 3).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        d, f = spec.hidden_size, spec.ffn_dim
        try:
            self.act = ACTIVATIONS[spec.hidden_act]
        except KeyError:
            raise IntrospectError(
                f"hidden_act {spec.hidden_act!r} has no MLX reference implementation; "
                f"known: {', '.join(ACTIVATIONS)}"
            ) from None
        self.gated = spec.ffn == "gated"
        if self.gated:
            self.gate_proj = nn.Linear(d, f, bias=spec.mlp_bias)
        self.up_proj = nn.Linear(d, f, bias=spec.mlp_bias)
        self.down_proj = nn.Linear(f, d, bias=spec.mlp_bias)

    def __call__(self, x: mx.array) -> mx.array:
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

    def __call__(self, x: mx.array, mask: mx.array) -> mx.array:
        x = x + self.self_attn(self.input_layernorm(x), mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class ReferenceModel(nn.Module):
    """Token ids (B, T) → logits (B, T, V)."""

    def __init__(self, spec: ModelSpec, attention: str = "eager") -> None:
        super().__init__()
        check_buildable(spec)
        d, V = spec.hidden_size, spec.vocab_size
        self.tied = spec.tie_word_embeddings
        self.embed_tokens = nn.Embedding(V, d)
        self.learned_positions = spec.position_embedding == "learned"
        if self.learned_positions:
            self.embed_positions = nn.Embedding(spec.max_position_embeddings, d)
        self.layers = [Block(spec, attention) for _ in range(spec.num_hidden_layers)]
        self.norm = make_norm(spec, d)
        if not self.tied:
            self.lm_head = nn.Linear(d, V, bias=spec.lm_head_bias)
        elif spec.lm_head_bias:
            self.lm_head_bias = mx.zeros((V,))

    def __call__(self, input_ids: mx.array) -> mx.array:
        T = input_ids.shape[1]
        x = self.embed_tokens(input_ids)
        if self.learned_positions:
            x = x + self.embed_positions(mx.arange(T))
        mask = nn.MultiHeadAttention.create_additive_causal_mask(T).astype(x.dtype)
        for layer in self.layers:
            x = layer(x, mask)
        x = self.norm(x)
        if not self.tied:
            return self.lm_head(x)
        logits = self.embed_tokens.as_linear(x)
        return logits + self.lm_head_bias if hasattr(self, "lm_head_bias") else logits


def build(spec: ModelSpec, attention: str = "eager", dtype=None) -> ReferenceModel:
    """The reference model for ``spec``, its parameters evaluated, in ``dtype`` (FP32)."""
    mx.random.seed(0)
    model = ReferenceModel(spec, attention)
    if dtype is not None and dtype != mx.float32:
        model.set_dtype(dtype)
    mx.eval(model.parameters())
    return model


def parameter_count(model: nn.Module) -> int:
    from mlx.utils import tree_flatten

    return sum(v.size for _, v in tree_flatten(model.trainable_parameters()))
