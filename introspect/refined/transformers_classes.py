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
    #: The softmax's output goes on as it is, not cast to the query's or V's dtype
    #: (BioGPT's ``eager_attention_forward``, ``models/biogpt/modeling_biogpt.py`` l.
    #: 112-115: ``softmax(attn_weights, dim=-1)``, then the dropout and ``matmul(attn_weights,
    #: value)``): under autocast (softmax on its FP32 list) the dropout reads and makes
    #: FP32 T×T tensors, and only probs·V's matmul casts them to 16 bits.
    softmax_uncast: bool = False
    #: The model turns the causal mask into a boolean one before its blocks read it
    #: (MPT: ``create_causal_mask(...).to(torch.bool)``, ``models/mpt/modeling_mpt.py``
    #: l. 322-327; the blocks' ``masked_fill(attention_mask, finfo.min)``, l. 125-126):
    #: the (B, 1, T, T) mask checkpointing keeps is one byte a value, the additive one freed.
    bool_causal_mask: bool = False
    #: The block returns the attention's probabilities to the model's loop, which keeps
    #: them bound (``outputs = block(...)``; ``hidden_states = outputs[0]``) through the
    #: next block's forward, and the attention keeps its raw scores bound through the
    #: softmax (Falcon: ``attention_scores = query_layer @ key_layer.transpose(-1, -2)``
    #: rebound only to the softmax's output, ``return output, attn_weights``,
    #: ``models/falcon/modeling_falcon.py`` l. 349-362, 588, 623, 789-800; BLOOM:
    #: ``attention_scores = alibi.baddbmm(...)`` bound to the end, ``softmax(...,
    #: dtype=torch.float32).to(query_layer.dtype)``, ``return output, attn_weights``,
    #: ``models/bloom/modeling_bloom.py`` l. 271-311, 382, 403, 528-537):
    #: :func:`introspect.refined.execution.checkpointed_softmax_forward`.
    returns_attention_probs: bool = False
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
    #: A LayerNorm run on an FP32 copy of its input and cast back (``OlmoLayerNorm``:
    #: ``F.layer_norm(hidden_states.to(dtype=torch.float32), self.normalized_shape, None,
    #: None, eps=1e-5).to(orig_dtype)``, ``models/olmo/modeling_olmo.py`` l. 49-60): with a
    #: 16-bit stream ``native_layer_norm`` keeps the FP32 copy (not the stream) beside its
    #: mean and rstd, as RMSNorm's ``.to(torch.float32)`` does.
    layernorm_fp32_input: bool = False
    #: Eager attention clamps the masked scores from below (XGLM's ``attn_weights =
    #: torch.max(attn_weights + attention_mask, torch.full((), torch.finfo(...).min))``,
    #: ``models/xglm/modeling_xglm.py`` l. 206-214): ``maximum``'s backward keeps both
    #: inputs, so the masked scores (B·h·T², FP32 under autocast where the FP32 mask
    #: promotes the sum) stay saved beside the softmax output.
    scores_clamped: bool = False
    #: ALiBi biases the scores instead of rotating Q and K, so Q, K and V all stay views of
    #: the fused projection's output (BLOOM's ``self._reshape(fused_qkv)``,
    #: ``models/bloom/modeling_bloom.py`` l. 201-260; MPT's ``mixed_qkv.chunk(3, dim=2)``,
    #: ``models/mpt/modeling_mpt.py`` l. 98-102): nothing beyond the q, k, v terms (the
    #: walked spec cannot tell ALiBi from rotary positions; see ``hf_saved._fused_qkv_kept``).
    alibi: bool = False
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
    #: The MoE router scores an FP32 copy of its input, which ``F.linear`` keeps for the
    #: weight's gradient: GLM-4-MoE's and Solar Open's ``F.linear(hidden_states.type(
    #: torch.float32), self.weight.type(torch.float32))`` (``Glm4MoeTopkRouter.forward``,
    #: ``models/glm4_moe/modeling_glm4_moe.py`` l. 282-284; ``models/solar_open/
    #: modeling_solar_open.py`` l. 116-118), ERNIE 4.5 MoE's ``F.linear(hidden_states.
    #: float(), self.weight.float())`` with autocast off (``models/ernie4_5_moe/
    #: modeling_ernie4_5_moe.py`` l. 348-349); the weight stays FP32
    #: (``_keep_in_fp32_modules_strict = [..., "gate.weight"]``), so its cast is itself.
    #: DeepSeek's family reader states the same on the layer kind
    #: (``FeedForward.router_fp32_input``).
    router_fp32_input: bool = False
    #: With :attr:`router_fp32_input`, the router's weight is not kept FP32 in a 16-bit
    #: build, so ``self.weight.type(torch.float32)`` is a new E·d FP32 tensor the linear
    #: keeps too: Kolibri1's ``_keep_in_fp32_modules_strict`` names only
    #: ``e_score_correction_bias`` (``models/kolibri1/modeling_kolibri1.py`` l. 289, 382).
    router_weight_cast: bool = False
    #: The model's final norm also runs on the embedding output before layer 0 — one
    #: module called twice, which no walk of the module tree sees (NanoChat's
    #: ``hidden_states = self.norm(hidden_states)  # Additional norm before the layers``,
    #: ``models/nanochat/modeling_nanochat.py`` l. 394): the saved set of
    #: ``ModelSpec.embedding_norm``.
    norm_before_layers: bool = False
    #: B·h·T² FP32 tensors the class's eager attention holds in its forward beside the
    #: layer's saved T×T set, at its largest moment — where that exceeds what Llama's
    #: ``eager_attention_forward`` holds (the masked scores, freed as the softmax's
    #: output is bound) the step's peak can be the top layer's forward, not a backward
    #: (:func:`~introspect.refined.execution.attention_forward`): GPT-NeoX-Japanese's
    #: ``torch.zeros`` that ``baddbmm`` adds to and the masked scores, both bound to
    #: ``_attn``'s end; Flint's masked scores and their ``torch.cat`` with the sinks, alive
    #: at the softmax.
    attention_forward_inflight: int = 0
    #: A separate ``gate_proj`` (d → q_dim) whose sigmoid multiplies the attention output
    #: before o_proj (AFMoE: ``output = output * torch.sigmoid(gate_states)``,
    #: ``models/afmoe/modeling_afmoe.py`` l. 336, 354, 384): the sigmoid's output (kept
    #: by its backward and by the multiply) and the gated context (kept by o_proj), beside
    #: the attention output the multiply keeps (``attention/linear/context``).
    output_gate_proj: bool = False
    #: The final logit soft-capping runs on an FP32 copy of the logits (Beam's
    #: ``logits.float() / cap``, ``tanh``, ``* cap``, ``models/beam/modeling_beam.py``
    #: l. 637-641): tanh keeps its FP32 output (Gemma 2's stays in the logits' dtype).
    softcap_fp32: bool = False
    #: The block's two extra norms sit inside the branches, on the attention output before
    #: o_proj (width q_dim) and on the gated product before down_proj (width
    #: intermediate_size), not on the branch outputs (BitNet's ``attn_sub_norm`` and
    #: ``ffn_sub_norm``, ``models/bitnet/modeling_bitnet.py`` l. 177, 216-217, 74-77):
    #: :func:`introspect.refined.hf_saved.sub_norms`.
    sub_norms: bool = False
    #: ``apply_rotary_pos_emb`` repeats the first half of the tables in every layer
    #: (``cos[..., : cos.shape[-1] // 2].repeat_interleave(2, dim=-1)``, and ``sin``):
    #: each layer's multiplies keep its own two (B, 1, T, rotary) copies, and nothing
    #: keeps the shared tables (Helium: ``models/helium/modeling_helium.py`` l. 188-189;
    #: ERNIE 4.5 / 4.5 MoE: ``models/ernie4_5_moe/modeling_ernie4_5_moe.py`` l. 162-163).
    rotary_tables_per_layer: bool = False
    #: RMSNorm's rstd is ``torch.pow(mean_squared, -0.5)``, whose backward keeps its input
    #: (``pow.Tensor_Scalar`` saves ``self``) beside the rstd the ``x·rstd`` multiply
    #: keeps: two FP32 values per normalized row, not rsqrt's one; and ``normed *
    #: self.weight.float()`` keeps a new FP32 copy of each 16-bit weight (Gemma 4's
    #: ``Gemma4UnifiedRMSNorm``, ``models/gemma4_unified/modeling_gemma4_unified.py``
    #: l. 156-173; ``Gemma4RMSNorm``, ``models/gemma4/modeling_gemma4.py`` l. 196-214).
    rstd_by_pow: bool = False
    #: A weightless per-head RMSNorm on V (``self.v_norm = ...RMSNorm(self.head_dim,
    #: with_scale=False)``, ``value_states = self.v_norm(value_states)``: Gemma 4,
    #: ``modeling_gemma4_unified.py`` l. 355, 406): the FP32 copy of the v projection and
    #: its statistics are kept; its output, cast back, is the V attention keeps.
    v_norm: bool = False
    #: The model's ``rotary_emb`` makes one (cos, sin) pair per layer type, each at that
    #: type's head_dim (``position_embeddings[layer_type] = self.rotary_emb(hidden_states,
    #: position_ids, layer_type)``; proportional RoPE returns full head_dim tables:
    #: ``modeling_rope_utils.py`` ``_compute_proportional_rope_parameters``), shared by
    #: that type's layers (Gemma 4, ``modeling_gemma4_unified.py`` l. 177-245, 631;
    #: ModernBERT-decoder's global and local thetas at one head_dim,
    #: ``modeling_modernbert_decoder.py`` l. 140, 485-486).
    rope_tables_per_layer_type: bool = False
    #: The topmost layer of each layer type stores its K and V in the model's
    #: ``shared_kv_states`` dict (``kv_sharing_modes``: "store" for the last non-consumer
    #: layer of each type, even with ``num_kv_shared_layers = 0``,
    #: ``models/gemma4/configuration_gemma4.py`` l. 226-251; ``shared_kv_states[
    #: self.layer_type] = key_states, value_states``, ``models/gemma4/modeling_gemma4.py``
    #: l. 1230-1231, ``models/gemma4_unified/modeling_gemma4_unified.py`` l. 412-413), one
    #: dict every layer's call gets: :func:`introspect.refined.hf_saved.kv_store_outputs`,
    #: :func:`introspect.refined.hf_saved.kv_store_graph`.
    stores_kv_per_type: bool = False


