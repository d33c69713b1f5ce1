"""The soft-capping facts a spec carries (``final_logit_softcapping``,
``attn_logit_softcapping``), set by :mod:`introspect.adapters.hf_config` from a family
reader's config and by :mod:`introspect.adapters.hf_transformers` from a walked class:
a cap is kept only where it is a positive number (an explicit null or 0 turns it off, as
the configuration classes read it)."""

from __future__ import annotations


def softcap_facts(final: object, attn: object) -> dict[str, float]:
    """``{key: cap}`` for each of the two caps that is a positive number (not a bool)."""
    out = {}
    for key, value in (("final_logit_softcapping", final), ("attn_logit_softcapping", attn)):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            out[key] = float(value)
    return out
