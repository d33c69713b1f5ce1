"""The architecture layer: the seed's own bookkeeping, recomputed for the real model.

The seed counts every tensor the forward pass produces (and the persistent training
state) for one simplified block: LayerNorm, multi-head attention, a plain d→4d→d
feed-forward. This layer counts the same tensors for the model's real shapes —

* GQA: K and V are ``num_key_value_heads · head_dim`` wide, not d;
* ``head_dim`` ≠ d/h: Q and the attention context are ``num_attention_heads · head_dim``;
* a gated feed-forward: gate, up, activation and product, each ``intermediate_size`` wide;
* extra norms (Gemma-2's four per block, q/k norms);
* MoE: each token passes through ``num_experts_per_tok`` experts, plus the router's logits;
* N is the exact parameter count (biases, norm weights, every expert, a tied embedding
  once) — for weights, gradients and Adam alike.

Nothing about how a framework runs the step is read here (that is
:mod:`introspect.refined.execution`): only B, T, s and the working-weight dtype, exactly
the seed's inputs. For the seed's standard transformer every term equals
:func:`introspect.simplified.estimate` exactly (``tests/test_refined_architecture.py``).

Every function returns *values* (scalars) for all L layers unless it says bytes.
"""

from __future__ import annotations

from introspect.breakdown import Breakdown
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

FP32 = 4


def norm_output_values(spec: ModelSpec, tokens: int) -> int:
    """(eq:layernorm_activations, real) ``norms_per_layer · BT·d`` per layer: each norm's
    output. RMSNorm produces the same output as LayerNorm; what it saves differs (one
    statistic instead of two), which is the execution layer's business."""
    return spec.norms_per_layer * tokens * spec.hidden_size


def qk_norm_output_values(spec: ModelSpec, tokens: int) -> int:
    """q/k norms (Qwen3 per head, OLMo2 over the full width): their outputs,
    ``BT·(q_dim + kv_dim)`` per layer. The seed has no such tensors."""
    if spec.qk_norm == "none":
        return 0
    return tokens * (spec.q_dim + spec.kv_dim)


def attention_linear_values(spec: ModelSpec, tokens: int) -> dict[str, int]:
    """The linear part of (eq:attention_activations) for real widths, per layer:
    Q ``BT·h·head_dim``, K and V ``BT·kv_heads·head_dim`` each (GQA shrinks them by the
    group size), probs·V ``BT·h·head_dim``, output projection ``BT·d``. For the seed's
    MHA with head_dim = d/h these are 3BTd + BTd + BTd = 5BTd."""
    return {
        "q": tokens * spec.q_dim,
        "k": tokens * spec.kv_dim,
        "v": tokens * spec.kv_dim,
        "context": tokens * spec.q_dim,
        "out": tokens * spec.hidden_size,
    }


def attention_quadratic_values(spec: ModelSpec, B: int, T: int) -> dict[str, int]:
    """The T² part of (eq:attention_activations), per layer: scores QKᵀ and their softmax,
    each ``B·h·T²`` — one per *query* head, so GQA does not shrink it."""
    one = B * spec.num_attention_heads * T * T
    return {"scores": one, "probs": one}


def feed_forward_values(spec: ModelSpec, tokens: int) -> dict[str, int]:
    """(eq:ff_activations, real) per layer, with f = ``intermediate_size`` and k experts
    per token (1 for a dense model):

    * plain: up ``k·BT·f``, activation ``k·BT·f``, down ``k·BT·d`` — the seed's 9BTd when
      f = 4d and k = 1;
    * gated (SwiGLU/GeGLU): gate ``k·BT·f``, up ``k·BT·f``, activation(gate) ``k·BT·f``,
      product act·up ``k·BT·f``, down ``k·BT·d``;
    * MoE also produces the router's logits and their softmax, ``2·BT·E``.
    """
    d, f = spec.hidden_size, spec.ffn_dim
    k = spec.num_experts_per_tok if spec.is_moe else 1
    out: dict[str, int] = {}
    if spec.ffn == "gated":
        out["gate"] = k * tokens * f
    out["up"] = k * tokens * f
    out["act"] = k * tokens * f
    if spec.ffn == "gated":
        out["product"] = k * tokens * f
    out["down"] = k * tokens * d
    if spec.is_moe:
        out["router"] = 2 * tokens * spec.num_local_experts
    return out