LLAMA = ClassFacts()
_GEMMA2 = ClassFacts(fp32_normalized=True)
#: Gemma 4's RMSNorm multiplies ``x·rstd`` by ``self.weight.float()`` in FP32 and casts
#: the product back (``normed_output.type_as(hidden_states)``): fp32_normalized.
_GEMMA4 = ClassFacts(
    fp32_normalized=True,
    rstd_by_pow=True,
    v_norm=True,
    rope_tables_per_layer_type=True,
    stores_kv_per_type=True,
)

#: The families whose class differs from Llama's, by ``model_type``.
CLASSES: dict[str, ClassFacts] = {
    "gpt2": ClassFacts(softmax_in_input_dtype=True),
    "biogpt": ClassFacts(softmax_uncast=True),
    "mpt": ClassFacts(bool_causal_mask=True, alibi=True),
    "modernbert-decoder": ClassFacts(rope_tables_per_layer_type=True),
    "phi3": ClassFacts(rotary_cat=True),
    "gemma": ClassFacts(fp32_normalized=True),
    # RecurrentGemmaRMSNorm is Gemma's: ``output * (1.0 + self.weight.float())`` in FP32,
    # cast back after (models/recurrent_gemma/modeling_recurrent_gemma.py l. 54-59).
    "recurrent_gemma": ClassFacts(fp32_normalized=True),
    "gemma2": _GEMMA2,
    "gemma3_text": _GEMMA2,
    "gemma4_unified_text": _GEMMA4,
    "gemma4_text": _GEMMA4,
    "olmo2": ClassFacts(fp32_normalized=True, post_norm=True, rope_tables_fp32=True),
    # OLMo (v1): the weightless FP32 LayerNorm, and the rotary's uncast FP32 tables
    # (``OlmoRotaryEmbedding.forward`` returns ``cos, sin``; ``apply_rotary_pos_emb``
    # casts ``q_embed.to(q_type)``): models/olmo/modeling_olmo.py l. 49-60, 116-121, 187-192.
    "olmo": ClassFacts(layernorm_fp32_input=True, rope_tables_fp32=True),
    "xglm": ClassFacts(scores_clamped=True),
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
    # Cohere2-MoE's Cohere2MoeLayerNorm is Cohere2's, line for line
    # (models/cohere2_moe/modeling_cohere2_moe.py l. 68-82), in the same parallel block
    # (l. 392-402).
    "cohere2_moe": ClassFacts(layernorm_by_hand=True),
    "granite_swa": ClassFacts(lse_sink_scale=True),
    # GraniteMoE-SWA's eager_attention_forward is Granite-SWA's, line for line
    # (models/granitemoe_swa/modeling_granitemoe_swa.py l. 171-199).
    "granitemoe_swa": ClassFacts(lse_sink_scale=True),
    "bloom": ClassFacts(activation_backward_extra=4, returns_attention_probs=True, alibi=True),
    "falcon": ClassFacts(returns_attention_probs=True),
    # Beam (models/beam/modeling_beam.py): BeamRMSNorm's ``(self.weight *
    # hidden_states).to(input_dtype)`` (l. 57-62); the attention's gate_proj whose sigmoid
    # multiplies the output (l. 277-278); BeamTopKRouter's ``F.linear(hidden_states.
    # float(), self.weight.float())`` (l. 352; ``mlp.gate.weight`` kept FP32, l. 470).
    "beam": ClassFacts(
        swiglu_fp32=True,
        fp32_normalized=True,
        output_gate_proj=True,
        router_fp32_input=True,
        softcap_fp32=True,
    ),
    # NemotronHRMSNorm multiplies x·rstd by ``weight.to(torch.float32)`` and casts only the
    # product back (models/nemotron_h/modeling_nemotron_h.py l. 626).
    "nemotron_h": ClassFacts(fp32_normalized=True),
    # OlmoHybridRMSNorm: ``(self.weight * hidden_states).to(input_dtype)``, the product in
    # FP32 (models/olmo_hybrid/modeling_olmo_hybrid.py l. 79). Its attention layers norm
    # the branch outputs (OLMo2's placement) but its linear layers the inputs: the stack
    # goes through the reference layers (implementations.TransformersAroundReference),
    # which count a layer's two norms wherever they sit.
    "olmo_hybrid": ClassFacts(fp32_normalized=True),
    # HeliumRMSNorm: ``(self.weight.to(torch.float32) * hidden_states).to(input_dtype)``,
    # x·rstd times the weight in FP32 (models/helium/modeling_helium.py l. 53-58).
    "helium": ClassFacts(fp32_normalized=True, rotary_tables_per_layer=True),
    # AfmoeRMSNorm: ``(self.weight * hidden_states).to(input_dtype)`` (l. 100-105).
    "bitnet": ClassFacts(sub_norms=True),
    "afmoe": ClassFacts(fp32_normalized=True, output_gate_proj=True),
    "glm4_moe": ClassFacts(router_fp32_input=True),
    # NanoChat: its weightless norms are read off the module tree (ModelSpec.norm_weight,
    # qk_norm "l2"); the final norm's second call is not.
    "nanochat": ClassFacts(norm_before_layers=True),
    # GPTNeoXJapaneseAttention._attn: ``attn_scores = torch.zeros(B·h, T, T)`` and the
    # masked ``attention_scores`` stay bound through the softmax, the dropout and
    # probs·V (models/gpt_neox_japanese/modeling_gpt_neox_japanese.py l. 234-268).
    "gpt_neox_japanese": ClassFacts(attention_forward_inflight=2),
    # Flint's eager_attention_forward: the masked scores stay bound while
    # ``F.softmax(torch.cat([attn_weights, sinks], dim=-1))`` runs, beside the cat
    # (models/flint/modeling_flint.py l. 221-228).
    "flint": ClassFacts(attention_forward_inflight=2),
    # Kolibri1TopKRouter: ``F.linear(hidden_states.type(torch.float32), self.weight.type(
    # torch.float32))`` with ``gate.weight`` at the model's dtype (models/kolibri1/
    # modeling_kolibri1.py l. 289, 382); its sandwich norms are Llama's RMSNorm (l. 56-61).
    "kolibri1": ClassFacts(router_fp32_input=True, router_weight_cast=True),
    # HYV3TopKRouter: ``F.linear(hidden_states.float(), self.weight.float())``, the weight
    # FP32 (built so and in ``_keep_in_fp32_modules_strict``: models/hy_v3/modeling_hy_v3.py
    # l. 277, 286, 430).
    "hy_v3": ClassFacts(router_fp32_input=True),
    # EXAONE-MoE's ExaoneMoeTopkRouter is GLM-4-MoE's: ``F.linear(hidden_states.type(
    # torch.float32), self.weight.type(torch.float32))`` (models/exaone_moe/
    # modeling_exaone_moe.py l. 241-243; ``gate.weight`` kept FP32, l. 396).
    "exaone_moe": ClassFacts(router_fp32_input=True),
    # DeepseekV3TopkRouter: ``F.linear(hidden_states.type(torch.float32),
    # self.weight.type(torch.float32))`` (models/deepseek_v3/modeling_deepseek_v3.py
    # l. 135; ``gate.weight`` in ``_keep_in_fp32_modules_strict``, l. 551). The
    # deepseek_v3 reader sets it on its FeedForward; the module-walked types that build
    # this router (below) take it from here.
    "deepseek_v3": ClassFacts(router_fp32_input=True),
    "solar_open": ClassFacts(router_fp32_input=True),
    # ERNIE 4.5's rotary returns its FP32 tables uncast (l. 121-127).
    "ernie4_5_moe": ClassFacts(
        router_fp32_input=True, rotary_tables_per_layer=True, rope_tables_fp32=True
    ),
    # the dense ERNIE 4.5: the same rotary (models/ernie4_5/modeling_ernie4_5.py l. 87, 176-177)
    "ernie4_5": ClassFacts(rotary_tables_per_layer=True, rope_tables_fp32=True),
}

