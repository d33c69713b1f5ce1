"""transformers' classes as data, read without importing transformers.

``adapters/data/transformers_table.json`` is written from transformers itself by
``benchmarks/transformers_table.py`` (tests/test_config_aliases.py and
tests/test_attention_default.py hold it to the installed version):

* :func:`aliases` — each configuration class's ``attribute_map``
  (``transformers/models/*/configuration_*.py``): ``PreTrainedConfig`` stores the value
  of an attribute under the mapped key, so a config.json saved by one transformers
  version names it one way and another version the other (Qwen3MoeConfig:
  ``num_experts`` ↔ ``num_local_experts``). A key is read under either name.
* :func:`causal_lm` — the class ``AutoModelForCausalLM`` builds for a ``model_type``
  and whether it has an SDPA path (``_supports_sdpa``), which fixes transformers' default
  attention (``PreTrainedModel.get_correct_attn_implementation``, ``modeling_utils.py``).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

TABLE = Path(__file__).parent / "data" / "transformers_table.json"


@functools.cache
def table() -> dict:
    """The bundled table (read once)."""
    return json.loads(TABLE.read_text(encoding="utf-8"))


def aliases(model_type: str, key: str) -> tuple[str, ...]:
    """The other names of ``key`` in ``model_type``'s configuration class, both ways of
    its ``attribute_map`` (attribute → stored key, stored key → attribute)."""
    mapping = table()["attribute_map"].get(model_type)
    if not mapping:
        return ()
    out = [mapping[key]] if key in mapping else []
    out += [attr for attr, stored in mapping.items() if stored == key]
    return tuple(k for k in dict.fromkeys(out) if k != key)


def with_aliases(model_type: str, keys: tuple[str, ...]) -> tuple[str, ...]:
    """``keys`` in order, each followed by its aliases (:func:`aliases`), once each."""
    out: list[str] = []
    for key in keys:
        out += [key, *aliases(model_type, key)]
    return tuple(dict.fromkeys(out))


def causal_lm(model_type: str) -> tuple[str, bool] | None:
    """``(class name, _supports_sdpa)`` of transformers' causal-LM class for
    ``model_type`` (image-text-to-text where there is no causal LM), or ``None``."""
    row = table()["causal_lm"].get(model_type)
    return (row[0], bool(row[1])) if row else None
