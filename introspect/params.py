"""Exact parameter counts from a ModelSpec's structure, by component.

Unlike the seed's ``2Vd + 12Ld²``, this counts every tensor a real checkpoint holds:
GQA's narrower K/V projections, gated feed-forwards' third matrix, biases, norm weights
(and LayerNorm biases), q/k norms, learned positions, experts and their router, and a
tied output embedding once. The components always sum exactly to the total.
"""

from __future__ import annotations

from introspect.spec import ModelSpec

#: Components in report order.
COMPONENTS = ("embeddings", "attention", "mlp", "experts", "router", "norms", "lm_head")


def norm_params(spec: ModelSpec, width: int) -> int:
    """One norm over ``width`` features: a scale, plus a bias for LayerNorm with bias."""
    has_bias = spec.norm == "layernorm" and spec.norm_bias
    return width * (2 if has_bias else 1)


def attention_params(spec: ModelSpec) -> int:
    """One layer's attention: Q (d×q_dim), K and V (d×kv_dim each), O (q_dim×d), and
    their biases where the model has them."""
    d, q, kv = spec.hidden_size, spec.q_dim, spec.kv_dim
    total = d * q + 2 * d * kv + q * d
    if spec.qkv_bias:
        total += q + 2 * kv
    if spec.o_bias:
        total += d
    return total


def ffn_params(spec: ModelSpec) -> int:
    """One feed-forward: plain d→f→d (2·d·f) or gated (gate, up, down: 3·d·f), with
    biases (f per up-side projection, d for down) where the model has them."""
    d, f = spec.hidden_size, spec.ffn_dim
    matrices = 3 if spec.ffn == "gated" else 2
    total = matrices * d * f
    if spec.mlp_bias:
        total += (matrices - 1) * f + d
    return total


def qk_norm_params(spec: ModelSpec) -> int:
    """One layer's q/k norms: per head (``head_dim`` each, shared across heads, as Qwen3)
    or over the full projection widths (q_dim + kv_dim, as OLMo2)."""
    if spec.qk_norm == "head":
        return 2 * norm_params(spec, spec.head_size)
    if spec.qk_norm == "full":
        return norm_params(spec, spec.q_dim) + norm_params(spec, spec.kv_dim)
    return 0


def parameters_by_component(spec: ModelSpec) -> dict[str, int]:
    """Exact parameters per component; the values sum to :func:`parameter_count`.

    embeddings = V·d (+ learned positions); attention = L·(Q, K, V, O, biases);
    mlp = L·FFN for dense models; experts = L·E·FFN and router = L·d·E for MoE;
    norms = L·(norms per layer + q/k norms) + final norm; lm_head = V·d unless tied
    (+ its bias).
    """
    L, d, V = spec.num_hidden_layers, spec.hidden_size, spec.vocab_size
    embeddings = V * d
    if spec.position_embedding == "learned":
        embeddings += (spec.max_position_embeddings or 0) * d
    ffn = ffn_params(spec)
    out = {
        "embeddings": embeddings,
        "attention": L * attention_params(spec),
        "mlp": 0 if spec.is_moe else L * ffn,
        "experts": L * spec.num_local_experts * ffn,
        "router": L * d * spec.num_local_experts,
        "norms": L * (spec.norms_per_layer * norm_params(spec, d) + qk_norm_params(spec))
        + norm_params(spec, d),
        "lm_head": (0 if spec.tie_word_embeddings else V * d) + (V if spec.lm_head_bias else 0),
    }
    return out


def parameter_count(spec: ModelSpec) -> int:
    """N from the structure: the sum of :func:`parameters_by_component`."""
    return sum(parameters_by_component(spec).values())
