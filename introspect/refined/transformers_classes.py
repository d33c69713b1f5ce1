"""transformers' own classes as the saved-set code reads them: one row of facts per
``model_type``, the data :mod:`introspect.refined.hf_saved` and
:mod:`introspect.refined.execution` branch on instead of family names.

Each fact is a line of the class's source (transformers 5.x), named beside its field.
A family whose class keeps what Llama's keeps needs no row; a new family's quirks are a
row here (and a fixture in ``tests/small_configs.py``), not a branch in the estimators.
Architecture facts every implementation shares — fused projections, biases, norm kind,
a parallel block and sandwich norms (the block's norm count), soft-capping, windows —
live in :class:`introspect.spec.ModelSpec` and its layer kinds.
"""

from __future__ import annotations

from introspect._record import record
from introspect.spec import ModelSpec


@record(kw_only=True)
class ClassFacts:
    """What one family's transformers class does differently from Llama's."""

    #: ``nn.functional.softmax`` in the input's dtype, not ``dtype=torch.float32``
    #: (GPT-2's ``eager_attention_forward``, ``models/gpt2/modeling_gpt2.py``).
    softmax_in_input_dtype: bool = False
    #: The rotary ``torch.cat``s the rotated and the passed parts of Q and K whatever the
    #: rotary fraction (``models/phi3/modeling_phi3.py`` ``apply_rotary_pos_emb``:
    #: ``torch.cat([(q_rot * cos) + (rotate_half(q_rot) * sin), q_pass], dim=-1)``), so
    #: Q comes out head-major even at ``partial_rotary_factor`` 1.
    rotary_cat: bool = False
    #: RMSNorm multiplies by its weight in FP32, so ``x·rstd`` is kept in FP32: Gemma's
    #: (2's, 3's) ``output * (1.0 + self.weight.float())``, OLMo2's ``(self.weight *
    #: hidden_states).to(input_dtype)``.
    fp32_normalized: bool = False
    #: The blocks norm the branch outputs instead of the branch inputs (OLMo2:
    #: ``residual + post_attention_layernorm(attn)``, ``residual +
    #: post_feedforward_layernorm(mlp)``): the projections read the residual stream.
    post_norm: bool = False
    #: The rotary tables stay FP32 (OLMo2's ``rotary_emb`` returns ``cos, sin`` uncast;
    #: Llama's casts them to the activations' dtype).
    rope_tables_fp32: bool = False
    #: A LayerNorm written out in FP32 (``Cohere2LayerNorm``, ``models/cohere2/
    #: modeling_cohere2.py``: ``hidden_states.to(torch.float32)``, ``mean``,
    #: ``(hidden_states - mean).pow(2).mean``, ``(hidden_states - mean) *
    #: torch.rsqrt(...)``, ``self.weight.to(torch.float32) * hidden_states``, cast back):
    #: the two ``x - mean`` (each written anew), the rstd and the normalized value are kept
    #: in FP32, and not its input (``mean`` and ``-`` save nothing).
    layernorm_by_hand: bool = False
    #: SwiGLU's activation and product evaluated in FP32 and cast back (Beam's
    #: ``(self.act_fn(gate.float()) * up.float()).to(gate.dtype)``, ``models/beam/
    #: modeling_beam.py`` ``BeamMLP.forward`` and ``BeamExperts._apply_gate``): the FP32
    #: copies of gate and up and the FP32 activation are kept; the 16-bit projection
    #: outputs are not (``.float()`` saves nothing), the product at the activations' dtype.
    swiglu_fp32: bool = False
    #: A learned per-head sink applied after attention as an LSE scale (Granite-SWA's
    #: ``eager_attention_forward``, ``models/granite_swa/modeling_granite_swa.py`` l.
    #: 105-117: ``lse = torch.logsumexp(attn_weights, dim=-1)``, ``sink_scale = (lse -
    #: sinks).to(torch.float32).sigmoid()``, ``attn_output * sink_scale.unsqueeze(-1)
    #: .to(attn_output.dtype)``): logsumexp keeps the masked scores and its output, the
    #: sigmoid its FP32 output, the product the probabilities·V output and the cast scale.
    lse_sink_scale: bool = False
    #: B·T·f tensors the feed-forward activation's own backward holds beyond F.gelu's
    #: (its input's gradient beside the output's): BLOOM's ``GeLUFunction`` runs
    #: ``bloom_gelu_back`` (``models/bloom/modeling_bloom.py`` l. 124-139), whose
    #: ``ff = 0.5 * x * ((1 - tanh_out * tanh_out) * (0.79788456 + 0.1070322243 * x * x))
    #: + …`` holds ``tanh_out``, ``0.5 * x``, ``1 - tanh²``, ``0.107·x`` and ``·x`` (then
    #: their sum, their product) at once: five beside the incoming gradient, where
    #: F.gelu's backward makes one — four more (a CPU step under the live tracker: the
    #: peak rises 5·B·T·f inside that backward).
    activation_backward_extra: int = 0


