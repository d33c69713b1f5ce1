"""What autograd really keeps for backward: the saved activations of one training step,
asked of the implementation that runs it
(:func:`introspect.refined.implementations.implementation_of`: our reference model,
:mod:`introspect.refined.reference`; transformers' classes,
:mod:`introspect.refined.hf_saved`), and what of a layer its attention backward still
holds (:func:`attention_side`), which is the same for every implementation.

Every function returns bytes for all L layers (per device: B is the per-device batch).
"""

from __future__ import annotations

from introspect.layers import LayerKind
from introspect.refined import shared_block
from introspect.refined.implementations import implementation_of
from introspect.refined.memo import per_estimate
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec


def keeps_t2_for(spec: ModelSpec, setup: TrainingSetup) -> bool:
    """Whether the T×T probabilities are kept, the model known (eager attention, MLX,
    and each implementation's math-kernel fallbacks: :meth:`Reference.keeps_t2
    <introspect.refined.implementations.Reference.keeps_t2>`)."""
    return implementation_of(spec, setup).keeps_t2(spec, setup)


def embedding(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """Bytes kept before the first layer: the embedding output (layer 0's input) and, for
    transformers' classes, the embedding dropout's mask and the shared rotary tables."""
    terms = implementation_of(spec, setup).embedding(spec, setup)
    copy = shared_block.embedding_copy(spec, setup)
    return terms | {"activations/embedding/copy": copy} if copy else terms


def largest_kind(spec: ModelSpec, setup: TrainingSetup) -> LayerKind:
    """The layer kind that keeps the most (a homogeneous model's only kind)."""
    kinds = [kind for kind, _ in spec.kinds]
    if len(kinds) == 1:
        return kinds[0]
    return max(kinds, key=lambda kind: sum(per_layer(spec, setup, kind).values()))


@per_estimate
def per_layer(
    spec: ModelSpec, setup: TrainingSetup, kind: LayerKind | None = None
) -> dict[str, int]:
    """Bytes one layer of ``kind`` keeps for backward, by term (default: the kind that
    keeps the most; the layer input is the previous layer's ``feed_forward/down`` or the
    embedding, so it is not repeated here)."""
    if kind is None:
        kind = largest_kind(spec, setup)
    out = implementation_of(spec, setup).per_layer(spec, setup, kind)
    if kind.shared is not None:  # the shared block this layer runs first, per use
        out = out | shared_block.saved(spec, setup, kind.shared)
    return out


@per_estimate
def stack(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """Bytes every layer keeps, by term: each distinct kind once, times its count (a
    shared block's autocast weight copies once per block:
    :func:`~introspect.refined.shared_block.stack_correction`)."""
    out: dict[str, int] = {}
    for kind, count in spec.kinds:
        for name, value in per_layer(spec, setup, kind).items():
            out[name] = out.get(name, 0) + count * value
    for name, value in shared_block.stack_correction(spec, setup).items():
        out[name] += value
    return out


#: Per-layer terms still alive when that layer's attention backward runs (the rest of
#: the layer — the feed-forward side, the second norm, the context, the layer output —
#: has been freed by then, since backward runs the block in reverse).
ATTENTION_SIDE = (
    "layernorm/qk_norm",
    "layernorm/qk_norm/normalized",
    # Gemma 4's weightless V norm (ClassFacts.v_norm): V's backward runs after the
    # softmax's (V's path was made before the scores), so its FP32 copy is still held.
    "layernorm/v_norm",
    "attention/linear/q",
    "attention/linear/k",
    "attention/linear/v",
    "attention/quadratic/probs",
    "attention/quadratic/probs_cast",
    # Granite-SWA's masked scores, saved by logsumexp, whose backward runs after the
    # softmax's (execution._at_lse_sink_backward).
    "attention/quadratic/sink_scores",
    "attention/quadratic/softcap",
    "attention/quadratic/clamped",
    "attention/quadratic/dropout_mask",
    "attention/quadratic/dropped",
    "attention/logsumexp",
    "attention/rope",
    "attention/linear/latent",
    "attention/linear/gates",
    "attention/state",
    "attention/mask",
    # Gated DeltaNet (introspect.refined.deltanet): its in-projections' casts and weight
    # copies, and every tensor of its kernel, run before (so freed after) the output.
    "attention/linear/input_casts",
    "attention/linear/autocast_weights",
)
#: Families of per-layer terms that are attention side as a whole; a shared block
#: (:mod:`~introspect.refined.shared_block`) runs before its layer's mixer, so all it
#: keeps is alive through the mixer's backward.
ATTENTION_SIDE_PREFIXES = (
    "attention/deltanet/",
    "attention/mamba/",
    "attention/mamba1/",
    "attention/rglru/",
    "shared_block/",
)


def is_attention_side(name: str) -> bool:
    """Whether a per-layer term is still held at its layer's attention backward."""
    return name in ATTENTION_SIDE or name.startswith(ATTENTION_SIDE_PREFIXES)


def attention_side_terms(layer: dict[str, int], spec: ModelSpec) -> dict[str, int]:
    """The terms of ``layer`` still held during its attention backward: the attention-side
    terms plus the first norm's output and statistics (half of the norm terms when the
    block has two norms)."""
    kept = {k: v for k, v in layer.items() if is_attention_side(k)}
    n = spec.norms_per_layer or 1
    for name in ("layernorm", "layernorm/statistics", "layernorm/normalized"):
        if name in layer:
            kept[name] = layer[name] // n
    return kept


def attention_side(layer: dict[str, int], spec: ModelSpec) -> int:
    """Bytes of :func:`attention_side_terms`."""
    return sum(attention_side_terms(layer, spec).values())


def final(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """Bytes kept after the last layer: the final norm's output (saved by lm_head), its
    statistics and, for RMSNorm, its normalized input. The embedding output (layer 0's
    input) is the ``activations/embedding`` term."""
    return implementation_of(spec, setup).final(spec, setup)


def logits_saved(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """Bytes the loss keeps (a standard cross-entropy's FP32 log-softmax and the loop's
    logits; a fused loss's log-sum-exp per token; a library's chunked loss's own set,
    :func:`introspect.refined.losses.saved`)."""
    from introspect.refined import losses

    if losses.is_library(setup):
        return losses.saved(spec, setup)
    return implementation_of(spec, setup).logits_saved(spec, setup)


@per_estimate
def checkpointed_layer(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """With activation checkpointing (``torch.utils.checkpoint`` around each block) what a
    layer keeps: its input, the previous layer's output (the rest is recomputed, one
    layer at a time, during backward)."""
    return implementation_of(spec, setup).checkpointed_layer(spec, setup)
