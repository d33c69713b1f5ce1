"""Small model configs in Hugging Face's own ``config.json`` keys, one per family and
variation, written once and shared by the tests and the benchmarks.

Plain dicts and nothing imported, so that a benchmark can import this file as the tests
do (``sys.path.insert(0, "<repo>/tests")``, as ``benchmarks/transformers_terms.py``
already does for ``hf_steps``). Treat them as read-only: copy (``dict(cfg, key=...)``)
before changing a key.

:data:`FAMILIES` — d = 256, 2–6 layers, 8 heads, f = 640, V = 1000 (:func:`small`): each
family's variation that transformers' config classes allow (shared experts, mixed MoE
and dense stacks, windows on some layers, MLA, chunked and NoPE layers, Gated DeltaNet).
``benchmarks/families.py`` and ``lora_families.py`` step them (their results files name
the rows by these keys); ``tests/test_hf_config_transformers.py`` counts their parameters
against the class built on meta, under its own ids.

:data:`MLX_LM` — mlx-lm's qwen2 and gpt2 at d = 64, V = 512, the keys mlx-lm's
``ModelArgs`` require (``rms_norm_eps``, ``n_ctx``, ``layer_norm_epsilon``): measured by
``tests/test_measure_mlx_lm.py`` and ``tests/test_mlx_lora.py``.

Kept apart on purpose (the same families, other configs): ``tests/hf_steps.py``'s d = 64
family configs (the real CPU steps of ``tests/test_refined_transformers.py`` and
``benchmarks/transformers_terms.py``, which share that file); ``tests/test_refined_moe.py``'s
d = 64 MoE and window configs (its saved-tensor census) beside ``benchmarks/moe_window.py``'s
d = 256, L = 4, V = 4096 ones (the measured steps its results file reports) — every size
differs; and :data:`FAMILIES`' DeepSeek-V3 beside ``tests/test_hf_config_transformers.py``'s
``deepseek-v3-mla`` (the benchmark's sets ``num_key_value_heads=8``, the test's leaves it
to transformers' default).
"""

from __future__ import annotations

#: The shape :func:`small` starts from.
SHAPE = dict(
    hidden_size=256, num_hidden_layers=2, num_attention_heads=8, vocab_size=1000,
    intermediate_size=640,
)  # fmt: skip


def small(model_type: str, **keys) -> dict:
    """A config of ``model_type`` at :data:`SHAPE`, ``keys`` added or overriding."""
    return {"model_type": model_type, **SHAPE, **keys}


#: The families and variations (row names of benchmarks/results/families.md).
FAMILIES: dict[str, dict] = {
    "llama, head_dim 48": small("llama", num_key_value_heads=2, head_dim=48),
    "ministral": small("ministral", num_attention_heads=16, head_dim=64),
    "qwen2, window on layer 2": small(
        "qwen2", num_key_value_heads=2, use_sliding_window=True, sliding_window=64,
        max_window_layers=1,
    ),
    "qwen3": small("qwen3", num_key_value_heads=4, head_dim=64),
    "gemma, untied, bias": small(
        "gemma", num_key_value_heads=1, tie_word_embeddings=False, attention_bias=True
    ),
    "gemma2": small("gemma2", num_key_value_heads=2, head_dim=32),
    "gemma3_text, windows": small(
        "gemma3_text", num_hidden_layers=6, num_key_value_heads=2, head_dim=32,
        sliding_window=128,
    ),
    "phi, q/k layernorm": small("phi", num_key_value_heads=2, qk_layernorm=True),
    "phi3, window": small("phi3", vocab_size=32064, num_key_value_heads=2, sliding_window=64),
    "olmo2, bias": small("olmo2", num_key_value_heads=2, attention_bias=True),
    "cohere2, NoPE on layer 2": small(
        "cohere2", num_key_value_heads=2, layer_types=["sliding_attention", "full_attention"],
    ),
    "gpt2": {"model_type": "gpt2", "n_embd": 256, "n_layer": 2, "n_head": 8, "vocab_size": 1000},
    "mixtral": small("mixtral", num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=1),
    "qwen3_moe": small(
        "qwen3_moe", num_key_value_heads=2, head_dim=64, num_experts=8, num_experts_per_tok=2,
        moe_intermediate_size=64,
    ),
    "qwen2_moe, shared expert": small(
        "qwen2_moe", num_key_value_heads=4, num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=64, shared_expert_intermediate_size=128,
    ),
    "qwen2_moe, MoE every 2nd layer": small(
        "qwen2_moe", num_hidden_layers=4, num_key_value_heads=4, num_experts=4,
        num_experts_per_tok=2, moe_intermediate_size=64, decoder_sparse_step=2,
        mlp_only_layers=[1], qkv_bias=False,
    ),
    "gpt_oss": small(
        "gpt_oss", num_key_value_heads=2, head_dim=32, num_local_experts=4,
        num_experts_per_tok=2,
    ),
    "deepseek_v3, MLA": small(
        "deepseek_v3", num_hidden_layers=3, num_key_value_heads=8, n_routed_experts=8,
        num_experts_per_tok=2, moe_intermediate_size=64, q_lora_rank=96, kv_lora_rank=64,
        qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32, first_k_dense_replace=1,
        n_group=2, topk_group=1,
    ),
    "llama4_text, interleaved MoE": small(
        "llama4_text", num_hidden_layers=4, num_key_value_heads=2, head_dim=32,
        num_local_experts=4, intermediate_size_mlp=512, interleave_moe_layer_step=2,
    ),
    "llama4_text, chunked 128": small(
        "llama4_text", num_hidden_layers=4, num_key_value_heads=2, head_dim=32,
        num_local_experts=4, attention_chunk_size=128,
    ),
    "qwen3_next, hybrid": small(
        "qwen3_next", num_hidden_layers=4, num_key_value_heads=2, head_dim=32,
        linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=32,
        linear_value_head_dim=32, num_experts=8, num_experts_per_tok=2,
        moe_intermediate_size=64, shared_expert_intermediate_size=96,
    ),
}  # fmt: skip

