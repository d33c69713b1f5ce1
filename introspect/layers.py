"""Layer kinds: what one block of a (possibly heterogeneous) stack is, as data.

A :class:`~introspect.spec.ModelSpec` is a sequence of :class:`LayerRun` — ``count``
identical consecutive blocks of one :class:`LayerKind`. A kind is its attention
(:class:`Attention`: full, a sliding window of W tokens, chunked, linear / state-space, or
DeepSeek's multi-head latent attention, with or without attention sinks), its feed-forward
(:class:`FeedForward`: dense plain or gated, or a mixture of routed and shared experts)
and how many block norms it has. Field names follow the Hugging Face configs that set
them (``sliding_window``, ``kv_lora_rank``, ``num_experts_per_tok`` …).

Sources of the structures: ``transformers/models/<family>/modeling_<family>.py`` (5.x) —
``gpt_oss`` (sinks, expert and router biases), ``deepseek_v3`` (MLA, shared experts, the
router's correction bias buffer), ``qwen2_moe`` (shared expert with its sigmoid gate),
``qwen3_next`` (Gated DeltaNet), ``llama4`` (chunked attention, NoPE layers).

Data only: no estimator is imported here. Invariants raise ``ValueError`` naming the key.
"""

from __future__ import annotations

from introspect._record import record

TYPE_CHECKING = False  # typing's flag without importing typing (see introspect._record)
if TYPE_CHECKING:
    from typing import Literal

    AttentionKind = Literal[
        "full", "sliding", "chunked", "linear", "mla", "mamba2", "mamba1", "rglru", "none"
    ]

#: The Gated DeltaNet's projection layouts (:attr:`Attention.linear_projections`).
LINEAR_PROJECTIONS = ("qkvz", "separate", "qkv_z_b_a")
ATTENTION_KINDS = (
    "full",
    "sliding",
    "chunked",
    "linear",
    "mla",
    "mamba2",
    "mamba1",
    "rglru",
    "none",
)
#: The Mamba-2 mixer's size fields (:class:`Attention`), each positive.
MAMBA2_FIELDS = (
    "mamba_num_heads",
    "mamba_head_dim",
    "mamba_state_size",
    "mamba_n_groups",
    "mamba_conv_kernel",
    "mamba_chunk_size",
)
#: The Mamba-1 mixer's size fields (:class:`Attention`), each positive.
MAMBA1_FIELDS = ("mamba_inner_size", "mamba_state_size", "mamba_conv_kernel", "mamba_dt_rank")
#: Norms on the Mamba-1 mixer's dt, B and C: none (Mamba), weightless (Falcon-Mamba's
#: ``FalconMambaWeightlessRMSNorm``), with weights (Jamba's ``JambaRMSNorm``).
MAMBA1_BCDT_NORMS = ("none", "weightless", "weighted")
QK_NORMS = ("none", "head", "full", "l2")
#: ``none``: a block whose one branch is its mixer (Nemotron-H's Mamba-2 and attention
#: blocks); an attention kind ``none`` is a block whose one branch is its feed-forward
#: (Nemotron-H's MLP blocks). Their placeholder sizes are read by no estimator.
FFN_KINDS = ("plain", "gated", "none")
ROUTERS = ("softmax", "topk_softmax", "sigmoid")


