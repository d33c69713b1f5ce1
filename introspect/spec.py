"""ModelSpec: the one normalized description of a transformer that every estimator reads.

Field names follow Hugging Face's config names (``hidden_size``, ``num_key_value_heads``,
``tie_word_embeddings``, …) so nobody translates; the structural facts a formula needs
(norm kind, gated or plain feed-forward, biases, experts, q/k norms) are explicit fields.
Derived values are properties. Invariants raise ``ValueError`` naming the field.
"""

from __future__ import annotations

from functools import cached_property

from introspect import _record
from introspect._record import field, record
from introspect.layers import Attention, FeedForward, LayerKind, LayerRun, SharedBlock
from introspect.params import parameter_count, standard_parameters
from introspect.vision import VisionTower

TYPE_CHECKING = False  # typing's flag without importing typing (see introspect._record)
if TYPE_CHECKING:
    from typing import Any, Literal

    NormKind = Literal["layernorm", "rmsnorm"]
    FFNKind = Literal["plain", "gated", "none"]
    QKNorm = Literal["none", "head", "full", "l2"]
    PositionKind = Literal["rope", "learned", "none"]


NORM_KINDS = ("layernorm", "rmsnorm")
FFN_KINDS = ("plain", "gated", "none")
QK_NORMS = ("none", "head", "full", "l2")
POSITION_KINDS = ("rope", "learned", "none")


