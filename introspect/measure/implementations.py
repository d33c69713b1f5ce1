"""Real implementations, built from a ModelSpec: Hugging Face transformers'
``LlamaForCausalLM`` (torch) and mlx-lm's ``mlx_lm.models.llama.Model`` (MLX).

The estimates are judged against the models users actually train, not only our reference
models. Both classes are Llama: RMSNorm, a gated SiLU feed-forward, RoPE, optional GQA,
no biases except the all-or-nothing ``attention_bias`` and ``mlp_bias``. A spec outside
that family is refused with the reason. Configs are built in memory; nothing is
downloaded.
"""

from __future__ import annotations

from introspect.errors import IntrospectError
from introspect.spec import ModelSpec

IMPLEMENTATIONS = ("reference", "transformers", "mlx_lm")


def llama_config(spec: ModelSpec) -> dict:
    """Hugging Face Llama config keys for ``spec``; raises if Llama cannot express it."""
    problems = []
    if spec.norm != "rmsnorm":
        problems.append("norm must be rmsnorm")
    if spec.ffn != "gated" or spec.hidden_act != "silu":
        problems.append("the feed-forward must be gated SiLU")
    if spec.qkv_bias != spec.o_bias:
        problems.append("q/k/v and o biases must match (attention_bias)")
    if spec.lm_head_bias or spec.qk_norm != "none" or spec.is_moe:
        problems.append("no lm_head bias, q/k norms or experts")
    if spec.position_embedding != "rope" or spec.norms_per_layer != 2:
        problems.append("RoPE positions and 2 norms per block")
    if problems:
        raise IntrospectError(
            "this shape is not a Llama (" + "; ".join(problems) + "); use the reference "
            "implementation or a Llama-style shape (--llama)"
        )
    return {
        "hidden_size": spec.hidden_size,
        "num_hidden_layers": spec.num_hidden_layers,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.kv_heads,
        "head_dim": spec.head_size,
        "intermediate_size": spec.ffn_dim,
        "vocab_size": spec.vocab_size,
        "tie_word_embeddings": spec.tie_word_embeddings,
        "attention_bias": spec.qkv_bias,
        "mlp_bias": spec.mlp_bias,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 4096,
    }


def transformers_llama(spec: ModelSpec, attention: str = "eager", dtype=None):
    """``LlamaForCausalLM`` for ``spec`` with random weights, eager or SDPA attention."""
    import torch

    try:
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as err:
        raise IntrospectError(
            "--impl transformers needs Hugging Face transformers: pip install 'introspect[compare]'"
        ) from err

    config = LlamaConfig(
        **llama_config(spec),
        attn_implementation="eager" if attention == "eager" else "sdpa",
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(dtype or torch.float32)
    model.train()
    return model


def mlx_lm_llama(spec: ModelSpec, dtype=None):
    """``mlx_lm.models.llama.Model`` for ``spec`` with random weights, evaluated.

    mlx-lm's attention is always ``mx.fast.scaled_dot_product_attention`` (memory
    efficient); its eager path does not exist."""
    import mlx.core as mx

    try:
        from mlx_lm.models import llama
    except ImportError as err:
        raise IntrospectError(
            "--impl mlx-lm needs mlx-lm: pip install 'introspect[compare]'"
        ) from err

    mx.random.seed(0)
    model = llama.Model(llama.ModelArgs(model_type="llama", **llama_config(spec)))
    if dtype is not None and dtype != mx.float32:
        model.set_dtype(dtype)
    mx.eval(model.parameters())
    return model
