"""What one layer's feed-forward keeps for backward (dense, routed experts, Llama 4's
all-experts block): the feed-forward half of :mod:`introspect.refined.saved`, shared
with :mod:`introspect.refined.hf_saved` (transformers' mixture-of-experts blocks keep
the same routed path). Bytes for one layer of kind ``kind``.
"""

from __future__ import annotations

from introspect.layers import LayerKind
from introspect.refined.stream import residual_bytes
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

FP32 = 4


def expert_bytes(setup: TrainingSetup) -> int:
    """Bytes per value on a mixture-of-experts' routed path. transformers' grouped
    matmuls are not autocast-enabled: ``_grouped_mm`` casts its input to the weight's
    dtype (``transformers/integrations/moe.py``), so under autocast (FP32 weights) the
    routed rows, gate_up, act, product and expert outputs are FP32; otherwise the
    activations' dtype."""
    if setup.precision == "amp" and setup.implementation == "transformers":
        return setup.weight_bytes
    return setup.activation_bytes


def feed_forward(spec: ModelSpec, setup: TrainingSetup, kind: LayerKind) -> dict[str, int]:
    """What one layer's feed-forward keeps. Dense: up (the activation's input) and the
    activation's output (plain), or gate, up, act, product (gated); ``down`` is the
    layer's output (B·T·d), the next layer's input.

    MoE, as transformers 5 runs it by default (``use_experts_implementation`` →
    grouped matmuls over the k·B·T routed rows, sorted by expert): the gathered input
    (``routed_input``), gate_up's output (gate and up: one storage), act, product and the
    expert outputs (``expert_down``); the router's FP32 softmax over E — over the top-k
    only for gpt-oss, a sigmoid for DeepSeek/Llama 4 (``router``); the dispatch's index
    vectors (``routing``); the clamped SwiGLU's three extra tensors (``glu``: clamp(gate),
    sigmoid(α·gate), up + 1: gpt-oss's ``GptOssExperts._apply_gate``; MiniMax-M3's
    ``MiniMaxM3VLExperts._apply_gate`` and ``MiniMaxM3VLDenseMLP.forward``,
    ``models/minimax_m3_vl/modeling_minimax_m3_vl.py`` l. 184-190, 221-227, whose dense
    layers and shared experts run the same gate, so they keep the three too);
    shared experts on every token like a dense MLP, plus their output when a sigmoid
    gate multiplies it (Qwen2-MoE). No capacity padding: every routed row is computed
    once. Checked against a saved-tensor census (``introspect.measure.census``) of
    transformers' Qwen3-MoE, Qwen2-MoE, gpt-oss and DeepSeek-V3 on CPU
    (``tests/test_refined_moe.py``)."""
    BT, s, d = setup.tokens, setup.activation_bytes, spec.hidden_size
    ff = kind.feed_forward
    f = ff.intermediate_size
    if ff.ffn == "none":  # a mixer-only block: its output, the next norm's input
        return {"feed_forward/down": BT * d * setup.activation_bytes}
    if ff.all_experts:
        return all_experts(spec, setup, ff)
    k = ff.top_k if ff.is_moe else 1
    if ff.is_moe:
        s = expert_bytes(setup)
    out: dict[str, int] = {}
    if ff.ffn == "gated":
        out["feed_forward/gate"] = k * BT * f * s
    out["feed_forward/up"] = k * BT * f * s
    out["feed_forward/act"] = k * BT * f * s
    if ff.ffn == "gated":
        out["feed_forward/product"] = k * BT * f * s
    out["feed_forward/down"] = BT * d * setup.activation_bytes
    if ff.clamped_glu:
        # clamp(gate), sigmoid(α·gate), up + 1: three more k·BT·f tensors (the routed
        # rows', or a dense clamped MLP's: MiniMax-M3's dense layers).
        out["feed_forward/glu"] = 3 * k * BT * f * s
    if ff.is_moe:
        out["feed_forward/routed_input"] = k * BT * d * s
        out["feed_forward/expert_down"] = k * BT * d * s
        # The router's FP32 softmax (or sigmoid) output; gpt-oss softmaxes the top-k only.
        scored = ff.top_k if ff.router == "topk_softmax" else ff.num_experts
        out["feed_forward/router"] = BT * scored * FP32 + router_copies(spec, setup, ff)
        # The grouped-mm dispatch's bookkeeping: the routing weight gathered per row, and
        # integer indices — three int64 vectors over the rows (sort, its inverse, token
        # ids), the router's top-k (int64) and the per-expert offsets (int32).
        out["feed_forward/routing"] = k * BT * s
        out["feed_forward/routing_index"] = k * BT * 3 * 8 + BT * k * 8 + ff.num_experts * 4
        if ff.router_groups:
            out.update(_fp32_group_router(setup, ff, d))
        fs = ff.shared_intermediate_size
        if fs:
            # The shared experts are plain linears (autocast's under amp), not the
            # grouped matmuls: at the activations' dtype.
            a = setup.activation_bytes
            shared = (4 if ff.ffn == "gated" else 2) * BT * fs * a
            if ff.clamped_glu:  # MiniMax-M3's shared experts clamp as its routed ones
                shared += 3 * BT * fs * a
            if ff.shared_expert_gate:
                shared += BT * d * a + BT * a
            out["feed_forward/shared"] = shared
    return out


