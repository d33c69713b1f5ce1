"""config.json → ModelSpec, through a registry keyed by Hugging Face's ``model_type``.

One small function per family reads the config with Hugging Face's own key names and
returns the :class:`ModelSpec` fields that family implies. Keys that fix the size of the
big matrices (``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
``vocab_size``, ``intermediate_size``) are required: a config without them is an error,
never a guess. Every other key the count depends on falls back to the default of the
family's configuration class in ``transformers`` (5.x) — e.g. ``num_key_value_heads``
defaults to 8 for Mistral but to the query heads for Llama, and Gemma ties its embeddings
when the config says nothing — and each default applied is recorded in
``ModelSpec.assumptions`` so a report can show it.

Sources: ``transformers/models/<family>/configuration_<family>.py`` and
``modeling_<family>.py``; for ``qwen`` (Qwen-7B, remote code) the repository's own
``configuration_qwen.py`` / ``modeling_qwen.py``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from introspect.errors import ConfigError, UnsupportedArchitecture
from introspect.spec import ModelSpec

#: A config.json larger than this is not a config (guards against reading a checkpoint).
MAX_CONFIG_BYTES = 16 * 1024 * 1024

_MISSING = object()


def load_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The JSON object in ``path``; one-line :class:`ConfigError` when the file cannot be
    read, is not JSON, or is not a JSON object."""
    path = os.fspath(path)
    try:
        if os.path.getsize(path) > MAX_CONFIG_BYTES:
            raise ConfigError(f"{path}: too large for a config.json (over 16 MB)")
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise ConfigError(f"cannot read {path}: {reason}") from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text, so not a config.json") from e
    try:
        config = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"{path}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})"
        ) from e
    except RecursionError as e:
        raise ConfigError(f"{path}: JSON nested too deeply to be a config.json") from e
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: expected a JSON object, found {type(config).__name__}")
    return config


class _Reader:
    """Typed access to one config dict; defaults applied are remembered as assumptions."""

    def __init__(self, config: dict[str, Any], model_type: str, where: str) -> None:
        self.config = config
        self.model_type = model_type
        self.where = where
        self.assumptions: list[str] = []

    def _get(self, keys: tuple[str, ...]) -> tuple[str, Any]:
        for key in keys:
            value = self.config.get(key)
            if value is not None:  # Hugging Face treats null as "use the default"
                return key, value
        return keys[0], _MISSING

    def _fail(self, message: str) -> ConfigError:
        return ConfigError(f"{self.where}: {message}")

    def integer(self, *keys: str, default: Any = _MISSING, why: str = "") -> int | None:
        """A positive integer under the first present key of ``keys``."""
        key, value = self._get(keys)
        if value is _MISSING:
            if default is _MISSING:
                raise self._fail(
                    f"{key} is missing; a {self.model_type} config.json must give it "
                    "(use the model's published config.json)"
                )
            if why:
                self.assumptions.append(f"{key} absent: {why}")
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._fail(f"{key} must be an integer, got {value!r}")
        if value <= 0:
            raise self._fail(f"{key} must be positive, got {value}")
        return value

    def flag(self, key: str, default: bool, why: str = "") -> bool:
        """A true/false key; ``why`` explains the default when the key is absent."""
        _, value = self._get((key,))
        if value is _MISSING:
            if why:
                self.assumptions.append(f"{key} absent: {why}")
            return default
        if not isinstance(value, bool):
            raise self._fail(f"{key} must be true or false, got {value!r}")
        return value

    def text(self, *keys: str, default: str) -> str:
        key, value = self._get(keys)
        if value is _MISSING:
            return default
        if not isinstance(value, str):
            raise self._fail(f"{key} must be a string, got {value!r}")
        return value

    def number(self, key: str, default: float) -> float:
        _, value = self._get((key,))
        if value is _MISSING:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self._fail(f"{key} must be a number, got {value!r}")
        return float(value)

    def shape(self) -> dict[str, int]:
        """The four sizes every family names the same way."""
        return {
            "hidden_size": self.integer("hidden_size"),
            "num_hidden_layers": self.integer("num_hidden_layers"),
            "num_attention_heads": self.integer("num_attention_heads"),
            "vocab_size": self.integer("vocab_size"),
        }

    def kv_heads(self, default: int | None, cls: str) -> int | None:
        """``num_key_value_heads``: the class default (``None`` = as many as the query
        heads, which is what ModelSpec's ``None`` means too)."""
        why = (
            f"{cls} default {default}"
            if default is not None
            else f"{cls} default: as many as num_attention_heads (multi-head attention)"
        )
        return self.integer("num_key_value_heads", default=default, why=why)

    def head_dim(self, default: int | None, cls: str) -> int | None:
        """``head_dim``: the class default (``None`` = hidden_size / num_attention_heads)."""
        why = f"{cls} default {default}" if default is not None else ""
        return self.integer("head_dim", default=default, why=why)