LLAMA = ClassFacts()
_GEMMA2 = ClassFacts(fp32_normalized=True)

#: The families whose class differs from Llama's, by ``model_type``.
CLASSES: dict[str, ClassFacts] = {
    "gpt2": ClassFacts(softmax_in_input_dtype=True),
    "phi3": ClassFacts(rotary_cat=True),
    "gemma": ClassFacts(fp32_normalized=True),
    "gemma2": _GEMMA2,
    "gemma3_text": _GEMMA2,
    "olmo2": ClassFacts(fp32_normalized=True, post_norm=True, rope_tables_fp32=True),
    # Cohere2's parallel block (``residual + hidden_states_attention +
    # hidden_states_mlp``) is the spec's (ModelSpec.parallel_block). Its other quirks
    # need no fact: ``logits * self.logit_scale`` (a multiply by a number saves nothing;
    # the unscaled logits are freed), the interleaved rotary (``rotate_half`` by
    # ``stack``/``flatten`` saves nothing; ``q.float()`` times the 16-bit tables saves
    # only the tables) and NoPE on the full-attention layers (Q and K are the
    # projections' views, the sizes the rotary's outputs have).
    "cohere2": ClassFacts(layernorm_by_hand=True),
    # Cohere's (v1) CohereLayerNorm is the same hand-written FP32 LayerNorm
    # (models/cohere/modeling_cohere.py l. 58-65), its block Cohere2's parallel one.
    "cohere": ClassFacts(layernorm_by_hand=True),
    "beam": ClassFacts(swiglu_fp32=True),
    "granite_swa": ClassFacts(lse_sink_scale=True),
    "bloom": ClassFacts(activation_backward_extra=4),
    # NemotronHRMSNorm multiplies x·rstd by ``weight.to(torch.float32)`` and casts only the
    # product back (models/nemotron_h/modeling_nemotron_h.py l. 626).
    "nemotron_h": ClassFacts(fp32_normalized=True),
    # OlmoHybridRMSNorm: ``(self.weight * hidden_states).to(input_dtype)``, the product in
    # FP32 (models/olmo_hybrid/modeling_olmo_hybrid.py l. 79). Its attention layers norm
    # the branch outputs (OLMo2's placement) but its linear layers the inputs: the stack
    # goes through the reference layers (implementations.TransformersAroundReference),
    # which count a layer's two norms wherever they sit.
    "olmo_hybrid": ClassFacts(fp32_normalized=True),
}

#: model_types that run another's class (as mlx-lm keys its models): Gemma 3's wrapper
#: runs Gemma3TextModel's blocks.
ALIASES: dict[str, str] = {"gemma3": "gemma3_text"}


def facts(spec: ModelSpec) -> ClassFacts:
    """The row for ``spec``'s class; Llama's where the family has none."""
    model_type = ALIASES.get(spec.model_type, spec.model_type)
    return CLASSES.get(model_type, LLAMA)