def state_terms(n_params: int, weight_bytes: int) -> dict[str, int]:
    """The seed's persistent training state for N parameters, in bytes: working weights
    and their gradients at ``weight_bytes`` each, an FP32 master copy when the working
    weights are 16-bit, and Adam's FP32 m and v — 16N either way (eq:weights,
    eq:backward_values). N counts every expert of a mixture, active or not."""
    terms = {"weights": weight_bytes * n_params, "grads": weight_bytes * n_params}
    if weight_bytes < FP32:
        terms["optimizer/master_weights"] = FP32 * n_params
    terms["optimizer/adam_m"] = FP32 * n_params
    terms["optimizer/adam_v"] = FP32 * n_params
    return terms


def estimate(spec: ModelSpec, setup: TrainingSetup) -> Breakdown:
    """The architecture layer for ``spec`` trained as ``setup``: the seed's terms with
    real shapes, refined terms as sub-paths of the seed's (``activations/layer/attention/
    linear/k``), so ``Breakdown.sum(seed_term)`` lines the two up term by term."""
    L, B, T, s = spec.num_hidden_layers, setup.batch_size, setup.seq_len, setup.activation_bytes
    BT = B * T
    state = state_terms(spec.n_params, setup.weight_bytes)
    terms: dict[str, int] = {"weights": state.pop("weights")}
    notes: dict[str, str] = {}
    terms["activations/embedding"] = s * BT * spec.hidden_size
    terms["activations/layer/layernorm"] = s * L * norm_output_values(spec, BT)
    if spec.norms_per_layer != 2:
        notes["activations/layer/layernorm"] = f"{spec.norms_per_layer} norms per block, not 2"
    if spec.qk_norm != "none":
        terms["activations/layer/layernorm/qk_norm"] = s * L * qk_norm_output_values(spec, BT)
        notes["activations/layer/layernorm/qk_norm"] = (
            f"q/k norms ({spec.qk_norm}): outputs BT·(q_dim + kv_dim) per layer"
        )
    for name, values in attention_linear_values(spec, BT).items():
        terms[f"activations/layer/attention/linear/{name}"] = s * L * values
    if spec.group_size > 1:
        for name in ("k", "v"):
            notes[f"activations/layer/attention/linear/{name}"] = (
                f"GQA: {spec.kv_heads} K/V heads for {spec.num_attention_heads} query heads "
                f"(group size {spec.group_size}): BT·{spec.kv_dim} instead of BT·d"
            )
    if spec.q_dim != spec.hidden_size:
        for name in ("q", "context"):
            notes[f"activations/layer/attention/linear/{name}"] = (
                f"head_dim {spec.head_size} · {spec.num_attention_heads} heads = "
                f"{spec.q_dim} ≠ d = {spec.hidden_size}"
            )
    for name, values in attention_quadratic_values(spec, B, T).items():
        terms[f"activations/layer/attention/quadratic/{name}"] = s * L * values
    for name, values in feed_forward_values(spec, BT).items():
        terms[f"activations/layer/feed_forward/{name}"] = s * L * values
    if spec.ffn == "gated":
        ratio = spec.ffn_dim / spec.hidden_size
        for name in ("gate", "product"):
            notes[f"activations/layer/feed_forward/{name}"] = (
                f"gated feed-forward: a third matrix, f = {spec.ffn_dim} = {ratio:.2f}·d"
            )
    if spec.is_moe:
        notes["activations/layer/feed_forward/router"] = (
            f"MoE router: logits and softmax over {spec.num_local_experts} experts"
        )
    terms["activations/logits"] = s * BT * spec.vocab_size
    terms.update(state)
    return Breakdown(
        terms,
        label="refined: architecture",
        notes=notes,
        meta={"n_params": spec.n_params, "layer": "architecture"},
    )
