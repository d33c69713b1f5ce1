"""The implementation that runs the step, chosen once: one interface, one class each.

The timeline (:mod:`introspect.refined.execution`) and the saved set
(:mod:`introspect.refined.saved`) ask the implementation what differs between them; the
implementation answers from its own module:

* :class:`Reference` — our reference model (``introspect/measure/torch_model.py``):
  :mod:`introspect.refined.reference`.
* :class:`Transformers` — transformers' own classes: :mod:`introspect.refined.hf_saved`
  (per-family facts as data in :mod:`~introspect.refined.transformers_classes`).
* :class:`TransformersAroundReference` — transformers' classes on a stack with a layer
  kind hf_saved does not model (sinks, an output gate, MLA, linear attention, a clamped
  or non-softmax router): transformers' model around the layers (embedding, final norm,
  loss, logits' dtype) and the reference model's layers, plus autocast's weight copies
  and FP32 residual stream where the setup runs under autocast.

The pieces every implementation shares stay in modules of their own: the feed-forward
(:mod:`~introspect.refined.saved_feed_forward`), Gated DeltaNet
(:mod:`~introspect.refined.deltanet`), the residual stream's dtype
(:mod:`~introspect.refined.stream`).

The interface, by what it decides (every method takes the model and the setup):

* around the layers — :meth:`~Reference.embedding`, :meth:`~Reference.final`,
  :meth:`~Reference.logits_saved`, :meth:`~Reference.checkpointed_layer` (the saved
  set), :meth:`~Reference.loss_bytes` (the standard loss's gradients),
  :meth:`~Reference.logits_grad_bytes` (the logits' gradient at lm_head), and
  :attr:`~Reference.loss_in_forward` (whether the loss runs inside the model's forward:
  a moment of its own);
* one layer kind — :meth:`~Reference.per_layer` (its saved set),
  :meth:`~Reference.keeps_t2` (whether the T×T probabilities are kept),
  :meth:`~Reference.probs_bytes`, :meth:`~Reference.attention_stream` (what its
  attention backward holds beside the kernel's gradients),
  :meth:`~Reference.at_attention_backward` (what of the layer is still alive then) and
  :meth:`~Reference.recomputed_extra` (what a checkpointed layer's recomputation adds).

:func:`implementation_of` chooses: transformers' classes on torch are
:class:`Transformers` where hf_saved models every layer kind of ``spec``
(:func:`_hf_kinds`), else :class:`TransformersAroundReference`; everything else
(``implementation="reference"``, MLX) is :class:`Reference`. The choice depends on the
``spec`` asked with: for a heterogeneous stack the timeline asks of each kind alone
(:meth:`ModelSpec.for_kind`), the saved set of the whole stack.

MLX (``framework="mlx"``) keeps :class:`Reference`'s saved set with MLX's own exceptions
(:func:`introspect.refined.reference.is_mlx`); mlx-lm's step is not this timeline: its
moments are :mod:`introspect.refined.mlx`'s (what its one lazy graph holds), used
wherever :func:`introspect.refined.mlx.applies`.
"""

from __future__ import annotations

import functools

from introspect.layers import LayerKind
from introspect.refined import hf_saved, reference
from introspect.refined.stream import is_amp, residual_bytes
from introspect.refined.transformers_classes import facts
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

FP32 = 4