@record(kw_only=True)
class Attention:
    """One block's token mixer.

    ``full``, ``sliding`` (each query sees the last ``window`` keys) and ``chunked``
    (queries see keys of their own ``window``-token chunk, Llama 4) share the Q/K/V/O
    projections; ``mla`` compresses K/V (and optionally Q) through low-rank latents
    (DeepSeek-V2/V3); ``linear`` is a Gated DeltaNet layer (Qwen3-Next) with a
    ``linear_key_head_dim × linear_value_head_dim`` state per value head; ``mamba2`` a
    Mamba-2 mixer (Nemotron-H, Granite 4.0-H: :mod:`introspect.refined.mamba2`) and
    ``mamba1`` a Mamba-1 mixer (Mamba, Falcon-Mamba, Jamba:
    :mod:`introspect.refined.mamba1`), whose attention head fields are placeholders no
    estimator reads; ``rglru`` RecurrentGemma's recurrent block (linear_y/linear_x, a
    causal conv and the RG-LRU, :mod:`introspect.refined.rglru`), whose
    ``num_attention_heads`` is the RG-LRU's block count (its gates are block-diagonal);
    ``none`` no mixer (a block that is its feed-forward alone).
    """

    kind: AttentionKind = "full"
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    qkv_bias: bool = False
    o_bias: bool = False
    #: Extra norms on q and k: per head, over the full width, a weightless L2 norm
    #: (Llama 4's ``use_qk_norm``), or none.
    qk_norm: str = "none"
    #: Sliding window W or chunk size (tokens); ``None`` for full attention.
    window: int | None = None
    #: gpt-oss: one learned sink logit per query head joins every softmax.
    sinks: bool = False
    #: Rotary positions in this layer (Llama 4's NoPE layers have none; no parameters).
    rope: bool = True
    #: Qwen3-Next's gated attention: q_proj also makes a per-channel gate (2·q_dim wide)
    #: whose sigmoid multiplies the attention output.
    output_gate: bool = False
    # -- MLA (DeepSeek): q_lora_rank None = a plain q_proj.
    q_lora_rank: int | None = None
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    # -- linear attention (Gated DeltaNet, Qwen3-Next)
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 0
    #: How the Gated DeltaNet projects its input: Qwen3-Next's fused ``in_proj_qkvz`` and
    #: ``in_proj_ba`` (``qkvz``), OLMo-Hybrid's six separate linears q, k, v, a, b and
    #: the gate ``g_proj`` (``separate``), or Qwen3.5's ``in_proj_qkv`` (the conv's
    #: channels in order), ``in_proj_z``, ``in_proj_b`` and ``in_proj_a``
    #: (``qkv_z_b_a``); the same parameters, other saved tensors.
    linear_projections: str = "qkvz"
    # -- Mamba-2 mixer (Nemotron-H, Granite 4.0-H: ``mamba_n_heads`` heads of
    # ``mamba_d_head``, ``mamba_n_groups`` groups of ``mamba_d_state`` states, a depthwise
    # conv of ``mamba_d_conv`` taps, the scan in chunks of ``mamba_chunk_size``)
    mamba_num_heads: int = 0
    mamba_head_dim: int = 0
    mamba_state_size: int = 0
    mamba_n_groups: int = 0
    mamba_conv_kernel: int = 0
    mamba_chunk_size: int = 0
    #: Bias on the depthwise conv (``mamba_conv_bias``) and on in_proj/out_proj
    #: (``mamba_proj_bias``).
    mamba_conv_bias: bool = True
    mamba_proj_bias: bool = False
    #: out_proj's bias where the family sets it apart from in_proj's (Falcon-H1's
    #: ``projectors_bias``); ``None``: ``mamba_proj_bias``.
    mamba_out_bias: bool | None = None
    #: The gated RMSNorm on the scan's output (``mamba_rms_norm``); without it (Falcon-H1's
    #: default) the output is only multiplied by SiLU(gate), and the norm has no weight.
    mamba_gated_norm: bool = True
    #: Falcon-H1's muP scaling: the mixer's input times ``ssm_in_multiplier`` and in_proj's
    #: output times the ``mup_vector`` buffer (:mod:`introspect.refined.falcon_h1`).
    mamba_mup: bool = False
    # -- Mamba-1 mixer (Mamba, Falcon-Mamba, Jamba: ``intermediate_size`` channels of
    # ``state_size`` states each, a depthwise conv of ``conv_kernel`` taps, a
    # ``time_step_rank``-wide dt projection); shares the state, conv and bias fields above
    mamba_inner_size: int = 0
    mamba_dt_rank: int = 0
    mamba_bcdt_norm: str = "none"
    # -- RG-LRU temporal block (RecurrentGemma: ``lru_width`` channels in
    # ``num_attention_heads`` diagonal blocks, a causal depthwise conv of
    # ``conv1d_width`` taps)
    lru_width: int = 0
    lru_conv_width: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ATTENTION_KINDS:
            raise ValueError(
                f"attention kind must be one of {', '.join(ATTENTION_KINDS)}; got {self.kind!r}"
            )
        if self.qk_norm not in QK_NORMS:
            raise ValueError(f"qk_norm must be one of {', '.join(QK_NORMS)}; got {self.qk_norm!r}")
        for name in ("num_attention_heads", "num_key_value_heads", "head_dim"):
            _positive(name, getattr(self, name))
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_key_value_heads={self.num_key_value_heads} must divide "
                f"num_attention_heads={self.num_attention_heads}"
            )
        if self.kind in ("sliding", "chunked"):
            key = "sliding_window" if self.kind == "sliding" else "attention_chunk_size"
            if self.window is None:
                raise ValueError(f"{key} is required for {self.kind} attention")
            _positive(key, self.window)
        if self.kind == "mla":
            for name in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
                _positive(name, getattr(self, name))
            if self.q_lora_rank is not None:
                _positive("q_lora_rank", self.q_lora_rank)
        if self.kind == "linear":
            for name in (
                "linear_num_key_heads",
                "linear_num_value_heads",
                "linear_key_head_dim",
                "linear_value_head_dim",
                "linear_conv_kernel_dim",
            ):
                _positive(name, getattr(self, name))
            if self.linear_projections not in LINEAR_PROJECTIONS:
                raise ValueError(
                    f"linear_projections must be one of {', '.join(LINEAR_PROJECTIONS)}; "
                    f"got {self.linear_projections!r}"
                )
        if self.kind == "mamba1":
            for name in MAMBA1_FIELDS:
                _positive(name, getattr(self, name))
            if self.mamba_bcdt_norm not in MAMBA1_BCDT_NORMS:
                raise ValueError(
                    f"mamba_bcdt_norm must be one of {', '.join(MAMBA1_BCDT_NORMS)}; "
                    f"got {self.mamba_bcdt_norm!r}"
                )
        if self.kind == "rglru":
            _positive("lru_width", self.lru_width)
            _positive("conv1d_width", self.lru_conv_width)
            if self.lru_width % self.num_attention_heads:
                raise ValueError(
                    f"num_attention_heads={self.num_attention_heads} must divide "
                    f"lru_width={self.lru_width} (the RG-LRU's block-diagonal gates)"
                )
        if self.kind == "mamba2":
            for name in MAMBA2_FIELDS:
                _positive(name, getattr(self, name))
            if self.mamba_num_heads % self.mamba_n_groups:
                raise ValueError(
                    f"mamba_n_groups={self.mamba_n_groups} must divide "
                    f"mamba_num_heads={self.mamba_num_heads}"
                )

    @property
    def qk_head_dim(self) -> int:
        """Width of one query/key head (MLA: the non-rotary plus the rotary part)."""
        if self.kind == "mla":
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        return self.head_dim

    @property
    def q_dim(self) -> int:
        """Width of Q (all query heads)."""
        return self.num_attention_heads * self.qk_head_dim

    @property
    def k_dim(self) -> int:
        """Width of K as the attention reads it (MLA: decompressed, every head)."""
        if self.kind == "mla":
            return self.num_attention_heads * self.qk_head_dim
        return self.num_key_value_heads * self.head_dim

    @property
    def v_dim(self) -> int:
        """Width of V as the attention reads it (MLA: decompressed, every head)."""
        if self.kind == "mla":
            return self.num_attention_heads * self.v_head_dim
        return self.num_key_value_heads * self.head_dim

    @property
    def context_dim(self) -> int:
        """Width of the attention output before the output projection."""
        if self.kind == "mla":
            return self.num_attention_heads * self.v_head_dim
        return self.num_attention_heads * self.head_dim

    @property
    def group_size(self) -> int:
        return self.num_attention_heads // self.num_key_value_heads

    def keys_seen(self, seq_len: int) -> int:
        """Keys one query attends to at most: T, or the window / chunk when shorter."""
        if self.window is None or self.kind not in ("sliding", "chunked"):
            return seq_len
        return min(seq_len, self.window)