def _rmsnorm_gated(r: _Reader, *, kv: int | None, head_dim: int | None, cls: str) -> dict:
    """What Llama and its descendants share: RMSNorm pre-norm blocks (2 per layer), a gated
    feed-forward (gate, up, down) of ``intermediate_size``, rotary positions."""
    return dict(
        r.shape(),
        num_key_value_heads=r.kv_heads(kv, cls),
        head_dim=r.head_dim(head_dim, cls),
        intermediate_size=r.integer("intermediate_size"),
        norm="rmsnorm",
        norm_bias=False,
        ffn="gated",
        hidden_act=r.text("hidden_act", default="silu"),
        position_embedding="rope",
    )


def _tied(r: _Reader, default: bool, cls: str) -> bool:
    return r.flag("tie_word_embeddings", default, f"{cls} default {str(default).lower()}")


def _llama(r: _Reader) -> dict:
    """LlamaConfig: ``attention_bias`` on q, k, v and o; ``mlp_bias`` on all three
    feed-forward projections."""
    cls = "LlamaConfig"
    attention_bias = r.flag("attention_bias", False)
    return dict(
        _rmsnorm_gated(r, kv=None, head_dim=None, cls=cls),
        qkv_bias=attention_bias,
        o_bias=attention_bias,
        mlp_bias=r.flag("mlp_bias", False),
        tie_word_embeddings=_tied(r, False, cls),
    )


def _mistral(r: _Reader) -> dict:
    """MistralConfig: Llama without biases; 8 K/V heads unless the config says otherwise."""
    cls = "MistralConfig"
    return dict(
        _rmsnorm_gated(r, kv=8, head_dim=None, cls=cls),
        tie_word_embeddings=_tied(r, False, cls),
    )


def _qwen2(r: _Reader) -> dict:
    """Qwen2: biases on q, k and v (always), none on o or the feed-forward."""
    cls = "Qwen2Config"
    return dict(
        _rmsnorm_gated(r, kv=32, head_dim=None, cls=cls),
        qkv_bias=True,
        tie_word_embeddings=_tied(r, False, cls),
    )


def _qwen3(r: _Reader) -> dict:
    """Qwen3: RMSNorm on queries and keys per head (``head_dim`` weights each, shared by
    the heads); ``head_dim`` is explicit (128 by default) and need not be d/h."""
    cls = "Qwen3Config"
    attention_bias = r.flag("attention_bias", False)
    return dict(
        _rmsnorm_gated(r, kv=32, head_dim=128, cls=cls),
        qkv_bias=attention_bias,
        o_bias=attention_bias,
        qk_norm="head",
        tie_word_embeddings=_tied(r, False, cls),
    )


def _mixtral(r: _Reader) -> dict:
    """Mixtral: Mistral's attention with a sparse feed-forward: ``num_local_experts``
    gated experts per layer, a bias-free router (d × E), ``num_experts_per_tok`` active."""
    cls = "MixtralConfig"
    return dict(
        _rmsnorm_gated(r, kv=8, head_dim=None, cls=cls),
        num_local_experts=r.integer(
            "num_local_experts", "num_experts", default=8, why=f"{cls} default 8"
        ),
        num_experts_per_tok=r.integer("num_experts_per_tok", default=2, why=f"{cls} default 2"),
        tie_word_embeddings=_tied(r, False, cls),
    )


