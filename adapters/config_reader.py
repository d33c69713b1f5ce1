"""Typed access to one config.json, with defaults from transformers or by hand.

A :class:`Reader` looks a key up in the user's config first (``null`` means "use the
default", as Hugging Face treats it); then takes the default the family reader gives —
transcribed from transformers' configuration class, which it names, and checked against
that class by the tests that compare both paths with transformers' own build. Only what no
reader default covers (a nested ``text_config`` left out, Gemma 3's text sizes) comes from
``defaults``: the same config passed through transformers' own configuration class
(``AutoConfig.for_model``), computed the first time it is needed. Reading a config
therefore never imports transformers (about a second) unless it must, which keeps the
closed-form commands fast. Every default applied is remembered as an assumption, with where
it came from, so a report can show it. Bad values raise one-line :class:`ConfigError`
naming the file and the key.
"""

from __future__ import annotations

from collections.abc import Callable

from introspect.errors import ConfigError

TYPE_CHECKING = False  # typing's flag without importing typing (see introspect._record)
if TYPE_CHECKING:
    from typing import Any

MISSING = object()


class Reader:
    """One config dict (``config``), the transformers-filled copy (``defaults``, empty
    without transformers) and the name of the class that filled it.

    ``defaults`` may be given as a function returning ``(defaults, class name, why it is
    empty)``; it is called the first time a key is missing. A published config.json spells
    out every key its reader needs, so reading one never imports transformers (about a
    second), and the closed-form commands stay fast; a config that leaves keys out gets
    them from transformers' own class, as before."""

    def __init__(
        self,
        config: dict[str, Any],
        model_type: str,
        where: str,
        *,
        defaults: dict[str, Any] | Callable[[], tuple[dict[str, Any], str, str]] | None = None,
        cls: str = "",
        assumptions: list[str] | None = None,
    ) -> None:
        self.config = config
        self.model_type = model_type
        self.where = where
        self._fill = defaults if callable(defaults) else None
        self._defaults = None if callable(defaults) else (defaults or {})
        self.cls = cls
        self.assumptions: list[str] = assumptions if assumptions is not None else []

    @property
    def defaults(self) -> dict[str, Any]:
        """The transformers-filled config, computed on first use."""
        if self._defaults is None:
            filled, cls, rejected = self._fill() if self._fill else ({}, "", "")
            self._defaults, self.cls = filled or {}, cls or self.cls
            if rejected:
                self.assumptions.append(rejected)
        return self._defaults

    @property
    def with_transformers(self) -> bool:
        return bool(self.defaults)

    def sub(self, key: str, *, required: bool = True) -> Reader | None:
        """A reader over a nested config (``text_config``), sharing the assumptions."""
        own = self.config.get(key)
        if own is not None and not isinstance(own, dict):
            raise self.fail(f"{key} must be a JSON object, got {type(own).__name__}")
        if own is None:
            # A wrapper's text part fixes the model's sizes: never a class default.
            if required:
                raise self.fail(f"{key} is missing; a {self.model_type} config.json must give it")
            filled = self.defaults.get(key)
            if not isinstance(filled, dict):
                return None
            nested_type = filled.get("model_type") or key
        else:
            nested_type = own.get("model_type") or key

        def fill() -> tuple[dict[str, Any], str, str]:
            nested = self.defaults.get(key)
            return (nested if isinstance(nested, dict) else {}), self.cls, ""

        return Reader(
            own or {},
            str(nested_type),
            f"{self.where} ({key})",
            defaults=fill,
            cls=self.cls,
            assumptions=self.assumptions,
        )

    def fail(self, message: str) -> ConfigError:
        return ConfigError(f"{self.where}: {message}")

    def raw(self, *keys: str, fill: bool = False) -> tuple[str, Any]:
        """The first key of ``keys`` the config gives (not null), else (with ``fill``)
        the first the transformers defaults give (an assumption), else
        ``(keys[0], MISSING)``. Each key is also looked up under its other names in
        transformers' configuration class (its ``attribute_map``, both ways:
        :func:`introspect.adapters.hf_table.aliases`), so a config saved by any
        transformers version reads the same."""
        from .hf_table import with_aliases

        keys = with_aliases(self.model_type, keys)
        for key in keys:
            value = self.config.get(key)
            if value is not None:
                return key, value
        for key in keys if fill else ():
            value = self.defaults.get(key)
            if value is not None:
                self.assumptions.append(f"{key} absent: transformers {self.cls} gives {value!r}")
                return key, value
        return keys[0], MISSING

    def _default(self, key: str, default: Any, why: str) -> Any:
        if default is MISSING:
            raise self.fail(
                f"{key} is missing; a {self.model_type} config.json must give it "
                "(use the model's published config.json)"
            )
        if why:
            self.assumptions.append(f"{key} absent: {why}")
        return default

    def integer(self, *keys: str, default: Any = MISSING, why: str = "") -> int | None:
        """A positive integer under the first present key of ``keys``. A key without a
        default fixes a size: only the config itself may give it, never a class default."""
        key, value = self.raw(*keys)
        if value is MISSING:
            return self._default(key, default, why)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(f"{key} must be an integer, got {value!r}")
        if value <= 0:
            raise self.fail(f"{key} must be positive, got {value}")
        return value

    def count(self, key: str, default: int, why: str = "") -> int:
        """A non-negative integer (``first_k_dense_replace``, ``n_shared_experts``)."""
        key, value = self.raw(key)
        if value is MISSING:
            return self._default(key, default, why)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.fail(f"{key} must be a non-negative integer, got {value!r}")
        return value

    def flag(self, key: str, default: bool, why: str = "") -> bool:
        """A true/false key; ``why`` explains the default when the key is absent."""
        key, value = self.raw(key)
        if value is MISSING:
            return self._default(key, default, why)
        if not isinstance(value, bool):
            raise self.fail(f"{key} must be true or false, got {value!r}")
        return value

    def text(self, *keys: str, default: str) -> str:
        key, value = self.raw(*keys)
        if value is MISSING:
            return default
        if not isinstance(value, str):
            raise self.fail(f"{key} must be a string, got {value!r}")
        return value

    def number(self, key: str, default: float) -> float:
        key, value = self.raw(key)
        if value is MISSING:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(f"{key} must be a number, got {value!r}")
        return float(value)

    def items(self, key: str, kind: type, length: int | None = None) -> list | None:
        """A list of ``kind`` values (``layer_types``, ``mlp_only_layers``), or ``None``;
        ``length`` is the count it must have (the layers)."""
        key, value = self.raw(key)
        if value is MISSING:
            return None
        if not isinstance(value, list) or not all(
            isinstance(v, kind) and not (kind is int and isinstance(v, bool)) for v in value
        ):
            raise self.fail(f"{key} must be a list of {kind.__name__} values, got {value!r}")
        if length is not None and len(value) != length:
            raise self.fail(f"{key} lists {len(value)} layers but num_hidden_layers is {length}")
        return value

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

    def tied(self, default: bool, cls: str) -> bool:
        return self.flag("tie_word_embeddings", default, f"{cls} default {str(default).lower()}")