@record(kw_only=True)
class FeedForward:
    """One block's feed-forward: dense (``num_experts = 0``) of ``intermediate_size``,
    or ``num_experts`` routed experts of ``intermediate_size`` each, ``top_k`` per token,
    plus shared experts (always active) of ``shared_intermediate_size`` together."""

    ffn: str = "gated"
    intermediate_size: int
    #: Biases on the projections (GPT-2, Phi, gpt-oss's experts).
    bias: bool = False
    num_experts: int = 0
    top_k: int = 0
    shared_intermediate_size: int = 0
    #: Qwen2-MoE: a sigmoid gate (d → 1) on the shared expert's output.
    shared_expert_gate: bool = False
    #: gpt-oss: the router has a bias (E parameters).
    router_bias: bool = False
    #: DeepSeek-V3: ``e_score_correction_bias`` (E values), a buffer, not a parameter.
    router_correction_bias: bool = False
    #: DeepSeek-V2/V3's router scores an FP32 copy of its input (``F.linear(hidden_states
    #: .type(torch.float32), self.weight.type(torch.float32))`` in ``DeepseekV2TopkRouter``
    #: / ``DeepseekV3TopkRouter``): under a 16-bit stream a new B·T·d tensor it keeps.
    router_fp32_input: bool = False
    #: How the router scores: a softmax over all E (Qwen, Mixtral), a softmax over the
    #: top-k logits only (gpt-oss), or a sigmoid over E (DeepSeek-V3, Llama 4).
    router: str = "softmax"
    #: gpt-oss's clamped SwiGLU (``GptOssExperts._apply_gate``: clamp, sigmoid, +1) keeps
    #: three more tensors per routed row than a plain SwiGLU.
    clamped_glu: bool = False
    #: Every expert runs on every token, its input weighted by the router's score (zero
    #: off the top-k): Llama 4's ``Llama4TextMoe`` repeats the hidden states E times and
    #: runs the experts as one batched matmul over E·B·T rows. Otherwise each token's k
    #: chosen experts only (grouped matmuls over k·B·T rows).
    all_experts: bool = False
    #: Nemotron-H's ``NemotronHTopkRouter``: the sigmoid scores taken in FP32
    #: (``F.linear(x.type(torch.float32), weight.type(torch.float32))``), the experts
    #: chosen within ``router_topk_groups`` of ``router_groups`` groups, the top-k weights
    #: normalised (``norm_topk_prob``); 0: no such router.
    router_groups: int = 0
    router_topk_groups: int = 0

    def __post_init__(self) -> None:
        if self.ffn not in FFN_KINDS:
            raise ValueError(f"ffn must be one of {', '.join(FFN_KINDS)}; got {self.ffn!r}")
        _positive("intermediate_size", self.intermediate_size)
        if self.num_experts < 0 or self.top_k < 0 or self.shared_intermediate_size < 0:
            raise ValueError("num_experts, num_experts_per_tok and shared sizes must be >= 0")
        if self.router not in ROUTERS:
            raise ValueError(f"router must be one of {', '.join(ROUTERS)}; got {self.router!r}")
        if self.num_experts and not 0 < self.top_k <= self.num_experts:
            raise ValueError(
                f"num_experts_per_tok={self.top_k} must be between 1 and "
                f"num_experts={self.num_experts}"
            )

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0