class Reference:
    """Our reference model (:mod:`introspect.refined.reference`)."""

    #: The loss runs in the training loop, after the model's forward (no moment of its own).
    loss_in_forward = False

    # Around the layers.
    def embedding(self, spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
        return reference.embedding(spec, setup)

    def final(self, spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
        return reference.final(spec, setup)

    def logits_saved(self, spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
        return reference.logits_saved(spec, setup)

    def checkpointed_layer(self, spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
        return reference.checkpointed_layer(spec, setup)

    def loss_bytes(self, setup: TrainingSetup) -> int:
        """Bytes per value of the standard loss's two B·T·V gradients (of the
        log-probabilities and of the logits): FP32."""
        return FP32

    def logits_grad_bytes(self, setup: TrainingSetup) -> int:
        """Bytes per value of the logits' gradient at lm_head's backward: FP32."""
        return FP32

    # One layer kind.
    def per_layer(self, spec: ModelSpec, setup: TrainingSetup, kind: LayerKind) -> dict[str, int]:
        return reference.per_layer(spec, setup, kind)

    def keeps_t2(self, spec: ModelSpec, setup: TrainingSetup) -> bool:
        return reference.keeps_t2_for(spec, setup)

    def probs_bytes(self, spec: ModelSpec, setup: TrainingSetup) -> int:
        """Bytes per value of the two T×T gradients of the softmax backward: FP32."""
        return FP32

    def attention_stream(self, spec: ModelSpec, setup: TrainingSetup) -> int:
        """Bytes beside the attention backward's own gradients: the residual stream's
        gradient and grad-of-V, two B·T·d tensors."""
        return 2 * setup.batch_size * setup.seq_len * spec.hidden_size * setup.activation_bytes

    def at_attention_backward(
        self, spec: ModelSpec, setup: TrainingSetup, full: dict[str, int], side: dict[str, int]
    ) -> dict[str, int]:
        """The layer's terms alive at its attention backward, from its attention-side
        terms ``side`` (updated in place and returned): plus the first norm's share of
        the norm terms of ``full`` (half of each when the block has two norms)."""
        n = spec.norms_per_layer or 1
        for name in ("layernorm", "layernorm/statistics", "layernorm/normalized"):
            if name in full:
                side[name] = full[name] // n
        return side

    def recomputed_extra(self, spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
        """What a checkpointed layer's recomputation keeps beyond its saved set: nothing."""
        return {}


class Transformers:
    """transformers' own classes (:mod:`introspect.refined.hf_saved`)."""

    #: ``ForCausalLMLoss`` runs inside the model's forward (``loop="labels"``) or on the
    #: loop's logits: its upcast and log-softmax are a moment (``forward``) of their own.
    loss_in_forward = True

    # Around the layers.
    def embedding(self, spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
        return hf_saved.embedding(spec, setup)

    def final(self, spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
        return hf_saved.final(spec, setup)

    def logits_saved(self, spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
        return hf_saved.logits_saved(spec, setup)

    def checkpointed_layer(self, spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
        return hf_saved.checkpointed_layer(spec, setup)

    def loss_bytes(self, setup: TrainingSetup) -> int:
        return hf_saved.loss_bytes(setup)

    def logits_grad_bytes(self, setup: TrainingSetup) -> int:
        """The logits' own dtype: the FP32 gradient of ``.float()`` is cast back before
        lm_head sees it."""
        return setup.activation_bytes

    # One layer kind.
    def per_layer(self, spec: ModelSpec, setup: TrainingSetup, kind: LayerKind) -> dict[str, int]:
        out = hf_saved.per_layer(spec.for_kind(kind), setup)
        explicit = hf_saved.short_window(kind, setup) or spec.sdpa_mask_every_layer
        if explicit and setup.attention != "eager":
            # SDPA gets this layer's window (or, ModelSpec.sdpa_mask_every_layer, its
            # type's mask whatever the window) as an explicit mask, made additive in the
            # query's dtype inside each call and kept (``convert_boolean_attn_mask``).
            out["attention/mask"] = setup.batch_size * setup.seq_len**2 * setup.activation_bytes
        if kind.mixer is not None:
            # Falcon-H1's Mamba-2 mixer beside the attention, on the same norm output
            # (introspect.refined.falcon_h1); its terms are attention side.
            from introspect.refined import falcon_h1

            for name, value in falcon_h1.mixer_saved(kind.mixer, setup, spec.hidden_size).items():
                out[name] = out.get(name, 0) + value
        return out

    def keeps_t2(self, spec: ModelSpec, setup: TrainingSetup) -> bool:
        """transformers' SDPA falls back to the math kernel under dropout on CPU
        (:func:`introspect.refined.hf_saved.keeps_t2`)."""
        return hf_saved.keeps_t2(spec, setup)

    def probs_bytes(self, spec: ModelSpec, setup: TrainingSetup) -> int:
        return hf_saved.probs_bytes(spec, setup)

    def attention_stream(self, spec: ModelSpec, setup: TrainingSetup) -> int:
        """The residual stream's gradient at the stream's dtype (FP32 under autocast) and
        V's gradient at the width the kernel saw V (repeated under eager GQA: q-wide even
        where the repeat is a view, one K/V head)."""
        B, T, s = setup.batch_size, setup.seq_len, setup.activation_bytes
        r = residual_bytes(setup)
        v = spec.q_dim if hf_saved.kv_repeated(spec, setup) else spec.kv_dim
        stream = B * T * (spec.hidden_size * r + v * s)
        if spec.parallel_block:
            # The feed-forward's gradient of the shared norm output waits in the engine's
            # input buffer for the attention's (Phi's parallel block).
            stream += B * T * spec.hidden_size * s
        return stream

    def at_attention_backward(
        self, spec: ModelSpec, setup: TrainingSetup, full: dict[str, int], side: dict[str, int]
    ) -> dict[str, int]:
        """The attention-side terms ``side`` (updated in place) plus the first norm's
        (:func:`hf_saved.attention_norm`); SDPA's backward reads its own output, which is
        the context o_proj kept; eager's softmax backward runs after probs·V's (and the
        dropout's) backward, which freed what each of them alone saved."""
        side.update(hf_saved.attention_norm(spec, setup))
        if not self.keeps_t2(spec, setup):
            side["attention/linear/context"] = full["attention/linear/context"]
        else:
            # probs·V's backward (and the dropout's) have run before the softmax backward
            # makes its two T×T gradients: V, the 16-bit copy or the dropped probabilities
            # and the mask, each saved by one of them alone, are freed.
            for name in (
                "attention/quadratic/probs_cast",
                "attention/quadratic/dropped",  # read by probs·V's backward
                "attention/quadratic/dropout_mask",  # read by the dropout's backward
                "attention/linear/v",
            ):
                side.pop(name, None)
        return side

    def recomputed_extra(self, spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
        return hf_saved.recomputed_extra(spec, setup)


class TransformersAroundReference(Transformers):
    """transformers' classes around layers hf_saved does not model: :class:`Transformers`
    around the layers, :class:`Reference` for each layer kind, plus what autocast adds
    to a transformers block."""

    keeps_t2 = Reference.keeps_t2
    probs_bytes = Reference.probs_bytes
    recomputed_extra = Reference.recomputed_extra

    def attention_stream(self, spec: ModelSpec, setup: TrainingSetup) -> int:
        """:meth:`Reference.attention_stream`; in an MLA layer (``spec`` one kind's) whose
        T×T probabilities are kept, the residual stream's gradient (at the stream's
        dtype, :func:`residual_bytes`) and V's gradient at V's own width ``h·v_head_dim``
        — what probs·V's ``bmm`` backward made (``eager_attention_forward``,
        ``models/deepseek_v3/modeling_deepseek_v3.py`` l. 256; CPU SDPA's math
        composition, :func:`reference.math_sdpa`, makes it in FP32:
        :func:`reference.math_sdpa_bytes`). Measured (a DeepSeek-V3 MLA stack, d=64, h=4,
        v_head_dim=24, L=2, B=2, dry run, at the softmax backward's peak): beside the two
        T×T gradients one ``bmm`` (B·h, T, 24) and one ``add`` (B, T, 64), FP32 eager
        T=256 and bf16 SDPA T=512 alike (the latter's ``bmm`` FP32)."""
        kind = spec.kinds[0][0]
        att = kind.attention
        if att.kind != "mla" or not self.keeps_t2(spec, setup):
            return Reference.attention_stream(self, spec, setup)
        BT = setup.batch_size * setup.seq_len
        v = BT * att.v_dim * reference.math_sdpa_bytes(setup, kind)
        return BT * spec.hidden_size * residual_bytes(setup) + v

    def at_attention_backward(
        self, spec: ModelSpec, setup: TrainingSetup, full: dict[str, int], side: dict[str, int]
    ) -> dict[str, int]:
        """:meth:`Reference.at_attention_backward`; in an MLA layer (``spec`` is one kind's,
        :meth:`ModelSpec.for_kind`) with the T×T probabilities kept, the 16-bit copy of
        them that probs·V's matmul alone saved is freed by that matmul's backward, which
        runs before the softmax backward makes its two T×T gradients: DeepSeek-V3's
        ``eager_attention_forward`` (``softmax(..., dtype=torch.float32).to(query.dtype)``,
        dropout, ``matmul(attn_weights, value_states)``, ``models/deepseek_v3/
        modeling_deepseek_v3.py``) is Llama's, whose moment :meth:`Transformers.
        at_attention_backward` frees the same. Measured (a DeepSeek-V3 MLA stack, d=64,
        h=4, L=2, B=2, autocast with checkpointing, dry run): T=256 1.101 -> 0.999, T=512
        -> 1.000. Other kinds on this path (the hybrids' full-attention layers, sinks) are
        left as they were: not measured here."""
        side = Reference.at_attention_backward(self, spec, setup, full, side)
        if spec.kinds[0][0].attention.kind == "mla" and self.keeps_t2(spec, setup):
            side.pop("attention/quadratic/probs_cast", None)
            # V: the contiguous copy of kv_b's slice that probs·V's matmul alone saved
            # (reference._attention's MLA bullet) is freed by the same backward. Measured
            # (same stack, FP32 eager T=256): one layer's (B, h, T, v) clone alive at the
            # last layer's softmax backward, not two (1.022 with it counted).
            side.pop("attention/linear/v", None)
        return side

    def per_layer(self, spec: ModelSpec, setup: TrainingSetup, kind: LayerKind) -> dict[str, int]:
        """The reference model's layer (:func:`reference.per_layer`); under autocast,
        plus the BF16 weight copies (:func:`reference.autocast_weight_bytes`), and the
        residual stream's terms at FP32; with a 16-bit stream, the norms' inputs at
        their FP32 copies."""
        out = reference.per_layer(spec, setup, kind)
        if kind.attention.kind == "mla":
            # transformers' model computes cos and sin once (``DeepseekV3RotaryEmbedding``,
            # ``models/deepseek_v3/modeling_deepseek_v3.py`` l. 98-101, called at l. 620)
            # and hands the same tables to every layer; the rotary multiplies save views
            # of them (``apply_rotary_pos_emb_interleave`` l. 338: a slice). They are the
            # model's ``activations/positions`` (hf_saved.embedding), not a layer's: the
            # dry run's live set holds two (1, T, qk_rope_head_dim) tables for L = 2.
            out.pop("attention/rope", None)
        if is_amp(setup):
            s = setup.activation_bytes
            out["autocast_weights"] = reference.autocast_weight_bytes(spec, kind)
            # The residual stream stays FP32 under autocast (FP32 embedding, and each
            # branch's output added to it), and the norms' x·rstd is FP32: what the next
            # layer's norm and this layer's mid-block norm keep of it is FP32
            # (hf_saved.residual_bytes).
            r = residual_bytes(setup)
            for name in ("attention/linear/out", "feed_forward/down", "layernorm/normalized"):
                if name in out:
                    out[name] = out[name] // s * r
        elif hf_saved.norm_input_bytes(spec, setup) > setup.activation_bytes:
            # A 16-bit stream read by transformers' RMSNorms: each keeps the FP32 copy
            # of its input (``hidden_states.to(torch.float32)``, saved by ``pow`` and the
            # rstd multiply), not the stream (hf_saved.norm_input_bytes).
            s, kept = setup.activation_bytes, hf_saved.norm_input_bytes(spec, setup)
            for name in ("attention/linear/out", "feed_forward/down"):
                if name in out:
                    out[name] = out[name] // s * kept
            if facts(spec).fp32_normalized and "layernorm/normalized" in out:
                # x·rstd multiplied by the FP32 weight before the cast back (NemotronH).
                out["layernorm/normalized"] = out["layernorm/normalized"] // s * FP32
        return out


REFERENCE = Reference()
TRANSFORMERS = Transformers()
TRANSFORMERS_AROUND_REFERENCE = TransformersAroundReference()


def implementation_of(
    spec: ModelSpec, setup: TrainingSetup
) -> Reference | Transformers | TransformersAroundReference:
    """The implementation that runs ``setup``'s step for ``spec``: transformers' classes
    on torch (:class:`Transformers`, or :class:`TransformersAroundReference` where
    hf_saved does not model every layer kind of ``spec``: :func:`_hf_kinds`), else our
    reference model (:class:`Reference`; MLX included, see the module docstring)."""
    if not (setup.implementation == "transformers" and setup.framework == "torch"):
        return REFERENCE
    if _hf_kinds(spec.kinds):
        return TRANSFORMERS
    return TRANSFORMERS_AROUND_REFERENCE


def resolve_attention(spec: ModelSpec, setup: TrainingSetup) -> TrainingSetup:
    """``setup`` with the attention its implementation runs when ``--attention`` was left
    out (``setup.attention is None``), and where that came from
    (``TrainingSetup.attention_origin``); a given attention is kept. Our reference model
    and mlx-lm are fixed by :func:`introspect.setup.default_attention`; transformers'
    class picks SDPA unless it has no SDPA path
    (:func:`introspect.adapters.hf_transformers.default_attention`, from
    ``PreTrainedModel.get_correct_attn_implementation``). SDPA is
    ``attention="memory_efficient"``: on CUDA torch's flash or efficient kernel, on CPU its
    flash kernel, either keeping a log-sum-exp per row instead of the T×T probabilities
    (:func:`introspect.refined.hf_saved.keeps_t2`; the math fallback under attention
    dropout on CPU is modelled there)."""
    if setup.attention is not None:
        return setup
    from introspect.adapters import hf_transformers as hft

    attention, name = hft.default_attention(spec.model_type)
    word = "sdpa" if attention == "memory_efficient" else "eager"
    origin = f"{word}: transformers' default for {name}"
    if attention == "eager":
        origin += ", which has no SDPA path"
    return setup.replace(attention=attention, attention_origin=origin)


@functools.lru_cache(maxsize=64)
def _hf_kinds(kinds: tuple) -> bool:
    """Every kind is one :mod:`~introspect.refined.hf_saved` models (a heterogeneous
    stack layer by layer, each kind through :meth:`ModelSpec.for_kind`): full, sliding or
    chunked attention without sinks or an output gate, any q/k norm, a dense or
    mixture-of-experts feed-forward (:func:`_plain_routing`). Cached: a pure function of
    the (frozen) kinds, asked on every saved-set question."""
    for kind, _ in kinds:
        att, ff = kind.attention, kind.feed_forward
        if att.kind not in ("full", "sliding", "chunked") or att.sinks or att.output_gate:
            return False
        if ff.num_experts and not _plain_routing(ff):
            return False
    return True


def _plain_routing(ff) -> bool:
    """A mixture-of-experts feed-forward :mod:`~introspect.refined.hf_saved` models with
    its attention side: a softmax router over every expert, with or without shared
    experts, or Llama 4's every expert on every token; no clamped GLU (Mixtral,
    Qwen3-MoE, OLMoE, Qwen2-MoE, Llama 4; the others keep the reference set)."""
    return (ff.router == "softmax" or ff.all_experts) and not ff.clamped_glu
