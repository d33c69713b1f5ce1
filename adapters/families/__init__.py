"""The hand-written config readers, one small function per family, keyed by Hugging
Face's ``model_type``. Each takes a :class:`~introspect.adapters.config_reader.Reader`
and returns the :class:`~introspect.spec.ModelSpec` fields that family implies. They are
the fallback when transformers is absent and the exact structure when it is present
(its configuration classes then only supply the defaults)."""

from __future__ import annotations

from collections.abc import Callable

from introspect.adapters.config_reader import Reader

from . import (
    classic,
    deepseek,
    falcon_h1,
    gemma,
    hybrid,
    llama,
    mamba,
    moe,
    recurrent_gemma,
    zamba2,
)

#: model_type → the function that reads that family's config.
REGISTRY: dict[str, Callable[[Reader], dict]] = {
    "llama": llama.llama,
    "mistral": llama.mistral,
    "qwen2": llama.qwen2,
    "qwen3": llama.qwen3,
    "olmo2": llama.olmo2,
    "qwen": classic.qwen,
    "phi": classic.phi,
    "phi3": classic.phi3,
    "gpt2": classic.gpt2,
    "gemma": gemma.gemma,
    "gemma2": gemma.gemma2,
    "gemma3_text": gemma.gemma3_text,
    "gemma3": gemma.gemma3,
    "mixtral": moe.mixtral,
    "qwen2_moe": moe.qwen2_moe,
    "qwen3_moe": moe.qwen3_moe,
    "gpt_oss": moe.gpt_oss,
    "deepseek_v2": deepseek.deepseek_v2,
    "deepseek_v3": deepseek.deepseek_v3,
    "minicpm3": deepseek.minicpm3,
    "llama4_text": deepseek.llama4_text,
    "llama4": deepseek.llama4,
    "qwen3_next": hybrid.qwen3_next,
    "qwen3_5_text": hybrid.qwen3_5_text,
    "qwen3_5_moe_text": hybrid.qwen3_5_moe_text,
    "granitemoehybrid": hybrid.granitemoehybrid,
    "bamba": hybrid.bamba,
    "nemotron_h": hybrid.nemotron_h,
    "olmo_hybrid": hybrid.olmo_hybrid,
    "falcon_h1": falcon_h1.falcon_h1,
    "mamba": mamba.mamba,
    "falcon_mamba": mamba.falcon_mamba,
    "mamba2": mamba.mamba2,
    "jamba": mamba.jamba,
    "zamba2": zamba2.zamba2,
    "recurrent_gemma": recurrent_gemma.recurrent_gemma,
}


