"""The seed's equations ("Memory to Train a Transformer"), one pure function each.

Symbols as in the seed: ``L`` layers, ``d`` = d_emb, ``h`` = n_head, ``V`` = d_vocab,
``B`` batch, ``T`` sequence length, ``N`` = N_param, ``s`` bytes per saved activation.
Functions named ``*_values`` count scalars; the rest return bytes. Nothing here knows a
file, a framework or a config: :func:`estimate` is the only one that reads a ModelSpec.
"""

from __future__ import annotations

from introspect.breakdown import Breakdown
from introspect.params import standard_parameters
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec
from introspect.terms import ADAM_M, ADAM_V, EMBEDDING, GRADS, MASTER_WEIGHTS, WEIGHTS

FP32 = 4

#: (params) ``N ≈ 2·V·d + 12·L·d²``: :func:`introspect.params.standard_parameters`,
#: which the seed's standard spec reads too (kept there so the spec needs no estimator).
parameters = standard_parameters


def weights(n_params: int, bytes_per_weight: int = FP32) -> int:
    """(eq:weights) ``4·N`` bytes in FP32; ``2·N`` for FP16/BF16 working weights."""
    return bytes_per_weight * n_params


def layernorm_activations(B: int, T: int, d: int) -> int:
    """(eq:layernorm_activations) ``2·B·T·d`` values per layer: the outputs of the two
    pre-norm LayerNorms. Their saved mean and inverse std (4 values per token) are left
    out of the seed's first-order estimate."""
    return 2 * B * T * d


def attention_linear_values(B: int, T: int, d: int) -> int:
    """The linear part of (eq:attention_activations): ``3BTd`` (Q, K, V) + ``BTd``
    (probs·V) + ``BTd`` (output projection) = ``5·B·T·d`` values per layer."""
    return 5 * B * T * d


def attention_quadratic_values(B: int, T: int, h: int) -> int:
    """The T² part of (eq:attention_activations): the scores QKᵀ and their softmax, each
    ``B × h × T × T``: ``2·B·h·T²`` values per layer."""
    return 2 * B * h * T * T


def attention_activations(B: int, T: int, d: int, h: int) -> int:
    """(eq:attention_activations) ``5·B·T·d + 2·B·h·T²`` values per layer."""
    return attention_linear_values(B, T, d) + attention_quadratic_values(B, T, h)


def ff_activations(B: int, T: int, d: int) -> int:
    """(eq:ff_activations) ``4BTd`` (up projection) + ``4BTd`` (activation function) +
    ``BTd`` (down projection) = ``9·B·T·d`` values per layer, for the seed's two-matrix
    feed-forward with expansion factor 4."""
    return 9 * B * T * d


def layer_activations(B: int, T: int, d: int, h: int) -> int:
    """(eq:layer_activations) ``16·B·T·d + 2·B·h·T²`` values for one layer: 2 from
    LayerNorm + 5 from attention + 9 from the feed-forward, plus the T² attention term."""
    return (
        layernorm_activations(B, T, d) + attention_activations(B, T, d, h) + ff_activations(B, T, d)
    )


def backward_values(n_params: int) -> int:
    """(eq:backward_values) ``4·N`` (FP32 gradients) + ``8·N`` (Adam's FP32 first and
    second moments) = ``12·N`` bytes."""
    return 12 * n_params


def activation_memory(B: int, T: int, d: int, h: int, L: int, V: int, s: int) -> int:
    """(eq:activation_memory) ``s·[B·T·d + L·(16·B·T·d + 2·B·h·T²) + B·T·V]`` bytes: the
    input embedding once, every layer L times, and the vocabulary logits once."""
    return s * (B * T * d + L * layer_activations(B, T, d, h) + B * T * V)


def training_memory(n_params: int, B: int, T: int, d: int, h: int, L: int, V: int, s: int) -> int:
    """(eq:training_memory) ``4N + 12N + s·[B·T·d + L·(16·B·T·d + 2·B·h·T²) + B·T·V]``
    bytes = weights + backward values + saved activations."""
    return weights(n_params) + backward_values(n_params) + activation_memory(B, T, d, h, L, V, s)


def estimate(spec: ModelSpec, setup: TrainingSetup) -> Breakdown:
    """The seed's estimate for ``spec`` trained as ``setup``, term by term.

    Only the seed's inputs are read: N, L, d, h, V from the spec; B, T, s and the weight
    dtype from the setup. The terms sum to (eq:training_memory) exactly when weights are
    FP32. With 16-bit working weights the seed's mixed-precision arrangement applies: 2N
    weights + 2N grads + 4N FP32 master + 8N Adam = the same 16N.
    """
    from introspect.vision import language_setup

    setup = language_setup(spec, setup)  # T_text + the visual tokens
    N, L, d, h, V = (
        spec.n_params,
        spec.num_hidden_layers,
        spec.hidden_size,
        spec.num_attention_heads,
        spec.vocab_size,
    )
    B, T, s = setup.batch_size, setup.seq_len, setup.activation_bytes
    w = setup.weight_bytes
    terms: dict[str, int] = {WEIGHTS: weights(N, w)}
    terms[EMBEDDING] = s * B * T * d
    terms["activations/layer/layernorm"] = s * L * layernorm_activations(B, T, d)
    terms["activations/layer/attention/linear"] = s * L * attention_linear_values(B, T, d)
    terms["activations/layer/attention/quadratic"] = s * L * attention_quadratic_values(B, T, h)
    terms["activations/layer/feed_forward"] = s * L * ff_activations(B, T, d)
    terms["activations/logits"] = s * B * T * V
    terms[GRADS] = w * N
    if w < FP32:
        terms[MASTER_WEIGHTS] = FP32 * N
    terms[ADAM_M] = FP32 * N
    terms[ADAM_V] = FP32 * N
    return Breakdown(
        terms,
        label="simplified (seed)",
        meta={"equation": "eq:training_memory", "n_params": N},
    )


#: Human names for the simplified terms, in the seed's words.
TERM_NAMES: dict[str, str] = {
    "weights": "weights (eq:weights)",
    "activations/embedding": "input embedding, BTd",
    "activations/layer/layernorm": "LayerNorm outputs, L·2BTd",
    "activations/layer/attention/linear": "attention Q,K,V, probs·V, out, L·5BTd",
    "activations/layer/attention/quadratic": "attention scores + softmax, L·2BhT²",
    "activations/layer/feed_forward": "feed-forward up, act, down, L·9BTd",
    "activations/logits": "logits, BTV",
    "grads": "gradients",
    "optimizer/master_weights": "FP32 master weights",
    "optimizer/adam_m": "Adam first moment m",
    "optimizer/adam_v": "Adam second moment v",
}