#: The MLA families beside DeepSeek-V3 (tests/test_mla_families.py steps them; the
#: parameter-count test counts them): DeepSeek-V2 with a q latent and greedy routing, and
#: with a plain q_proj and group-limited routing; MiniCPM3 with its multipliers, and with
#: a plain q_proj, MLP biases, untied head and v_head_dim left to the class.
#: ``num_key_value_heads`` = heads: MLA's K/V have every head (MiniCPM3's default is 40).
MLA: dict[str, dict] = {
    "deepseek_v2, q latent": small(
        "deepseek_v2", num_hidden_layers=3, n_routed_experts=8, num_experts_per_tok=2,
        moe_intermediate_size=64, q_lora_rank=96, kv_lora_rank=64, qk_rope_head_dim=16,
        qk_nope_head_dim=32, v_head_dim=32, first_k_dense_replace=1,
    ),
    "deepseek_v2, q_proj, group-limited": small(
        "deepseek_v2", num_hidden_layers=3, n_routed_experts=8, num_experts_per_tok=2,
        moe_intermediate_size=64, q_lora_rank=None, kv_lora_rank=64, qk_rope_head_dim=16,
        qk_nope_head_dim=32, v_head_dim=32, first_k_dense_replace=1, n_shared_experts=1,
        topk_method="group_limited_greedy", n_group=4, topk_group=2,
    ),
    "minicpm3, multipliers": small(
        "minicpm3", num_hidden_layers=3, num_key_value_heads=8, q_lora_rank=96,
        kv_lora_rank=64, qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32,
        scale_emb=12, scale_depth=1.4, dim_model_base=64,
    ),
    "minicpm3, q_proj, bias, untied": small(
        "minicpm3", num_key_value_heads=8, q_lora_rank=None, kv_lora_rank=64,
        qk_rope_head_dim=16, qk_nope_head_dim=32, mlp_bias=True, tie_word_embeddings=False,
    ),
}  # fmt: skip

#: mlx-lm's classes at d = 64 (the keys their ModelArgs need, which transformers defaults).
MLX_LM: dict[str, dict] = {
    "qwen2": dict(
        model_type="qwen2", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, vocab_size=512,
        tie_word_embeddings=True, rms_norm_eps=1e-6,
    ),
    "gpt2": dict(
        model_type="gpt2", n_embd=64, n_layer=2, n_head=4, vocab_size=512, n_positions=128,
        n_ctx=128, layer_norm_epsilon=1e-5,
    ),
}  # fmt: skip