@record(kw_only=True)
class ModelSpec:
    """A decoder-only transformer, as far as memory is concerned.

    The seed's symbols map as: ``L = num_hidden_layers``, ``d = hidden_size``,
    ``h = num_attention_heads``, ``V = vocab_size``, ``N = n_params``.

    The per-layer fields (heads, widths, biases, norms, experts, ``sliding_window``)
    describe one kind of block repeated L times (:attr:`default_kind`). A heterogeneous
    stack lists its blocks in ``layers``, runs of identical kinds
    (:mod:`introspect.layers`) whose counts sum to L; the flat fields then describe its
    main kind for display.
    """

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    vocab_size: int
    #: GQA/MQA: heads that K and V have; ``None`` means as many as Q (multi-head attention).
    num_key_value_heads: int | None = None
    #: Width of one head; ``None`` means hidden_size / num_attention_heads.
    head_dim: int | None = None
    #: Feed-forward width (per projection for a gated FFN); ``None`` means 4·hidden_size.
    intermediate_size: int | None = None
    tie_word_embeddings: bool = False
    norm: NormKind = "layernorm"
    #: LayerNorm with a bias (``elementwise_affine`` with bias); RMSNorm never has one.
    norm_bias: bool = True
    #: The block and final norms scale by a learned weight; False for a weightless norm
    #: (NanoChat's ``NanoChatRMSNorm``: ``self._norm(x.float()).type_as(x)``, no weight,
    #: ``models/nanochat/modeling_nanochat.py`` l. 44-53), which keeps no ``x·rstd`` for
    #: a weight's gradient.
    norm_weight: bool = True
    ffn: FFNKind = "plain"
    hidden_act: str = "gelu"
    #: Bias on the q, k and v projections (Qwen2 has them; Llama does not).
    qkv_bias: bool = False
    #: Bias on the attention output projection.
    o_bias: bool = False
    #: Bias on the feed-forward projections.
    mlp_bias: bool = False
    #: Projections the class computes as one linear: ``qkv`` (Phi-3's ``qkv_proj``,
    #: GPT-2's and Qwen's ``c_attn``) and ``gate_up`` (Phi-3's ``gate_up_proj``). The
    #: parameters are those of separate projections; a per-linear adapter (LoRA) sits on
    #: the fused one.
    fused_linears: tuple[str, ...] = ()
    #: Bias on the output (lm_head) projection (Phi has one).
    lm_head_bias: bool = False
    #: Extra norms on queries and keys: per head (Qwen3: head_dim weights), over the full
    #: projection width (OLMo2: q_dim and kv_dim weights), or none.
    qk_norm: QKNorm = "none"
    #: Norms in each block: 2 for the seed's pre-norm block (before attention and before
    #: the feed-forward), 1 for a parallel block (Phi), 4 with extra post-norms (Gemma-2).
    norms_per_layer: int = 2
    position_embedding: PositionKind = "rope"
    #: The context length; with ``learned`` positions also the table's size (GPT-2's
    #: n_positions). Windows and chunks may not exceed it.
    max_position_embeddings: int | None = None
    #: Every layer attends to the last W tokens only (Mistral-7B-v0.1); ``None`` = full.
    sliding_window: int | None = None
    #: Mixture of experts: experts per layer (0 = dense) and experts used per token.
    num_local_experts: int = 0
    num_experts_per_tok: int = 0
    #: A heterogeneous stack: runs of identical blocks; empty = L blocks of
    #: :attr:`default_kind`.
    layers: tuple[LayerRun, ...] = ()
    #: A multimodal wrapper's vision / audio tower and projector: parameters counted in
    #: N but reported apart, and what they are.
    tower_parameters: int = 0
    tower: str = ""
    #: Of those, the ones the class itself freezes (``requires_grad_(False)``: MOSS-
    #: Transcribe-Diarize's ``audio_tower.embed_positions``): no gradient, no optimizer
    #: state, whatever the setup.
    tower_frozen_parameters: int = 0
    #: A vision-language wrapper's processor rule and tower geometry: images → visual
    #: tokens (:mod:`introspect.vision`); ``None`` for a text model.
    vision: VisionTower | None = None
    #: Parameters a published checkpoint holds that the built model lacks (DeepSeek-V3's
    #: multi-token-prediction layers): not in N, said in reports.
    unbuilt_parameters: int = 0
    unbuilt: str = ""
    #: The exact parameter count when the source knows it (checkpoint headers, a published
    #: total, or the seed's N given by hand); ``None`` derives it from the structure.
    num_parameters: int | None = None
    #: Hugging Face's ``model_type`` (or a description such as ``"standard"``).
    model_type: str = "standard"
    #: Where this spec came from: a Hub id, a path, a module class, "seed formula", …
    source: str = ""
    #: Facts the source did not state and the adapter had to assume, in words.
    assumptions: tuple[str, ...] = field(default=())
    #: Parts of the stack the closed form does not model (a Mamba mixer, an RG-LRU, an
    #: attention of unknown projections …), each named with the layers that hold it. Not
    #: empty: the per-layer fields are placeholders no estimator may read; the estimates
    #: are refused and ``profile`` answers from a dry run of the real class
    #: (:mod:`introspect.unmodelled`).
    unmodelled: tuple[str, ...] = field(default=())
    # ---- execution facts (the refined execution layer reads them; no parameters) ----
    #: Dropout probabilities the config enables in train mode: on the attention
    #: probabilities (``attention_dropout``, GPT-2's ``attn_pdrop``), on each block's
    #: branch outputs (``resid_pdrop``, ``hidden_dropout``) and on the embedding output
    #: (``embd_pdrop``).
    attention_dropout: float = 0.0
    hidden_dropout: float = 0.0
    embedding_dropout: float = 0.0
    #: Parts outside the blocks beside the final norm, read off a built class:
    #: ``embedding_norm``, a norm of the block norms' kind on the embedding output before
    #: the first block (ModernBERT-decoder's ``embeddings.norm``); ``head_transform``, a
    #: d→d dense, its activation and such a norm between the final norm and the output
    #: projection (``ModernBertDecoderPredictionHead``, ``models/modernbert_decoder/
    #: modeling_modernbert_decoder.py`` l. 338-347).
    embedding_norm: bool = False
    head_transform: bool = False
    #: The blocks add their branch to an FP32 residual whatever the weights' dtype
    #: (Mamba's, Falcon-Mamba's and Mamba-2's ``residual_in_fp32``, default true:
    #: ``residual = residual.to(torch.float32)`` before ``residual + hidden_states``,
    #: ``models/mamba2/modeling_mamba2.py`` l. 641-650): in a 16-bit step the stream is
    #: FP32 from the first block on, so its gradient is FP32 and the final norm, which
    #: reads it uncast (``self.norm_f(hidden_states)``, l. 821), keeps x·rstd in FP32.
    residual_in_fp32: bool = False
    #: The class calls SDPA with K and V at their own, fewer heads and no ``enable_gqa``
    #: (Falcon's multi-query block, ``models/falcon/modeling_falcon.py`` l. 313-346):
    #: torch's fused kernels need equal head counts, so the math kernel runs.
    sdpa_kv_heads_broadcast: bool = False
    #: The model hands every layer's SDPA call an explicit mask, whatever the window and
    #: T: Gemma 4 unified's image-text model builds its masks with ``block_sequence_ids``
    #: (all -1 for text) when ``use_bidirectional_attention == "vision"``
    #: (``Gemma4UnifiedModel.forward``, ``models/gemma4_unified/
    #: modeling_gemma4_unified.py`` l. 1170-1182), which sets ``allow_is_causal_skip =
    #: False`` (``masking_utils.py`` l. 997-1000, 1231-1234): no ``is_causal`` shortcut,
    #: so each layer gets its type's boolean mask (:func:`introspect.adapters.
    #: multimodal.explicit_mask_facts`).
    sdpa_mask_every_layer: bool = False
    #: The built class's buffers (``model.named_buffers()``, each storage once), resident
    #: beside the weights through the whole step: the integer and boolean ones in bytes
    #: (GPT-Neo's per-layer ``bias`` causal mask, ``max_position_embeddings``² bools,
    #: ``models/gpt_neo/modeling_gpt_neo.py`` l. 59-70) and the floating ones in elements
    #: (OpenAI GPT's ``tril(ones(n_positions, n_positions))`` mask, ``models/openai/
    #: modeling_openai.py`` l. 53), which the class builds in its load dtype. Read from
    #: a meta-device build only; 0 where the spec comes from a family reader.
    buffer_bytes: int = 0
    float_buffer_elements: int = 0
    #: Fraction of each head that rotary positions rotate (Phi's ``partial_rotary_factor``).
    partial_rotary_factor: float = 1.0
    #: Gemma 2's tanh soft-capping of the attention scores and of the logits
    #: (``cap · tanh(x / cap)``; Hugging Face's names; None: not capped).
    attn_logit_softcapping: float | None = None
    final_logit_softcapping: float | None = None
    #: Gemma 4's per-layer inputs (``hidden_size_per_layer_input``, d_pl; 0: none) and
    #: their table's vocabulary (``vocab_size_per_layer_input``, V_pl;
    #: ``models/gemma4/modeling_gemma4.py`` l. 1345-1350, 1565-1580, 1705-1784): an
    #: embedding ``embed_tokens_per_layer`` (V_pl, L·d_pl) and a projection
    #: ``per_layer_model_projection`` (d → L·d_pl) with its RMSNorm of width d_pl outside
    #: the blocks, and in every block ``per_layer_input_gate`` (d → d_pl), the
    #: activation, the product with that layer's slice, ``per_layer_projection``
    #: (d_pl → d) and ``post_per_layer_input_norm`` (width d) before a residual add.
    per_layer_input_size: int = 0
    per_layer_input_vocab: int = 0

    def __post_init__(self) -> None:
        for name in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"):
            _require_positive(name, getattr(self, name))
        for name in (
            "num_key_value_heads",
            "head_dim",
            "intermediate_size",
            "max_position_embeddings",
            "sliding_window",
            "num_parameters",
        ):
            value = getattr(self, name)
            if value is not None:
                _require_positive(name, value)
        if self.num_attention_heads % self.kv_heads:
            raise ValueError(
                f"num_key_value_heads={self.kv_heads} must divide "
                f"num_attention_heads={self.num_attention_heads}"
            )
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} must divide "
                f"hidden_size={self.hidden_size} (or give head_dim)"
            )
        _require_choice("norm", self.norm, NORM_KINDS)
        _require_choice("ffn", self.ffn, FFN_KINDS)
        _require_choice("qk_norm", self.qk_norm, QK_NORMS)
        _require_choice("position_embedding", self.position_embedding, POSITION_KINDS)
        if self.num_local_experts < 0 or self.num_experts_per_tok < 0:
            raise ValueError("num_local_experts and num_experts_per_tok must be >= 0")
        if self.num_local_experts and not (0 < self.num_experts_per_tok <= self.num_local_experts):
            raise ValueError(
                f"num_experts_per_tok={self.num_experts_per_tok} must be between 1 and "
                f"num_local_experts={self.num_local_experts}"
            )
        if self.position_embedding == "learned" and self.max_position_embeddings is None:
            raise ValueError("max_position_embeddings is required with learned positions")
        if self.norms_per_layer < 0:
            raise ValueError(f"norms_per_layer must be >= 0, got {self.norms_per_layer}")
        if self.per_layer_input_size < 0 or self.per_layer_input_vocab < 0:
            raise ValueError("per_layer_input_size and per_layer_input_vocab must be >= 0")
        if self.tower_parameters < 0 or self.unbuilt_parameters < 0:
            raise ValueError("tower_parameters and unbuilt_parameters must be >= 0")
        if not 0 <= self.tower_frozen_parameters <= self.tower_parameters:
            raise ValueError("tower_frozen_parameters must be between 0 and tower_parameters")
        self._check_layers()

    def _check_layers(self) -> None:
        if not isinstance(self.layers, tuple) or not all(
            isinstance(r, LayerRun) for r in self.layers
        ):
            raise ValueError("layers must be a tuple of LayerRun")
        if self.layers:
            listed = sum(r.count for r in self.layers)
            if listed != self.num_hidden_layers:
                raise ValueError(
                    f"layers: {listed} layers listed but num_hidden_layers={self.num_hidden_layers}"
                )
        else:
            self.default_kind  # noqa: B018  (its own invariants)
        context = self.max_position_embeddings
        for run in self.runs:
            att = run.kind.attention
            if context is not None and att.window is not None and att.window > context:
                key = "sliding_window" if att.kind == "sliding" else "attention_chunk_size"
                raise ValueError(
                    f"{key}={att.window} is larger than the context "
                    f"max_position_embeddings={context}"
                )

    # ---- derived shapes -------------------------------------------------------------
    @property
    def parallel_block(self) -> bool:
        """Attention and feed-forward read one norm and add to one residual (Phi,
        Cohere2): one block norm."""
        return self.norms_per_layer == 1

    @property
    def sandwich_norms(self) -> bool:
        """Norms on the branch inputs and on the branch outputs (Gemma 2 and 3): four
        block norms."""
        return self.norms_per_layer == 4

    @property
    def kv_heads(self) -> int:
        """Heads of K and V (equal to the query heads without GQA)."""
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def head_size(self) -> int:
        """Width of one attention head: ``head_dim`` or ``d / h``."""
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def q_dim(self) -> int:
        """Width of the query projection: heads · head width."""
        return self.num_attention_heads * self.head_size

    @property
    def kv_dim(self) -> int:
        """Width of each of the key and value projections."""
        return self.kv_heads * self.head_size

    @property
    def group_size(self) -> int:
        """Query heads per K/V head (1 without GQA)."""
        return self.num_attention_heads // self.kv_heads

    @property
    def ffn_dim(self) -> int:
        """Feed-forward width: ``intermediate_size`` or the seed's 4·d."""
        return self.intermediate_size or 4 * self.hidden_size

    @property
    def is_moe(self) -> bool:
        """Any block routes tokens to experts."""
        return any(r.kind.feed_forward.is_moe for r in self.runs)

    # ---- layer kinds ----------------------------------------------------------------
    # Cached: the spec is frozen, and the estimators ask for its kinds once per moment
    # (``functools.cached_property`` writes the instance ``__dict__``, which a frozen
    # record allows; equality, hashing and ``to_dict`` read the fields only).
    @cached_property
    def default_kind(self) -> LayerKind:
        """The block the flat per-layer fields describe."""
        attention = Attention(
            kind="sliding" if self.sliding_window else "full",
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.kv_heads,
            head_dim=self.head_size,
            qkv_bias=self.qkv_bias,
            o_bias=self.o_bias,
            qk_norm=self.qk_norm,
            window=self.sliding_window,
            rope=self.position_embedding == "rope",
        )
        feed_forward = FeedForward(
            ffn=self.ffn,
            intermediate_size=self.ffn_dim,
            bias=self.mlp_bias,
            num_experts=self.num_local_experts,
            top_k=self.num_experts_per_tok if self.num_local_experts else 0,
        )
        return LayerKind(attention=attention, feed_forward=feed_forward, norms=self.norms_per_layer)

    @cached_property
    def runs(self) -> tuple[LayerRun, ...]:
        """The stack in order: ``layers``, or one run of L default blocks."""
        return self.layers or (LayerRun(self.default_kind, self.num_hidden_layers),)

    @cached_property
    def kinds(self) -> tuple[tuple[LayerKind, int], ...]:
        """Each distinct kind once with how many layers have it (first-seen order): what
        an estimator computes once and multiplies."""
        counts: dict[LayerKind, int] = {}
        for run in self.runs:
            counts[run.kind] = counts.get(run.kind, 0) + run.count
        return tuple(counts.items())

    @property
    def is_heterogeneous(self) -> bool:
        return len(self.kinds) > 1

    def for_kind(self, kind: LayerKind) -> ModelSpec:
        """This spec with every layer of ``kind``: the flat per-layer fields (heads,
        widths, biases, q/k norms, window, feed-forward, experts, norms) describe ``kind``;
        d, V, L, the execution facts and N stay. What one layer of a heterogeneous stack
        keeps and makes is then a question about a homogeneous stack, whose per-layer
        fields are the flat ones. A homogeneous spec is its own; each kind's spec is made
        once (kept in the instance ``__dict__``, as the cached properties are)."""
        if len(self.kinds) == 1:
            return self
        made = self.__dict__.setdefault("_for_kind", {})
        if kind not in made:
            att, ff = kind.attention, kind.feed_forward
            made[kind] = self.replace(
                num_attention_heads=att.num_attention_heads,
                num_key_value_heads=att.num_key_value_heads,
                head_dim=att.head_dim,
                qkv_bias=att.qkv_bias,
                o_bias=att.o_bias,
                qk_norm=att.qk_norm,
                sliding_window=att.window if att.kind == "sliding" else None,
                intermediate_size=ff.intermediate_size,
                ffn=ff.ffn,
                mlp_bias=ff.bias,
                num_local_experts=ff.num_experts,
                num_experts_per_tok=ff.top_k,
                norms_per_layer=kind.norms,
                layers=(LayerRun(kind, self.num_hidden_layers),),
                num_parameters=self.n_params,
            )
        return made[kind]

    @property
    def n_params(self) -> int:
        """N: the exact count when known, else the count the structure implies
        (:func:`introspect.params.parameter_count`)."""
        if self.num_parameters is not None:
            return self.num_parameters
        return parameter_count(self)

    # ---- conveniences ---------------------------------------------------------------
    def replace(self, **changes: Any) -> ModelSpec:
        """A copy with some fields changed (the spec itself never mutates)."""
        return _record.replace(self, **changes)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelSpec:
        """The spec back from :meth:`to_dict` (the derived shapes are dropped)."""
        fields = {k: v for k, v in data.items() if k in _record.field_names(cls)}
        runs = []
        for run in fields.get("layers") or ():
            kind = {k: v for k, v in run.items() if k != "count"}
            shared = kind.get("shared")
            if shared is not None:
                shared = SharedBlock(
                    **shared
                    | {
                        "attention": Attention(**shared["attention"]),
                        "feed_forward": FeedForward(**shared["feed_forward"]),
                    }
                )
            kind = LayerKind(
                attention=Attention(**kind["attention"]),
                feed_forward=FeedForward(**kind["feed_forward"]),
                norms=kind.get("norms", 2),
                shared=shared,
            )
            runs.append(LayerRun(kind, run["count"]))
        fields["layers"] = tuple(runs)
        fields["assumptions"] = tuple(fields.get("assumptions", ()))
        fields["fused_linears"] = tuple(fields.get("fused_linears", ()))
        fields["unmodelled"] = tuple(fields.get("unmodelled", ()))
        if isinstance(fields.get("vision"), dict):
            fields["vision"] = VisionTower(**fields["vision"])
        return cls(**fields)

    def to_dict(self) -> dict[str, Any]:
        """Fields plus the derived shapes, JSON-ready."""
        out = _record.asdict(self)
        out["assumptions"] = list(self.assumptions)
        out["fused_linears"] = list(self.fused_linears)
        out["unmodelled"] = list(self.unmodelled)
        out["layers"] = [{"count": r.count, **_record.asdict(r.kind)} for r in self.layers]
        out.update(
            head_size=self.head_size,
            q_dim=self.q_dim,
            kv_dim=self.kv_dim,
            group_size=self.group_size,
            ffn_dim=self.ffn_dim,
        )
        return out


def standard_spec(
    *,
    num_hidden_layers: int,
    hidden_size: int,
    num_attention_heads: int,
    vocab_size: int,
    num_parameters: int | None = None,
    source: str = "",
) -> ModelSpec:
    """The seed's simplified transformer of the given shape. Its N is the seed's
    ``2·V·d + 12·L·d²`` unless ``num_parameters`` says otherwise (the worked example
    gives N = 7e9 by hand)."""
    if num_parameters is None:
        _require_positive("hidden_size", hidden_size)
        num_parameters = standard_parameters(
            num_hidden_layers=num_hidden_layers, hidden_size=hidden_size, vocab_size=vocab_size
        )
        source = source or "standard transformer, N = 2·V·d + 12·L·d²"
    return ModelSpec(
        hidden_size=hidden_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        vocab_size=vocab_size,
        num_parameters=num_parameters,
        model_type="standard",
        source=source or "standard transformer, N given",
    )


def _require_positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")


def _require_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}; got {value!r}")
