"""The dropout probabilities a config enables, by the config keys families use for them
(read by :mod:`introspect.adapters.hf_config` for a family reader's spec and by
:mod:`introspect.adapters.hf_transformers` for a walker-built one)."""

from __future__ import annotations

TYPE_CHECKING = False  # typing's flag without importing typing (see introspect._record)
if TYPE_CHECKING:
    from typing import Any


#: The config keys each dropout probability is read from, first found wins, and where
#: the modeling files apply it: on the attention probabilities (GPT-2's ``attn_pdrop``,
#: BERT-style ``attention_probs_dropout_prob`` in modeling_biogpt.py's
#: ``eager_attention_forward``); on each block output before its residual add
#: (``resid_pdrop``; ``hidden_dropout``; Seed-OSS's ``residual_dropout``,
#: modeling_seed_oss.py lines 83 and 224; BERT-style ``hidden_dropout_prob``,
#: modeling_biogpt.py lines 292 and 302); on the embedding output (``embd_pdrop``; the
#: BERT naming's ``hidden_dropout_prob`` also drives it, modeling_biogpt.py line 394, as
#: ``BertEmbeddings.dropout`` in modeling_bert.py).
DROPOUT_KEYS = {
    "attention_dropout": ("attention_dropout", "attn_pdrop", "attention_probs_dropout_prob"),
    "hidden_dropout": ("resid_pdrop", "hidden_dropout", "residual_dropout", "hidden_dropout_prob"),
    "embedding_dropout": ("embd_pdrop", "hidden_dropout_prob"),
}


def number_at(config: dict[str, Any], keys: tuple[str, ...], fallback: float) -> float:
    """The first of ``keys`` the config holds as a number (not a bool), else ``fallback``."""
    for key in keys:
        value = config.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return fallback


def dropout_facts(config: dict[str, Any], default: float = 0.0) -> dict[str, float]:
    """The three dropout probabilities the refined execution layer reads, from the
    config keys of :data:`DROPOUT_KEYS` (``default`` where none is present)."""
    return {field: number_at(config, keys, default) for field, keys in DROPOUT_KEYS.items()}
