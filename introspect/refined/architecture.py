"""The architecture layer: the seed's own bookkeeping, recomputed for the real model.

The seed counts every tensor the forward pass produces (and the persistent training
state) for one simplified block: LayerNorm, multi-head attention, a plain d→4d→d
feed-forward. This layer counts the same tensors for the model's real shapes —

* GQA: K and V are ``num_key_value_heads · head_dim`` wide, not d;
* ``head_dim`` ≠ d/h: Q and the attention context are ``num_attention_heads · head_dim``;
* a gated feed-forward: gate, up, activation and product, each ``intermediate_size`` wide;
* extra norms (Gemma-2's four per block, q/k norms);
* MoE: each token passes through ``num_experts_per_tok`` experts, plus the router's logits
  and the shared experts every token passes through;
* sliding-window and chunked attention: scores over the window's keys, not all T (what a
  windowed kernel computes; transformers' eager path builds the full T×T anyway — the
  execution layer, :mod:`introspect.refined.saved`, counts that);
* attention sinks: one more softmax column; MLA: the latents and the decompressed K/V;
  linear attention (Gated DeltaNet): no T×T terms, a state per chunk;
* a heterogeneous stack: each distinct layer kind once, times its count;
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
from introspect.layers import LayerKind
from introspect.params import trainable_parameter_count
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec
from introspect.terms import ADAM_M, ADAM_V, EMBEDDING, GRADS, MASTER_WEIGHTS, WEIGHTS

FP32 = 4


#: Chunk length of the chunked Gated DeltaNet recurrence
#: (``transformers/models/qwen3_next/modeling_qwen3_next.py``,
#: ``torch_chunk_gated_delta_rule(chunk_size=64)``): one state per chunk and value head.
LINEAR_CHUNK = 64


def norm_output_values(spec: ModelSpec, tokens: int, kind: LayerKind | None = None) -> int:
    """(eq:layernorm_activations, real) ``norms · BT·d`` per layer: each norm's output.
    RMSNorm produces the same output as LayerNorm; what it saves differs (one statistic
    instead of two), which is the execution layer's business."""
    kind = kind or spec.default_kind
    return kind.norms * tokens * spec.hidden_size


def qk_norm_output_values(spec: ModelSpec, tokens: int, kind: LayerKind | None = None) -> int:
    """q/k norms (Qwen3 per head, OLMo2 over the full width, Llama 4's L2): their
    outputs, ``BT·(q_dim + k_dim)`` per layer. The seed has no such tensors."""
    att = (kind or spec.default_kind).attention
    if att.qk_norm == "none":
        return 0
    return tokens * (att.q_dim + att.k_dim)


def attention_linear_values(
    spec: ModelSpec, tokens: int, kind: LayerKind | None = None
) -> dict[str, int]:
    """The linear part of (eq:attention_activations) for real widths, per layer:
    Q ``BT·h·head_dim``, K and V ``BT·kv_heads·head_dim`` each (GQA shrinks them by the
    group size), probs·V ``BT·h·head_dim``, output projection ``BT·d``. For the seed's
    MHA with head_dim = d/h these are 3BTd + BTd + BTd = 5BTd.

    MLA: K and V decompressed to every head (``h·(nope+rope)``, ``h·v_head_dim``) plus the
    latents (``latent``: q_a and its norm ``2·r_q``, kv_a ``r_kv + rope`` and its norm
    ``r_kv``). Linear attention (Gated DeltaNet): Q, K of the key width, V and the output
    gate z of the value width, the conv output (``2·key + value``) and the per-head
    decay and beta (``gates``). Mamba-2: x and the output of its width I, B and C of
    g·n each, and the gate z and dt (``gates``)."""
    att = (kind or spec.default_kind).attention
    if att.kind == "none":
        return {}
    out = {
        "q": tokens * att.q_dim,
        "k": tokens * att.k_dim,
        "v": tokens * att.v_dim,
        "context": tokens * att.context_dim,
        "out": tokens * spec.hidden_size,
    }
    if att.output_gate:
        out["gate"] = 3 * tokens * att.q_dim  # gate, its sigmoid, the gated context
    if att.kind == "mla":
        q_latent = 2 * att.q_lora_rank if att.q_lora_rank else 0
        out["latent"] = tokens * (
            q_latent + att.kv_lora_rank + att.qk_rope_head_dim + att.kv_lora_rank
        )
    if att.kind == "linear":
        key = att.linear_num_key_heads * att.linear_key_head_dim
        value = att.linear_num_value_heads * att.linear_value_head_dim
        out.update(
            q=tokens * key,
            k=tokens * key,
            v=tokens * value,
            context=tokens * value,
            gates=tokens * (value + 2 * att.linear_num_value_heads + 2 * key + value),
        )
    if att.kind == "mamba2":
        inner = att.mamba_num_heads * att.mamba_head_dim
        groups = att.mamba_n_groups * att.mamba_state_size
        out.update(
            q=tokens * inner,
            k=tokens * groups,
            v=tokens * groups,
            context=tokens * inner,
            gates=tokens * (inner + att.mamba_num_heads),
        )
    return out