def _gemma(r: _Reader) -> dict:
    """Gemma: GeGLU (a gated feed-forward with tanh-GELU), ``head_dim`` 256 by default,
    embeddings tied by default. Its RMSNorm scales by (1 + w): still one weight per
    feature."""
    cls = "GemmaConfig"
    attention_bias = r.flag("attention_bias", False)
    fields = _rmsnorm_gated(r, kv=16, head_dim=256, cls=cls)
    act = r.text("hidden_activation", "hidden_act", default="gelu_pytorch_tanh")
    # GemmaConfig rewrites the legacy "gelu" of the first releases to the tanh form.
    fields["hidden_act"] = "gelu_pytorch_tanh" if act == "gelu" else act
    return dict(
        fields,
        qkv_bias=attention_bias,
        o_bias=attention_bias,
        tie_word_embeddings=_tied(r, True, cls),
    )


def _olmo2(r: _Reader) -> dict:
    """OLMo 2: RMSNorm on queries and keys over the full projection widths (q_dim and
    kv_dim weights); its two block norms sit after attention and after the feed-forward
    (still 2 per layer)."""
    cls = "Olmo2Config"
    attention_bias = r.flag("attention_bias", False)
    return dict(
        _rmsnorm_gated(r, kv=None, head_dim=None, cls=cls),
        qkv_bias=attention_bias,
        o_bias=attention_bias,
        qk_norm="full",
        tie_word_embeddings=_tied(r, False, cls),
    )


def _phi(r: _Reader) -> dict:
    """Phi (1, 1.5, 2): a parallel block with one LayerNorm (with bias) per layer; biases
    on q, k, v, the output ``dense``, ``fc1``/``fc2`` and the lm_head; a plain
    feed-forward; rotary on ``partial_rotary_factor`` of each head (no parameters);
    optional per-head LayerNorms on q and k (``qk_layernorm``)."""
    cls = "PhiConfig"
    factor = r.number("partial_rotary_factor", 0.5)
    if not 0.0 <= factor <= 1.0:
        raise r._fail(f"partial_rotary_factor must be between 0 and 1, got {factor}")
    return dict(
        r.shape(),
        num_key_value_heads=r.kv_heads(None, cls),
        head_dim=r.head_dim(None, cls),
        intermediate_size=r.integer("intermediate_size"),
        norm="layernorm",
        norm_bias=True,
        norms_per_layer=1,
        ffn="plain",
        hidden_act=r.text("hidden_act", default="gelu_new"),
        qkv_bias=True,
        o_bias=True,
        mlp_bias=True,
        lm_head_bias=True,
        qk_norm="head" if r.flag("qk_layernorm", False) else "none",
        position_embedding="rope",
        tie_word_embeddings=_tied(r, False, cls),
        attention_dropout=r.number("attention_dropout", 0.0),
        hidden_dropout=r.number("resid_pdrop", 0.0),
        embedding_dropout=r.number("embd_pdrop", 0.0),
        partial_rotary_factor=factor,
    )


def _gpt2(r: _Reader) -> dict:
    """GPT-2: learned positions (``n_positions`` rows), LayerNorm with bias, fused
    ``c_attn`` (d → 3d) and ``c_proj`` with biases, a plain d → ``n_inner`` → d
    feed-forward (4d when ``n_inner`` is null), the lm_head tied to ``wte``."""
    cls = "GPT2Config"
    if r.flag("add_cross_attention", False):
        raise r._fail("add_cross_attention=true (an encoder-decoder GPT-2) is not supported")
    d = r.integer("n_embd", "hidden_size")
    return dict(
        hidden_size=d,
        num_hidden_layers=r.integer("n_layer", "num_hidden_layers"),
        num_attention_heads=r.integer("n_head", "num_attention_heads"),
        vocab_size=r.integer("vocab_size", default=50257, why=f"{cls} default 50257"),
        intermediate_size=r.integer("n_inner", default=4 * d),
        norm="layernorm",
        norm_bias=True,
        ffn="plain",
        hidden_act=r.text("activation_function", default="gelu_new"),
        qkv_bias=True,
        o_bias=True,
        mlp_bias=True,
        position_embedding="learned",
        max_position_embeddings=r.integer(
            "n_positions", "max_position_embeddings", default=1024, why=f"{cls} default 1024"
        ),
        tie_word_embeddings=_tied(r, True, cls),
        # GPT2Config's dropouts default to 0.1 each (configuration_gpt2.py).
        attention_dropout=r.number("attn_pdrop", 0.1),
        hidden_dropout=r.number("resid_pdrop", 0.1),
        embedding_dropout=r.number("embd_pdrop", 0.1),
    )


