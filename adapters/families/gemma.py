"""Gemma, Gemma 2 and Gemma 3 (text, and the multimodal wrapper with its SigLIP tower).

Sources: ``transformers/models/{gemma,gemma2,gemma3,siglip}/configuration_*.py`` and
``modeling_*.py`` (5.x). Gemma 2 and 3 have four norms per block (before and after the
attention and the feed-forward) and interleave sliding-window layers (``layer_types``;
by default Gemma 2 alternates, Gemma 3 makes every 6th layer global); Gemma 3 adds
per-head RMSNorms on q and k. ``Gemma3ForConditionalGeneration`` is the language model
plus ``vision_tower`` (a SigLIP vision encoder without its pooling head) and
``multi_modal_projector`` (a vision-width × text-width matrix and an RMSNorm).
"""

from __future__ import annotations

from introspect.adapters.config_reader import Reader

from ._common import context, rmsnorm_gated, window_kinds


def gemma(r: Reader) -> dict:
    """Gemma: GeGLU (a gated feed-forward with tanh-GELU), ``head_dim`` 256 by default,
    embeddings tied by default. Its RMSNorm scales by (1 + w): still one weight per
    feature."""
    cls = "GemmaConfig"
    attention_bias = r.flag("attention_bias", False)
    fields = rmsnorm_gated(r, kv=16, head_dim=256, cls=cls)
    act = r.text("hidden_activation", "hidden_act", default="gelu_pytorch_tanh")
    # GemmaConfig rewrites the legacy "gelu" of the first releases to the tanh form.
    fields["hidden_act"] = "gelu_pytorch_tanh" if act == "gelu" else act
    return dict(
        fields,
        qkv_bias=attention_bias,
        o_bias=attention_bias,
        tie_word_embeddings=r.tied(True, cls),
    )


def _interleaved(r: Reader, cls: str, *, kv: int, qk_norm: str, pattern: int, ctx: int) -> dict:
    """Gemma 2 / Gemma 3 text: Gemma's block with four norms and sliding layers."""
    fields = _gemma_fields(r, cls=cls, kv=kv)
    fields.update(norms_per_layer=4, qk_norm=qk_norm)
    L = fields["num_hidden_layers"]
    window = r.integer("sliding_window", default=4096, why=f"{cls} default 4096")
    if r.flag("use_bidirectional_attention", False):
        window = window // 2 + 1  # Gemma3TextConfig: exclusive bounds for flash attention
    if r.items("layer_types", str, length=L) is None:
        every = r.integer("sliding_window_pattern", default=pattern, why=f"{cls} default {pattern}")
        r.config = {
            **r.config,
            "layer_types": [
                "sliding_attention" if (i + 1) % every else "full_attention" for i in range(L)
            ],
        }
    fields["max_position_embeddings"] = context(r, ctx)
    runs = window_kinds(r, fields, window=window, norms=4)
    if runs:
        fields["layers"] = runs
    else:
        fields["sliding_window"] = None
    return fields


def _gemma_fields(r: Reader, *, cls: str, kv: int) -> dict:
    fields = rmsnorm_gated(r, kv=kv, head_dim=256, cls=cls)
    act = r.text("hidden_activation", "hidden_act", default="gelu_pytorch_tanh")
    fields["hidden_act"] = "gelu_pytorch_tanh" if act == "gelu" else act
    attention_bias = r.flag("attention_bias", False)
    return dict(
        fields,
        qkv_bias=attention_bias,
        o_bias=attention_bias,
        tie_word_embeddings=r.tied(True, cls),
    )


def gemma2(r: Reader) -> dict:
    """Gemma2Config: 4 K/V heads, head_dim 256, alternating sliding layers (W = 4096)."""
    return _interleaved(r, "Gemma2Config", kv=4, qk_norm="none", pattern=2, ctx=8192)


def gemma3_text(r: Reader) -> dict:
    """Gemma3TextConfig: Gemma 2's block with per-head q/k RMSNorms; 5 of every 6 layers
    slide (``sliding_window_pattern`` 6)."""
    return _interleaved(r, "Gemma3TextConfig", kv=4, qk_norm="head", pattern=6, ctx=131072)


def siglip_vision_parameters(v: Reader) -> int:
    """SiglipVisionModel (``modeling_siglip.py``): patch embedding (a Conv2d with bias),
    one learned position per patch, per layer two LayerNorms (weight and bias), q, k, v,
    out (d×d with bias) and fc1/fc2 (with bias), the post LayerNorm, and the attention
    pooling head when ``vision_use_head``."""
    d = v.integer("hidden_size", default=768, why="SiglipVisionConfig default 768")
    f = v.integer("intermediate_size", default=3072, why="SiglipVisionConfig default 3072")
    layers = v.integer("num_hidden_layers", default=12, why="SiglipVisionConfig default 12")
    channels = v.integer("num_channels", default=3)
    image = v.integer("image_size", default=224, why="SiglipVisionConfig default 224")
    patch = v.integer("patch_size", default=16, why="SiglipVisionConfig default 16")
    embeddings = channels * patch * patch * d + d + (image // patch) ** 2 * d
    layer = 2 * (2 * d) + 4 * (d * d + d) + (d * f + f) + (f * d + d)
    total = embeddings + layers * layer + 2 * d
    if v.flag("vision_use_head", True, "SiglipVisionConfig default true"):
        # probe, nn.MultiheadAttention (in_proj 3d×d + 3d, out d×d + d), LayerNorm, MLP
        total += d + (3 * d * d + 3 * d) + (d * d + d) + 2 * d + (d * f + f) + (f * d + d)
    return total


#: Gemma3TextConfig's defaults for the sizes (``configuration_gemma3.py``).
TEXT_SIZES = {
    "vocab_size": 262_208,
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_hidden_layers": 26,
    "num_attention_heads": 8,
}


def gemma3(r: Reader) -> dict:
    """Gemma3Config: ``text_config`` is the language model (Gemma 3 text), ``vision_config``
    a SigLIP tower; the projector maps the tower's width to the text width."""
    text = r.sub("text_config")
    # Published multimodal configs leave the text sizes at Gemma3TextConfig's defaults
    # (gemma-3-4b gives no vocab_size): the one place a size may come from a default.
    for key, value in TEXT_SIZES.items():
        if text.config.get(key) is None:
            text.assumptions.append(f"text_config.{key} absent: Gemma3TextConfig default {value}")
            text.config = {**text.config, key: value}
    fields = gemma3_text(text)
    vision = r.sub("vision_config")
    tower = siglip_vision_parameters(vision)
    v = vision.integer("hidden_size", default=768)
    projector = v * fields["hidden_size"] + v
    fields["tie_word_embeddings"] = r.tied(True, "Gemma3Config")
    fields["tower_parameters"] = tower + projector
    fields["tower"] = f"SigLIP vision tower ({tower:,}) and multi-modal projector ({projector:,})"
    return fields