@record(kw_only=True)
class SharedBlock:
    """A transformer block whose weights several layers share, run at each of them on
    that layer's input before the layer's own mixer (Zamba2's ``shared_transformer``,
    ``Zamba2AttentionDecoderLayer``, tied every ``num_mem_blocks`` hybrid layers).

    The block reads ``input_width`` features (Zamba2: ``2·d``, the layer input
    concatenated with the embedding output), normalizes them, runs its attention
    (q/k/v over the ``input_width``, o_proj back to d), a norm over d and its gated
    feed-forward, with no residual inside; a per-use ``output_linear`` d → d (no bias)
    adds the result to the layer's input before its mixer's norm. Per use too: rank-r
    adapters (``Linear(in, r)`` then ``Linear(r, out)``, added to a projection's
    output) on gate_up (``ffn_adapter_rank``) and on q, k and v
    (``attention_adapter_rank``, each ``input_width`` → r → ``input_width``).
    ``block_id`` names which shared block: its weights are counted once, whatever the
    number of layers that use it; its activations once per use."""

    block_id: int
    attention: Attention
    feed_forward: FeedForward
    input_width: int
    attention_adapter_rank: int = 0
    ffn_adapter_rank: int = 0
    output_linear: bool = True
    #: Adapter sets the block holds that no use runs (an untied copy of a block that
    #: would be shared holds every use's; a config's ``hybrid_layer_ids`` may list more
    #: slots than layers): parameters, counted once per block; no activations.
    idle_adapters: int = 0

    def __post_init__(self) -> None:
        if self.block_id < 0:
            raise ValueError(f"shared block id must be >= 0, got {self.block_id}")
        _positive("shared block input width", self.input_width)
        if self.attention.kind != "full":
            kind = self.attention.kind
            raise ValueError(f"a shared block's attention must be full; got {kind!r}")
        for name in ("attention_adapter_rank", "ffn_adapter_rank", "idle_adapters"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")


@record(kw_only=True)
class LayerKind:
    """One kind of block: its attention, its feed-forward and its block norms (2 for a
    pre-norm block, 1 for a parallel block, 4 with Gemma-2's post-norms); ``shared``, a
    :class:`SharedBlock` this layer runs before its own mixer (Zamba2's hybrid layers).

    ``mixer``: a second token mixer run beside the attention on the same normed input,
    its output added to the attention's before the residual add (Falcon-H1's
    ``FalconH1DecoderLayer``: attention and a Mamba-2 mixer in parallel); ``None`` for
    every other block."""

    attention: Attention
    feed_forward: FeedForward
    norms: int = 2
    shared: SharedBlock | None = None
    mixer: Attention | None = None

    def __post_init__(self) -> None:
        if self.norms < 0:
            raise ValueError(f"norms_per_layer must be >= 0, got {self.norms}")
        if self.mixer is not None and self.mixer.kind != "mamba2":
            raise ValueError(f"a parallel mixer must be a mamba2 mixer; got {self.mixer.kind!r}")


@record
class LayerRun:
    """``count`` consecutive blocks of one kind."""

    kind: LayerKind
    count: int

    def __post_init__(self) -> None:
        _positive("layer run count", self.count)


def runs_from_list(kinds: list[LayerKind] | tuple[LayerKind, ...]) -> tuple[LayerRun, ...]:
    """One kind per layer → runs of consecutive identical kinds."""
    out: list[LayerRun] = []
    for kind in kinds:
        if out and out[-1].kind == kind:
            out[-1] = LayerRun(kind, out[-1].count + 1)
        else:
            out.append(LayerRun(kind, 1))
    return tuple(out)


def _positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