def _qwen(r: _Reader) -> dict:
    """Qwen (Qwen-7B/14B/72B, remote code): a fused ``c_attn`` (d → 3·kv_channels·h) with
    bias, ``c_proj`` and the feed-forward's ``w1``/``w2``/``c_proj`` biased only without
    ``no_bias``. ``intermediate_size`` counts both up-side projections: ``w1`` and ``w2``
    are each ``intermediate_size / 2`` wide (a SwiGLU). ``seq_length`` is the training
    context and adds no parameters (rotary positions)."""
    cls = "QWenConfig"
    no_bias = r.flag("no_bias", True, f"{cls} default true")
    ff = r.integer("intermediate_size")
    if ff % 2:
        raise r._fail(f"intermediate_size must be even (w1 and w2 each take half of it), got {ff}")
    r.integer("seq_length", default=None)  # type check only
    return dict(
        r.shape(),
        head_dim=r.integer("kv_channels", default=128, why=f"{cls} default 128"),
        intermediate_size=ff // 2,
        norm="rmsnorm",
        norm_bias=False,
        ffn="gated",
        hidden_act="silu",
        qkv_bias=True,
        o_bias=not no_bias,
        mlp_bias=not no_bias,
        position_embedding="rope",
        tie_word_embeddings=_tied(r, False, cls),
    )


#: model_type → the function that reads that family's config.
REGISTRY: dict[str, Callable[[_Reader], dict]] = {
    "llama": _llama,
    "mistral": _mistral,
    "qwen2": _qwen2,
    "qwen": _qwen,
    "qwen3": _qwen3,
    "mixtral": _mixtral,
    "gemma": _gemma,
    "phi": _phi,
    "olmo2": _olmo2,
    "gpt2": _gpt2,
}

#: Other model_types with the same parameters as a registered family (same tensors, same
#: config defaults): Ministral is Mistral with per-layer sliding windows.
ALIASES: dict[str, str] = {
    "ministral": "mistral",
}


def supported_model_types() -> tuple[str, ...]:
    """Every ``model_type`` the registry reads, sorted (aliases included)."""
    return tuple(sorted({*REGISTRY, *ALIASES}))


def spec_from_config(
    config: dict[str, Any], *, source: str = "", path: str | None = None
) -> ModelSpec:
    """The ModelSpec a Hugging Face ``config.json`` describes.

    ``source`` is recorded in the spec (a Hub id, a path); ``path`` names the file in
    error messages. The spec's ``num_parameters`` is left ``None``: the count follows
    exactly from the structure (:func:`introspect.params.parameter_count`).

    Raises :class:`UnsupportedArchitecture` for a ``model_type`` outside the registry and
    :class:`ConfigError` for missing keys, wrong types or impossible values.
    """
    where = path or source or "config.json"
    if not isinstance(config, dict):
        raise ConfigError(f"{where}: expected a JSON object, found {type(config).__name__}")
    model_type = config.get("model_type")
    if model_type is None:
        raise ConfigError(
            f"{where}: no model_type; a Hugging Face config.json names its architecture "
            'there (e.g. "llama")'
        )
    if not isinstance(model_type, str):
        raise ConfigError(f"{where}: model_type must be a string, got {model_type!r}")
    family = ALIASES.get(model_type, model_type)
    read = REGISTRY.get(family)
    if read is None:
        raise UnsupportedArchitecture(
            f"{where}: model_type {model_type!r} is not supported; supported: "
            f"{', '.join(supported_model_types())}"
        )
    reader = _Reader(config, model_type, where)
    fields = read(reader)
    # Every Llama-descended config names its attention dropout so (0.0 by default).
    fields.setdefault("attention_dropout", reader.number("attention_dropout", 0.0))
    try:
        return ModelSpec(
            **fields,
            model_type=model_type,
            source=source or (path or ""),
            assumptions=tuple(reader.assumptions),
        )
    except ValueError as e:
        raise ConfigError(f"{where}: {e}") from e
