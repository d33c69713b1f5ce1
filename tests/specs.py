"""ModelSpecs that several test files share, typed out by hand from their sources so the
tests do not depend on the adapters they may be checking; and the mlx-lm setup the MLX
closed-form tests share."""

from __future__ import annotations

from introspect.layers import Attention, FeedForward, LayerKind, LayerRun
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec, standard_spec

#: Qwen2.5-0.5B's config.json as a spec: RMSNorm, GQA 14/2, SwiGLU 4864, tied, q/k/v bias.
QWEN25_05B = ModelSpec(
    hidden_size=896,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    intermediate_size=4864,
    vocab_size=151936,
    tie_word_embeddings=True,
    norm="rmsnorm",
    norm_bias=False,
    ffn="gated",
    hidden_act="silu",
    qkv_bias=True,
    model_type="qwen2",
)

#: The seed's worked example: N = 7e9 given by hand, L=33, d=4096, h=32, V=43,520.
SEED_7B = standard_spec(
    num_hidden_layers=33,
    hidden_size=4096,
    num_attention_heads=32,
    vocab_size=43520,
    num_parameters=7_000_000_000,
)

#: Small variants for real training steps, one per structural feature of a ModelSpec.
BASE = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=512)
VARIANTS = {
    "standard": ModelSpec(**BASE),
    "rmsnorm-gqa-gated": ModelSpec(
        **BASE,
        norm="rmsnorm",
        num_key_value_heads=2,
        ffn="gated",
        hidden_act="silu",
        intermediate_size=96,
    ),
    "tied-biases": ModelSpec(
        **BASE, tie_word_embeddings=True, qkv_bias=True, o_bias=True, mlp_bias=True
    ),
    "layernorm-no-bias-learned-qknorm": ModelSpec(
        **BASE,
        norm_bias=False,
        position_embedding="learned",
        max_position_embeddings=64,
        qk_norm="head",
        lm_head_bias=True,
    ),
    "learned-qknorm-lm-head-bias-tied": ModelSpec(
        **BASE,
        norm_bias=False,
        position_embedding="learned",
        max_position_embeddings=64,
        qk_norm="head",
        lm_head_bias=True,
        tie_word_embeddings=True,
    ),
    "head-dim-full-qknorm": ModelSpec(**BASE, head_dim=32, qk_norm="full", norm="rmsnorm"),
}


def mlx_lm_setup(
    dtype: str = "fp32", compiled: bool = False, batch: int = 2, seq: int = 96, ckpt=False
) -> TrainingSetup:
    """mlx-lm's class on the CPU as its trainer steps it (the logits loop, its SDPA),
    weights and activations in ``dtype``."""
    return TrainingSetup(
        batch_size=batch,
        seq_len=seq,
        activation_dtype=dtype,
        weights_dtype=dtype,
        precision="bf16" if dtype == "bf16" else "fp32",
        attention="memory_efficient",
        framework="mlx_compiled" if compiled else "mlx",
        implementation="mlx_lm",
        activation_checkpointing=ckpt,
        loop="logits",
        device="cpu",
    )


#: A small RMSNorm/gated model described as runs of layer kinds (tests/test_refined_stack.py,
#: tests/test_implementations.py): :func:`stack` builds it from ``(kind, count)`` runs.
STACK_BASE = dict(
    hidden_size=64,
    num_hidden_layers=4,
    num_attention_heads=4,
    vocab_size=100,
    norm="rmsnorm",
    norm_bias=False,
    ffn="gated",
    intermediate_size=96,
)
STACK_ATTENTION = dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16)
STACK_DENSE = LayerKind(
    attention=Attention(**STACK_ATTENTION), feed_forward=FeedForward(intermediate_size=96)
)


def stack(*runs: tuple[LayerKind, int]) -> ModelSpec:
    """:data:`STACK_BASE` with the layer runs ``runs``."""
    return ModelSpec(**STACK_BASE, layers=tuple(LayerRun(k, n) for k, n in runs))
