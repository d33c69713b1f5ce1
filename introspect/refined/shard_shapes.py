"""The parameter tensors a sharding strategy splits, and how each strategy splits them:
the shape lists of one block and of the root unit, torch's ZeRO-1 partition, FSDP2's
padded dim-0 shards, DeepSpeed's default constants. Primitives shared by
:mod:`introspect.refined.sharding` (full training) and
:mod:`introspect.refined.lora_sharded` (a frozen base and its adapters), kept apart so
neither imports the other back."""

from __future__ import annotations

import math

from introspect.params import norm_params
from introspect.refined.memo import per_estimate
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

#: DeepSpeed ``runtime/zero/config.py`` defaults (elements).
DS_REDUCE_BUCKET = 500_000_000
DS_PREFETCH_BUCKET = 50_000_000
DS_MAX_LIVE_PARAMETERS = 1_000_000_000
DS_PERSISTENCE_THRESHOLD = 100_000

Shape = tuple[int, ...]


# --- the parameter tensors -------------------------------------------------------------


def _linear(out_f: int, in_f: int, bias: bool) -> list[Shape]:
    return [(out_f, in_f)] + ([(out_f,)] if bias else [])


def _norm(spec: ModelSpec, width: int) -> list[Shape]:
    return [(width,)] * (norm_params(spec, width) // width)


@per_estimate
def layer_tensors(spec: ModelSpec) -> list[Shape]:
    """One block's parameter tensors, in module order (Llama's names: input norm, q, k,
    v, o and the q/k norms, post-attention norm, gate/up/down or the experts and router).
    nn.Linear's weight is (out, in)."""
    d, q, kv, f = spec.hidden_size, spec.q_dim, spec.kv_dim, spec.ffn_dim
    out: list[Shape] = []
    norms = _norm(spec, d)
    out += norms
    att = spec.kinds[0][0].attention
    if att.kind == "mamba2":
        out += mamba2_tensors(att, d)
    elif att.kind == "rglru":
        out += rglru_tensors(att, d)
    elif att.kind == "mla":
        out += mla_tensors(spec, att, d)
    elif att.kind != "none":
        out += _linear(q, d, spec.qkv_bias) + _linear(kv, d, spec.qkv_bias) * 2
        out += _linear(d, q, spec.o_bias)
    if spec.qk_norm == "head":
        out += _norm(spec, spec.head_size) * 2
    elif spec.qk_norm == "full":
        out += _norm(spec, q) + _norm(spec, kv)
    for _ in range(spec.norms_per_layer - 1):
        out += norms
    if spec.is_moe:
        # transformers 5's experts are fused: the router, then one (E, 2f, d) gate_up (or
        # (E, f, d) up) and one (E, d, f) down tensor (``MixtralSparseMoeBlock``: gate,
        # experts; ``MixtralExperts.gate_up_proj``, ``down_proj``).
        E = spec.num_local_experts
        out.append((E, d))
        out.append((E, (2 if spec.ffn == "gated" else 1) * f, d))
        out.append((E, d, f))
        if spec.mlp_bias:
            out += [(E, (2 if spec.ffn == "gated" else 1) * f), (E, d)]
        ff = spec.kinds[0][0].feed_forward
        if ff.shared_intermediate_size:
            # The shared experts, one MLP after the routed ones (Qwen2-MoE's
            # ``shared_expert``, DeepSeek's ``shared_experts``), and Qwen2-MoE's (1, d)
            # ``shared_expert_gate``.
            fs = ff.shared_intermediate_size
            out += [(fs, d)] * (2 if spec.ffn == "gated" else 1) + [(d, fs)]
            if ff.shared_expert_gate:
                out.append((1, d))
        return out
    if spec.ffn == "none":  # a mixer-only block (Nemotron-H's M, Zamba2's layers)
        return out
    if spec.ffn == "gated":
        out += _linear(f, d, spec.mlp_bias)
    out += _linear(f, d, spec.mlp_bias) + _linear(d, f, spec.mlp_bias)
    if spec.per_layer_input_size:
        # Gemma 4's per_layer_input_gate, per_layer_projection, post_per_layer_input_norm
        # (``Gemma4TextDecoderLayer.__init__``, models/gemma4/modeling_gemma4.py l. 1345-1350)
        dpl = spec.per_layer_input_size
        out += [(dpl, d), (d, dpl)] + _norm(spec, d)
    return out


def per_layer_input_tensors(spec: ModelSpec) -> list[Shape]:
    """Gemma 4's model-level per-layer-input tensors after the final norm, in
    ``Gemma4TextModel.__init__`` order (l. 1565-1580): ``embed_tokens_per_layer``
    (V_pl, L·d_pl), ``per_layer_model_projection`` (L·d_pl, d),
    ``per_layer_projection_norm`` (d_pl); none without per-layer inputs."""
    dpl = spec.per_layer_input_size
    if not dpl:
        return []
    P = spec.num_hidden_layers * dpl
    return [(spec.per_layer_input_vocab, P), (P, spec.hidden_size), *_norm(spec, dpl)]


def mla_tensors(spec: ModelSpec, att, d: int) -> list[Shape]:
    """Multi-head latent attention's tensors in module order (``MiniCPM3Attention`` /
    ``DeepseekV3Attention.__init__``, ``models/minicpm3/modeling_minicpm3.py`` l. 253-286):
    q_proj (h·qk_head_dim, d), or q_a_proj (r_q, d), q_a_layernorm (r_q) and q_b_proj
    (h·qk_head_dim, r_q); kv_a_proj_with_mqa (r_kv + rope, d), kv_a_layernorm (r_kv),
    kv_b_proj (h·(nope + v), r_kv); o_proj (d, h·v). The a-projections and o_proj carry
    ``attention_bias``; the b-projections none. The single-tensor Adam loop's largest
    temporaries are q_b_proj's (:func:`introspect.refined.sharding.
    single_tensor_temporaries`)."""
    h, bias = att.num_attention_heads, att.qkv_bias
    out: list[Shape] = []
    if att.q_lora_rank is None:
        out += _linear(h * att.qk_head_dim, d, False)
    else:
        r = att.q_lora_rank
        out += _linear(r, d, bias) + _norm(spec, r) + _linear(h * att.qk_head_dim, r, False)
    r = att.kv_lora_rank
    out += _linear(r + att.qk_rope_head_dim, d, bias) + _norm(spec, r)
    out += _linear(h * (att.qk_nope_head_dim + att.v_head_dim), r, False)
    return out + _linear(d, h * att.v_head_dim, att.o_bias)


def mamba2_tensors(att, d: int) -> list[Shape]:
    """A Mamba-2 mixer's tensors (``Zamba2MambaMixer`` / ``GraniteMoeHybridMambaLayer``
    ``__init__``): the depthwise conv (C, 1, w) and its bias, in_proj (P, d), dt_bias,
    A_log, the gated norm (I), D, out_proj (d, I)."""
    from introspect.refined.mamba2 import widths

    w, h, bias = widths(att, d), att.mamba_num_heads, att.mamba_proj_bias
    out: list[Shape] = [(w["C"], 1, att.mamba_conv_kernel)]
    out += [(w["C"],)] if att.mamba_conv_bias else []
    out += _linear(w["P"], d, bias) + [(h,), (h,), (w["I"],), (h,)] + _linear(d, w["I"], bias)
    return out


def rglru_tensors(att, d: int) -> list[Shape]:
    """RecurrentGemma's recurrent block in module order (``RecurrentGemmaRecurrentBlock.
    __init__`` and ``RecurrentGemmaRglru.__init__``, ``models/recurrent_gemma/
    modeling_recurrent_gemma.py``): linear_y, linear_x, linear_out (with biases), conv_1d
    (W, 1, w) and its bias, then the RG-LRU's recurrent_param, input gate weight (h, W/h,
    W/h) and bias (h, W/h), recurrent gate weight and bias."""
    W, h = att.lru_width, att.num_attention_heads
    block = W // h
    out = _linear(W, d, True) * 2 + _linear(d, W, True)
    out += [(W, 1, att.lru_conv_width), (W,), (W,)]
    return out + [(h, block, block), (h, block)] * 2


def shared_tensors(spec: ModelSpec, block, first: bool) -> list[Shape]:
    """What one use of a shared block adds to ``model.parameters()``
    (``Zamba2HybridLayer``: its ``linear``; at the block's first use, the tied block —
    q, k, v, o, each use's adapters, gate_up, down, its two norms — which later uses
    yield no more)."""
    d, W, att, ff = spec.hidden_size, block.input_width, block.attention, block.feed_forward
    out: list[Shape] = [(d, d)] if block.output_linear else []
    if not first:
        return out
    uses = (
        1
        + block.idle_adapters
        + sum(count - 1 for kind, count in spec.kinds if kind.shared == block)
    )
    q, kv, r_att, r_ff = att.q_dim, att.k_dim, block.attention_adapter_rank, block.ffn_adapter_rank
    out += _linear(q, W, att.qkv_bias) + _linear(kv, W, att.qkv_bias) * 2
    out += _linear(d, q, att.o_bias)
    out += [(r_att, W), (W, r_att)] * 3 * uses if r_att else []
    up = (2 if ff.ffn == "gated" else 1) * ff.intermediate_size
    out += _linear(up, d, ff.bias) + _linear(d, ff.intermediate_size, ff.bias)
    out += [(r_ff, d), (up, r_ff)] * uses if r_ff else []
    return out + _norm(spec, W) + _norm(spec, d)


@per_estimate
def root_tensors(spec: ModelSpec) -> list[Shape]:
    """What FSDP2's root unit holds: the embedding (and learned positions), the final
    norm and an untied head (and its bias)."""
    V, d = spec.vocab_size, spec.hidden_size
    out: list[Shape] = [(V, d)]
    if spec.position_embedding == "learned":
        out.append((spec.max_position_embeddings or 0, d))
    out += _norm(spec, d)
    out += per_layer_input_tensors(spec)
    if not spec.tie_word_embeddings:
        out.append((V, d))
    if spec.lm_head_bias:
        out.append((V,))
    return out


@per_estimate
def parameter_tensors(spec: ModelSpec) -> list[Shape]:
    """Every parameter tensor in ``model.parameters()`` order (a tied head once)."""
    V, d = spec.vocab_size, spec.hidden_size
    out: list[Shape] = [(V, d)]
    if spec.position_embedding == "learned":
        out.append((spec.max_position_embeddings or 0, d))
    seen: set[int] = set()
    for run in spec.runs:  # each block as its own kind, in order
        block = run.kind.shared
        if block is None:
            out += layer_tensors(spec.for_kind(run.kind)) * run.count
            continue
        for _ in range(run.count):  # a shared block's weights at its first use
            out += shared_tensors(spec, block, block.block_id not in seen)
            out += layer_tensors(spec.for_kind(run.kind))
            seen.add(block.block_id)
    out += _norm(spec, d)
    out += per_layer_input_tensors(spec)
    if not spec.tie_word_embeddings:
        out.append((V, d))
    if spec.lm_head_bias:
        out.append((V,))
    return out


def numel(shape: Shape) -> int:
    return math.prod(shape)


def zero_partition(sizes: list[int], devices: int) -> list[int]:
    """``ZeroRedundancyOptimizer._partition_parameters``: tensors sorted by size, largest
    first (stable), each to the first rank with the smallest total; elements per rank,
    for the first ``min(devices, len(sizes))`` ranks (the others never receive a tensor:
    while one of those is empty, an empty rank with a lower index exists)."""
    return [sum(rank) for rank in _zero_ranks(sizes, devices)]


def _zero_ranks(sizes: list[int], devices: int) -> list[list[int]]:
    """The tensors of each rank of :func:`zero_partition`, in the order each rank gets
    them. A heap of (total, rank) picks the first rank with the smallest total in
    O(log D), so the work follows the tensor count, not ``devices``."""
    import heapq  # ZeRO-1 only: not on every closed-form command's start

    ranks: list[list[int]] = [[] for _ in range(max(1, min(devices, len(sizes))))]
    heap = [(0, r) for r in range(len(ranks))]
    for n in sorted(sizes, reverse=True):
        total, r = heap[0]
        heapq.heapreplace(heap, (total + n, r))
        ranks[r].append(n)
    return ranks


def fsdp_shard(shapes: list[Shape], devices: int) -> int:
    """Elements one rank holds of ``shapes`` under FSDP2: dim 0 padded to a multiple of D,
    ⌈dim0/D⌉·rest each (every rank stores the padded shard)."""
    return sum(math.ceil(s[0] / devices) * numel(s[1:]) for s in shapes)


# One block's and the root's sizes, asked at every moment of a sharded estimate; memoised
# per estimate (pure in the frozen spec and the device count: introspect.refined.memo).
@per_estimate
def block_elements(spec: ModelSpec) -> int:
    """Elements of one block's parameter tensors."""
    return sum(numel(s) for s in layer_tensors(spec))


@per_estimate
def root_elements(spec: ModelSpec) -> int:
    """Elements of FSDP2's root unit."""
    return sum(numel(s) for s in root_tensors(spec))


@per_estimate
def block_shard(spec: ModelSpec, devices: int) -> int:
    """:func:`fsdp_shard` of one block."""
    return fsdp_shard(layer_tensors(spec), devices)


@per_estimate
def model_shard(spec: ModelSpec, devices: int) -> int:
    """:func:`fsdp_shard` of every parameter tensor."""
    return fsdp_shard(parameter_tensors(spec), devices)


@per_estimate
def zero1_largest_rank(spec: ModelSpec, devices: int) -> int:
    """Elements of the largest rank's :func:`zero_partition` of every parameter tensor."""
    return max(zero_partition([numel(s) for s in parameter_tensors(spec)], devices))


# --- what the execution layer asks -----------------------------------------------------


def strategy(setup: TrainingSetup) -> str:
    """The setup's resolved sharding (:attr:`TrainingSetup.resolved_sharding`). DDP and
    FSDP2 on one device still hold their buckets and gathered copies."""
    return setup.resolved_sharding