def router_copies(spec: ModelSpec, setup: TrainingSetup, ff) -> int:
    """DeepSeek-V2/V3's router input cast to FP32 (``router_fp32_input``): under a
    16-bit stream without autocast, ``hidden_states.type(torch.float32)`` is a new
    B·T·d FP32 tensor ``F.linear`` keeps for the weight's gradient (a census of
    DeepseekV2ForCausalLM in BF16 shows it as a ``_to_copy`` row under ``mlp.gate``).
    The weight's cast returns the weight itself: ``_keep_in_fp32_modules_strict =
    ["gate.weight"]`` keeps it FP32 in a BF16 build. In FP32 the input's cast returns
    the input; under autocast the linear runs on autocast's BF16 copies instead.

    The module-walked families whose router is written the same way (GLM-4-MoE, Solar
    Open, ERNIE 4.5 MoE: :attr:`~introspect.refined.transformers_classes.ClassFacts.
    router_fp32_input`) keep the same copy; their ``gate.weight`` is in
    ``_keep_in_fp32_modules_strict`` too. Kolibri1's is not (``ClassFacts.
    router_weight_cast``): the weight's FP32 copy, E·d, is kept beside the input's."""
    from introspect.refined.transformers_classes import facts

    if setup.implementation != "transformers":
        return 0
    if not (ff.router_fp32_input or facts(spec).router_fp32_input):
        return 0
    if setup.precision == "amp" or setup.activation_bytes >= FP32:
        return 0
    weight = ff.num_experts * spec.hidden_size if facts(spec).router_weight_cast else 0
    return (setup.tokens * spec.hidden_size + weight) * FP32


def _fp32_group_router(setup: TrainingSetup, ff, d: int) -> dict[str, int]:
    """Nemotron-H's ``NemotronHTopkRouter.forward`` and ``NemotronHMoE.forward``
    (``transformers/models/nemotron_h/modeling_nemotron_h.py`` l. 715–800), by census: the
    scores, the routing weights per row, the normalisation's sum (saved by the in-place
    divide) and the top-k weights' clone it divides are at the scores' dtype — FP32 (the
    router's ``.type(torch.float32)``) unless autocast runs its linear in BF16; the group
    selection keeps int64 indices (the top two per group, the chosen groups) and the
    boolean ``~score_mask`` of ``masked_fill``. Without autocast a 16-bit model's router
    keeps the FP32 copies of its input and weight; under autocast its BF16 input cast is
    one more than the block norm's output counts (the shared expert's up_proj makes its
    own)."""
    BT, E, k = setup.tokens, ff.num_experts, ff.top_k
    amp = setup.precision == "amp"
    r = setup.activation_bytes if amp else FP32
    out = {
        "feed_forward/router": BT * E * r,
        "feed_forward/routing": k * BT * r,
        "feed_forward/router_groups": BT * ff.router_groups * 2 * 8
        + BT * ff.router_topk_groups * 8
        + BT * E
        + BT * r
        + BT * k * r,
    }
    if amp:
        out["feed_forward/router_input"] = BT * d * setup.activation_bytes
    elif setup.activation_bytes < FP32:
        out["feed_forward/router_input"] = (BT * d + E * d) * FP32
    return out


def all_experts(spec: ModelSpec, setup: TrainingSetup, ff) -> dict[str, int]:
    """Llama 4's mixture of experts (``Llama4TextMoe.forward``, ``Llama4TextExperts``,
    ``Llama4Router`` in ``transformers/models/llama4/modeling_llama4.py``): every expert
    on every token. Over the E·B·T rows: the repeated input (``hidden.repeat(E, 1)``,
    kept by the multiply with the scores, at the norm output's dtype), the scaled rows
    (kept by the first ``bmm``), ``gate_up`` (kept through its two halves by the
    activation and the product), the activation and the product (kept by the second
    ``bmm``); the router's FP32 sigmoid over E and the scores it weights the rows with;
    the shared expert, a dense MLP over every token. ``torch.bmm`` is autocast's, so
    under amp the rows are BF16 (:func:`introspect.refined.hf_saved.linear_weights_per_layer`
    counts the experts' BF16 weight copies)."""
    BT, s, d = setup.tokens, setup.activation_bytes, spec.hidden_size
    E, f = ff.num_experts, ff.intermediate_size
    rows = E * BT
    norm_out = residual_bytes(setup)
    out = {
        "feed_forward/repeated_input": rows * d * norm_out,
        "feed_forward/routed_input": rows * d * s,
        "feed_forward/gate": rows * f * s,
        "feed_forward/up": rows * f * s,
        "feed_forward/act": rows * f * s,
        "feed_forward/product": rows * f * s,
        "feed_forward/router": BT * E * FP32,
        "feed_forward/routing": BT * E * s + BT * ff.top_k * 8,
        "feed_forward/down": BT * d * s,
    }
    if ff.shared_intermediate_size:
        out["feed_forward/shared"] = 4 * BT * ff.shared_intermediate_size * s
    return out