def attention_quadratic_values(
    spec: ModelSpec, B: int, T: int, kind: LayerKind | None = None
) -> dict[str, int]:
    """The T² part of (eq:attention_activations), per layer: scores QKᵀ and their softmax,
    each ``B·h·T·keys`` — one per *query* head, so GQA does not shrink it; ``keys`` is T,
    or the window / chunk when shorter (a windowed kernel's band), plus one sink column
    (gpt-oss). Linear attention has no T² term: its state is ``B·h_v·d_k·d_v`` per chunk of
    :data:`LINEAR_CHUNK` tokens."""
    att = (kind or spec.default_kind).attention
    if att.kind == "none":
        return {}
    if att.kind == "linear":
        chunks = -(-T // LINEAR_CHUNK)
        state = att.linear_num_value_heads * att.linear_key_head_dim * att.linear_value_head_dim
        return {"state": B * chunks * state}
    if att.kind == "mamba2":
        # The scan's state (h·p·n per chunk boundary) and its c×c chunk matrices per head.
        c = att.mamba_chunk_size
        chunks = -(-T // c)
        heads = B * att.mamba_num_heads
        state = heads * (chunks + 1) * att.mamba_head_dim * att.mamba_state_size
        return {"state": state + heads * chunks * c * c}
    keys = att.keys_seen(T) + (1 if att.sinks else 0)
    one = B * att.num_attention_heads * T * keys
    return {"scores": one, "probs": one}


def feed_forward_values(
    spec: ModelSpec, tokens: int, kind: LayerKind | None = None
) -> dict[str, int]:
    """(eq:ff_activations, real) per layer, with f = ``intermediate_size`` and k experts
    per token (1 for a dense model):

    * plain: up ``k·BT·f``, activation ``k·BT·f``, down ``k·BT·d`` — the seed's 9BTd when
      f = 4d and k = 1;
    * gated (SwiGLU/GeGLU): gate ``k·BT·f``, up ``k·BT·f``, activation(gate) ``k·BT·f``,
      product act·up ``k·BT·f``, down ``k·BT·d``;
    * MoE also produces the router's logits and their softmax, ``2·BT·E``, and the
      shared experts (every token) their gate, up, activation, product (``BT·f_s`` each)
      and output (``BT·d``), plus the shared expert's sigmoid gate (``BT``).
    """
    ff = (kind or spec.default_kind).feed_forward
    d, f = spec.hidden_size, ff.intermediate_size
    k = ff.top_k if ff.is_moe else 1
    if ff.ffn == "none":
        return {"down": tokens * d}  # the block's output
    out: dict[str, int] = {}
    if ff.ffn == "gated":
        out["gate"] = k * tokens * f
    out["up"] = k * tokens * f
    out["act"] = k * tokens * f
    if ff.ffn == "gated":
        out["product"] = k * tokens * f
    out["down"] = k * tokens * d
    if ff.is_moe:
        out["router"] = 2 * tokens * ff.num_experts
        fs = ff.shared_intermediate_size
        if fs:
            out["shared"] = tokens * ((4 if ff.ffn == "gated" else 2) * fs + d)
            out["shared"] += tokens if ff.shared_expert_gate else 0
    return out


def _kind_terms(spec: ModelSpec, kind: LayerKind, B: int, T: int) -> dict[str, int]:
    """Values of one layer of ``kind``, by term (relative to ``activations/layer``)."""
    BT = B * T
    terms = {"layernorm": norm_output_values(spec, BT, kind)}
    if kind.attention.qk_norm != "none":
        terms["layernorm/qk_norm"] = qk_norm_output_values(spec, BT, kind)
    for name, values in attention_linear_values(spec, BT, kind).items():
        terms[f"attention/linear/{name}"] = values
    for name, values in attention_quadratic_values(spec, B, T, kind).items():
        terms[f"attention/quadratic/{name}"] = values
    if kind.mixer is not None:
        # Falcon-H1: the Mamba-2 mixer's values beside the attention's (its own x, B, C,
        # gate and dt, its output, its scan state and chunk matrices).
        from introspect import _record

        beside = _record.replace(kind, attention=kind.mixer, mixer=None)
        for name, values in attention_linear_values(spec, BT, beside).items():
            key = f"attention/linear/{name}"
            terms[key] = terms.get(key, 0) + values
        for name, values in attention_quadratic_values(spec, B, T, beside).items():
            key = f"attention/quadratic/{name}"
            terms[key] = terms.get(key, 0) + values
    for name, values in feed_forward_values(spec, BT, kind).items():
        terms[f"feed_forward/{name}"] = values
    if kind.shared is not None:
        terms.update(shared_block_values(spec, kind, B, T))
    return terms


def shared_block_values(spec: ModelSpec, kind: LayerKind, B: int, T: int) -> dict[str, int]:
    """A shared block's tensors in one use (Zamba2's hybrid layers: the block runs at
    every layer that uses it, its weights counted once): the seed's bookkeeping at the
    block's shapes — its two norms' outputs (over W = its input width, and over d); Q
    (BT·q_dim), K and V (BT·kv_dim), the context and o_proj's output (BT·d); the
    scores and probabilities (2·B·h·T²); gate, up, activation and product (BT·f each;
    up, activation for a plain MLP), the MLP's output and the per-use linear's (BT·d
    each)."""
    block = kind.shared
    BT, d, W = B * T, spec.hidden_size, block.input_width
    att, ff = block.attention, block.feed_forward
    f = ff.intermediate_size
    return {
        "layernorm/shared_block": BT * (W + d),
        "attention/linear/shared_block": BT * (2 * att.q_dim + 2 * att.k_dim + d),
        "attention/quadratic/shared_block": 2 * B * att.num_attention_heads * T * T,
        "feed_forward/shared_block": BT * ((4 if ff.ffn == "gated" else 2) * f + 2 * d),
    }


def layer_terms(spec: ModelSpec, B: int, T: int) -> dict[str, int]:
    """Values of every layer, by term: each distinct kind computed once and multiplied by
    how many layers have it (never a loop over the L layers)."""
    out: dict[str, int] = {}
    for kind, count in spec.kinds:
        for name, values in _kind_terms(spec, kind, B, T).items():
            out[name] = out.get(name, 0) + count * values
    return out


def _notes(spec: ModelSpec, T: int) -> dict[str, str]:
    """Why the real terms differ from the seed's, per term (first kind with a feature)."""
    notes: dict[str, str] = {}
    L = spec.num_hidden_layers
    layer = "activations/layer"
    for kind, count in spec.kinds:
        att, ff = kind.attention, kind.feed_forward
        where = f" ({count} of {L} layers)" if count != L else ""
        if kind.norms != 2:
            notes.setdefault(f"{layer}/layernorm", f"{kind.norms} norms per block, not 2{where}")
        if kind.shared is not None:
            notes.setdefault(
                f"{layer}/attention/linear/shared_block",
                f"a shared transformer block run first{where}: its activations per use, "
                "its weights once",
            )
        if att.qk_norm != "none":
            notes.setdefault(
                f"{layer}/layernorm/qk_norm",
                f"q/k norms ({att.qk_norm}): outputs BT·(q_dim + kv_dim) per layer",
            )
        if att.kind == "mamba2":
            notes.setdefault(
                f"{layer}/attention/quadratic/state",
                f"Mamba-2 mixer: a head_dim×state state per head and chunk boundary and "
                f"{att.mamba_chunk_size}×{att.mamba_chunk_size} chunk matrices, no T×T "
                f"scores{where}",
            )
        if att.kind != "mla" and att.group_size > 1:
            for name in ("k", "v"):
                notes.setdefault(
                    f"{layer}/attention/linear/{name}",
                    f"GQA: {att.num_key_value_heads} K/V heads for {att.num_attention_heads} "
                    f"query heads (group size {att.group_size}): BT·{att.k_dim} instead of BT·d",
                )
        if att.q_dim != spec.hidden_size and att.kind not in ("linear", "mamba2"):
            for name in ("q", "context"):
                notes.setdefault(
                    f"{layer}/attention/linear/{name}",
                    f"head_dim {att.qk_head_dim} · {att.num_attention_heads} heads = "
                    f"{att.q_dim} ≠ d = {spec.hidden_size}",
                )
        if att.kind == "mla":
            notes.setdefault(
                f"{layer}/attention/linear/latent",
                f"MLA: K/V through a {att.kv_lora_rank}-wide latent, decompressed to "
                f"{att.num_attention_heads} heads{where}",
            )
        if att.kind in ("sliding", "chunked") and att.keys_seen(T) < T:
            notes.setdefault(
                f"{layer}/attention/quadratic/scores",
                f"{att.kind} attention: B·h·T·{att.window} instead of B·h·T²{where}",
            )
        if att.sinks:
            notes.setdefault(
                f"{layer}/attention/quadratic/probs", "attention sinks: one more column per row"
            )
        if att.kind == "linear":
            notes.setdefault(
                f"{layer}/attention/quadratic/state",
                f"linear attention: a d_k×d_v state per value head and {LINEAR_CHUNK}-token "
                f"chunk, no T×T scores{where}",
            )
        if ff.ffn == "gated":
            ratio = ff.intermediate_size / spec.hidden_size
            for name in ("gate", "product"):
                notes.setdefault(
                    f"{layer}/feed_forward/{name}",
                    f"gated feed-forward: a third matrix, f = {ff.intermediate_size} = "
                    f"{ratio:.2f}·d",
                )
        if ff.is_moe:
            notes.setdefault(
                f"{layer}/feed_forward/router",
                f"MoE router: logits and softmax over {ff.num_experts} experts; each token "
                f"through {ff.top_k}{where}",
            )
            if ff.shared_intermediate_size:
                notes.setdefault(
                    f"{layer}/feed_forward/shared",
                    f"shared experts ({ff.shared_intermediate_size} wide) on every token",
                )
    return notes


def state_terms(n_params: int, weight_bytes: int, trainable: int | None = None) -> dict[str, int]:
    """The seed's persistent training state for N parameters, in bytes: working weights
    and their gradients at ``weight_bytes`` each, an FP32 master copy when the working
    weights are 16-bit, and Adam's FP32 m and v — 16N either way (eq:weights,
    eq:backward_values). N counts every expert of a mixture, active or not; gradients,
    master copy and Adam cover the ``trainable`` ones (all N unless a tower is frozen)."""
    n = n_params if trainable is None else trainable
    terms = {WEIGHTS: weight_bytes * n_params, GRADS: weight_bytes * n}
    if weight_bytes < FP32:
        terms[MASTER_WEIGHTS] = FP32 * n
    terms[ADAM_M] = FP32 * n
    terms[ADAM_V] = FP32 * n
    return terms


def estimate(spec: ModelSpec, setup: TrainingSetup) -> Breakdown:
    """The architecture layer for ``spec`` trained as ``setup``: the seed's terms with
    real shapes, refined terms as sub-paths of the seed's (``activations/layer/attention/
    linear/k``), so ``Breakdown.sum(seed_term)`` lines the two up term by term. Each
    layer kind is computed once and multiplied by its count."""
    B, T, s = setup.batch_size, setup.seq_len, setup.activation_bytes
    BT = B * T
    trainable = trainable_parameter_count(spec, freeze_tower=setup.freeze_tower)
    state = state_terms(spec.n_params, setup.weight_bytes, trainable)
    terms: dict[str, int] = {WEIGHTS: state.pop("weights")}
    terms[EMBEDDING] = s * BT * spec.hidden_size
    for name, values in layer_terms(spec, B, T).items():
        terms[f"activations/layer/{name}"] = s * values
    terms["activations/logits"] = s * BT * spec.vocab_size
    terms.update(state)
    notes = {k: v for k, v in _notes(spec, T).items() if k in terms}
    return Breakdown(
        terms,
        label="refined: architecture",
        notes=notes,
        meta={"n_params": spec.n_params, "layer": "architecture"},
    )