#: model_types that run another's class (as mlx-lm keys its models): Gemma 3's wrapper
#: runs Gemma3TextModel's blocks.
ALIASES: dict[str, str] = {
    "gemma3": "gemma3_text",
    # Gemma 4's image-text wrappers run their text model's blocks.
    "gemma4_unified": "gemma4_unified_text",
    "gemma4": "gemma4_text",
    # Olmo3's blocks are OLMo2's (post-norm, ``(self.weight * hidden_states).to(
    # input_dtype)``, uncast rotary tables: models/olmo3/modeling_olmo3.py l. 45-59, 261-267,
    # 326-331) plus sliding-window layers, which are the spec's layer kinds.
    "olmo3": "olmo2",
    # FlexOlmo's blocks are OLMo2's with a routed feed-forward: post-norms, ``(self.weight
    # * hidden_states).to(input_dtype)``, uncast rotary tables (models/flex_olmo/
    # modeling_flex_olmo.py l. 55-61, 104-109, 370-389).
    "flex_olmo": "olmo2",
    # Sarvam-MoE's config builds Glm4MoeForCausalLM (transformers' causal-LM mapping).
    "sarvam_moe": "glm4_moe",
    # Sarvam-MLA's builds DeepseekV3ForCausalLM (models/auto/modeling_auto.py l. 957);
    # A.X-K1's AXK1TopkRouter is DeepseekV3TopkRouter (models/axk1/modeling_axk1.py
    # l. 134-160, ``_keep_in_fp32_modules_strict`` l. 548); GLM-4.7-Flash's
    # Glm4MoeLiteTopkRouter is Glm4MoeTopkRouter (models/glm4_moe_lite/
    # modeling_glm4_moe_lite.py l. 390, l. 562).
    "sarvam_mla": "deepseek_v3",
    "axk1": "deepseek_v3",
    "glm4_moe_lite": "glm4_moe",
}


def facts(spec: ModelSpec) -> ClassFacts:
    """The row for ``spec``'s class; Llama's where the family has none."""
    model_type = ALIASES.get(spec.model_type, spec.model_type)
    return CLASSES.get(model_type, LLAMA)
