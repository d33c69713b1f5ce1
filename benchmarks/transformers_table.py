"""Write ``adapters/data/transformers_table.json``: what the closed form needs to know of
transformers' classes without importing transformers (seconds a command).

Run:  .venv/bin/python benchmarks/transformers_table.py          # the whole table
      .venv/bin/python benchmarks/transformers_table.py --check  # compare, write nothing

Two parts, each read from transformers itself:

* ``attribute_map`` — each configuration class's ``attribute_map``
  (``transformers/models/*/configuration_*.py``; ``PreTrainedConfig.__setattr__`` /
  ``__getattribute__`` in ``configuration_utils.py`` redirect the attribute name to the
  stored key), by ``model_type``, for the classes that have one. A config.json written by
  one transformers version may spell a key either way (qwen3_moe: ``num_experts`` ↔
  ``num_local_experts``); :mod:`introspect.adapters.config_aliases` reads both.
* ``causal_lm`` — the class ``AutoModelForCausalLM`` (else
  ``AutoModelForImageTextToText``) builds for each ``model_type``, and whether it has an
  SDPA path (``_supports_sdpa``): transformers' default attention is SDPA where it does,
  else eager (``PreTrainedModel.get_correct_attn_implementation``, ``modeling_utils.py``).

tests/test_config_aliases.py and tests/test_attention_default.py hold the table to the
installed transformers.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "adapters" / "data" / "transformers_table.json"


def attribute_maps() -> dict[str, dict[str, str]]:
    """``model_type`` → its configuration class's ``attribute_map`` (non-empty only)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES

    out: dict[str, dict[str, str]] = {}
    for model_type in sorted(CONFIG_MAPPING_NAMES):
        try:
            cls = CONFIG_MAPPING[model_type]
        except Exception:  # a class that cannot import here (an optional dependency)
            continue
        mapping = dict(getattr(cls, "attribute_map", None) or {})
        if mapping:
            out[model_type] = dict(sorted(mapping.items()))
    return out


def causal_lm_classes() -> dict[str, list]:
    """``model_type`` → ``[class name, _supports_sdpa]`` of the class the auto mappings
    build for it (causal LM first, then image-text-to-text)."""
    import transformers
    from transformers.models.auto import modeling_auto

    out: dict[str, list] = {}
    for names in (
        modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
    ):
        for model_type, name in sorted(names.items()):
            if model_type in out or not isinstance(name, str):
                continue
            try:
                cls = getattr(transformers, name)
            except Exception:
                continue
            out[model_type] = [name, bool(getattr(cls, "_supports_sdpa", False))]
    return dict(sorted(out.items()))


def table() -> dict:
    import transformers

    warnings.filterwarnings("ignore")
    return {
        "transformers": transformers.__version__,
        "attribute_map": attribute_maps(),
        "causal_lm": causal_lm_classes(),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="compare with the file, write nothing")
    args = p.parse_args(argv)
    new = table()
    if args.check:
        old = json.loads(TABLE.read_text(encoding="utf-8"))
        same = {k: old.get(k) == new[k] for k in ("attribute_map", "causal_lm")}
        print(json.dumps(same))
        return 0 if all(same.values()) else 1
    TABLE.write_text(json.dumps(new, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    print(
        f"{TABLE.relative_to(ROOT)}: {len(new['attribute_map'])} attribute maps, "
        f"{len(new['causal_lm'])} causal-LM classes (transformers {new['transformers']})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