#: model_types transformers builds whose blocks no layer kind models, with why, first in
#: the spec's ``unmodelled`` (the module walker's findings follow): read against the
#: layer kinds they come closest to, MLA and Gated DeltaNet's, and left to the dry run.
#: (The module walker reads DeepSeek-V3's MLA itself, ``DeepseekV3Attention`` and its
#: unchanged kin: :meth:`introspect.adapters.module_walk._Reader.mla_attention`; the MLA
#: variants below add parts that kind does not save.)
NOT_MODELLED: dict[str, str] = {
    # modeling_longcat_flash.py: LongcatFlashDecoderLayer, LongcatFlashMoE, LongcatFlashExperts
    "longcat_flash": (
        "LongcatFlashDecoderLayer: two MLA sub-blocks (self_attn is a ModuleList of two "
        "LongcatFlashMLA) and two dense MLPs per layer, plus a shortcut MoE from the first "
        "sub-block whose zero_expert_num identity experts take a routing-dependent share "
        "of the top-k rows (LongcatFlashExperts loops over the experts hit: a "
        "data-dependent nonzero, no grouped matmul)"
    ),
    # modeling_kimi_linear.py: KimiLinearDeltaAttention, chunk_kimi_delta_attention
    "kimi_linear": (
        "KimiLinearDeltaAttention (Kimi Delta Attention): Gated DeltaNet's delta rule with "
        "a per-channel decay (forget_gate f_a/f_b over linear_num_heads x linear_head_dim) "
        "in place of one per head, q/k/v projected apart, an output gate through g_a/g_b; "
        "its torch fallback (chunk_kimi_delta_attention) keeps a chunk x chunk x head_dim "
        "decay mask per chunk where Gated DeltaNet's keeps chunk x chunk, so the linear "
        "layer kind's saved set does not apply (its full_attention layers' "
        "KimiLinearAttention is MLA with no rotary)"
    ),
    # modeling_deepseek_v32.py:147-236 (DeepseekV32Indexer), 404-470 (the attention's
    # forward folding the indexer's top-k into its mask)
    "deepseek_v32": (
        "DeepseekV32Attention: DeepSeek-V3's MLA plus a DeepSeek sparse attention indexer "
        "(indexer.wq_b, wk, k_norm, weights_proj) that scores every query against every "
        "key under no_grad (B x index_n_heads x T x T FP32 scores, relu, weighted sum) and "
        "turns its top index_topk keys into a new B x 1 x T x T attention mask per layer "
        "(scatter, masked_fill): the MLA layer kind has no indexer and one shared mask"
    ),
    # modeling_glm_moe_dsa.py:153-240 (GlmMoeDsaIndexer), 298-440 (GlmMoeDsaAttention)
    "glm_moe_dsa": (
        "GlmMoeDsaAttention: DeepSeek-V3's MLA plus DeepSeek-V3.2's sparse attention "
        "indexer (interleaved RoPE, weights_proj kept in FP32) on its indexer_types 'full' "
        "layers, the 'shared' layers reusing the previous full layer's top-k; each layer "
        "turns the top-k into a new B x 1 x T x T attention mask (scatter, masked_fill): "
        "the MLA layer kind has no indexer and one shared mask"
    ),
    # modular_axk2.py:268-398 (AXK2Attention), 217 (AXK2Indexer = DeepseekV32Indexer)
    "axk2": (
        "AXK2Attention: a gated MLA: q_gate_proj (2 x q_lora_rank -> heads x "
        "(qk_head_dim + v_head_dim)) reads cat(q_a_layernorm's output, q_a_proj's raw "
        "output) in place of q_b_proj, and its gate half's FP32 sigmoid multiplies the "
        "attention output before o_proj; plus DeepSeek-V3.2's sparse attention indexer "
        "and its per-layer B x 1 x T x T top-k mask: the MLA layer kind has neither"
    ),
    # modular_dots3_note.py:478-581 (Dots3NoteTextAttention)
    "dots3_note_text": (
        "Dots3NoteTextAttention: MLA with each normalized latent times a scale "
        "(q_lora_scale, kv_lora_scale), an RMSNorm on the shared rotary key head "
        "(k_rope_only_layernorm), a per-head sigmoid gate g_proj (d -> heads) on the "
        "attention output, per-layer sliding windows, and DeepSeek-V3.2's sparse "
        "attention indexer with its B x 1 x T x T top-k mask on the indexed_attention "
        "layers: the MLA layer kind has none of these"
    ),
    # modeling_bailing_hybrid.py:292-421 (BailingHybridAttention)
    "bailing_hybrid": (
        "BailingHybridAttention (the full layers): MLA with a per-head output gate "
        "(g_proj, d -> heads: sigmoid in FP32, cast back, times the attention output), "
        "which the MLA layer kind has not"
    ),
    # modeling_mimo_v2_flash.py:354-357, 380: v_proj and o_proj at v_head_dim (128 by
    # default, configuration_mimo_v2_flash.py:105), q_proj and k_proj at head_dim (192)
    "mimo_v2_flash": (
        "MiMoV2FlashAttention's values at v_head_dim, not head_dim (v_proj, the context "
        "and o_proj's input at num_heads x v_head_dim, scaled by attention_value_scale): "
        "the attention layer kind gives V the query/key head width"
    ),
    # modeling_hrm_text.py:493-526 (HrmTextModel.forward): an H and an L HrmTextStack of
    # num_layers_per_stack blocks each, run H_cycles x (L_cycles + 1) times per step, the
    # first L_cycles - L_bp_cycles[h] L passes of each H cycle under torch.no_grad()
    "hrm_text": (
        "HrmTextModel's H/L-cycle recurrence: two stacks of num_layers_per_stack blocks, "
        "each block run several times per step (H_cycles x (L_cycles + 1) stack calls, "
        "the first L_cycles - L_bp_cycles[h] L calls of each H cycle under no_grad), so "
        "every block keeps one saved set per call with gradients, not one"
    ),
}


class BuildInstead(Exception):
    """A reader's config holds a part no layer kind models (Nemotron-H's routed-expert
    blocks): read it from transformers' build instead, which names the part
    (``ModelSpec.unmodelled``: the dry run answers).

    ``modelled`` names the block classes the reader does model (Nemotron-H's
    ``NemotronHMamba2Mixer``): the module walker flags every state-space class by name
    (:data:`~introspect.adapters.module_roles.UNMODELLED_CLASS`), knowing nothing of the
    reader, so the build's list drops them and names only what is really not modelled."""

    def __init__(self, message: str, modelled: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.modelled = modelled


#: Other model_types with the same parameters as a registered family (same tensors, same
#: config defaults): Ministral is Mistral with per-layer sliding windows.
ALIASES: dict[str, str] = {
    "ministral": "mistral",
}


def covered() -> str:
    """What the closed form covers, in one clause (:mod:`introspect.unmodelled`'s
    refusals): the hand-written readers and the causal LMs whose blocks are theirs."""
    return (
        "introspect's closed form covers decoder-only transformers (attention and "
        f"feed-forward blocks): the readers {', '.join(sorted({*REGISTRY, *ALIASES}))}, and "
        "transformers' causal LMs whose blocks are those"
    )
