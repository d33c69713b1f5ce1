"""Every vision-language wrapper transformers builds through its image-text auto class,
counted by introspect beside the meta-device build of the same config.

Run:  .venv/bin/python benchmarks/vlm_counts.py        # a few minutes (full-size builds)

For each ``model_type`` in ``MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES`` that the
readers do not cover by hand: the configuration class's own default config
(``AutoConfig.for_model(model_type).to_dict()``), read by
:func:`introspect.adapters.hf_config.spec_from_config` (the wrapper path of
:mod:`introspect.adapters.multimodal`), against ``AutoModelForImageTextToText`` built
from it on the meta device: the total, and the tower (every parameter outside the
language model and the head). A type whose default config transformers cannot build, or
that has no separate language model, is listed with the reason. Writes
``benchmarks/results/vlm-counts.md``.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

OUT = Path(__file__).parent / "results" / "vlm-counts.md"


def built_counts(model) -> tuple[int, int]:
    """(total, tower) of a wrapper built on the meta device, summed from its modules."""
    total = sum(p.numel() for p in model.parameters())
    language = getattr(model, "language_model", None) or model.get_decoder()
    kept = {id(p) for p in language.parameters()}
    head = model.get_output_embeddings()
    if head is not None:
        kept |= {id(p) for p in head.parameters()}
    return total, sum(p.numel() for p in model.parameters() if id(p) not in kept)


def row(model_type: str) -> list[str]:
    import torch
    from introspect.adapters.hf_config import spec_from_config
    from transformers import AutoConfig, AutoModelForImageTextToText

    from introspect.errors import IntrospectError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config = AutoConfig.for_model(model_type)
            raw = {**config.to_dict(), "model_type": model_type}
            with torch.device("meta"):
                model = AutoModelForImageTextToText.from_config(config)
        total, tower = built_counts(model)
    except Exception as e:  # noqa: BLE001 - the build's own failure, reported
        return [model_type, "", "", "", "", f"not built: {str(e).splitlines()[0][:90]}"]
    try:
        spec = spec_from_config(raw, source=model_type)
    except IntrospectError as e:
        return [model_type, f"{total:,}", "", f"{tower:,}", "", f"refused: {str(e)[:90]}"]
    same = spec.n_params == total and spec.tower_parameters == tower
    note = "exact" if same else "differs"
    if spec.unmodelled:
        note += "; text model answered by the dry run"
    return [
        model_type,
        f"{total:,}",
        f"{spec.n_params:,}",
        f"{tower:,}",
        f"{spec.tower_parameters:,}",
        note,
    ]


def main() -> int:
    from introspect.adapters.families import REGISTRY
    from transformers.models.auto import modeling_auto
    from transformers.utils import logging

    logging.set_verbosity_error()
    types = [
        t for t in modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES if t not in REGISTRY
    ]
    start, rows = time.perf_counter(), []
    for t in types:
        rows.append(row(t))
        print(" | ".join(rows[-1]), flush=True)
    exact = sum(r[-1].startswith("exact") for r in rows)
    built = sum(bool(r[1]) for r in rows)
    lines = [
        "# Vision-language wrappers: introspect's count beside the meta-device build",
        "",
        f"`.venv/bin/python benchmarks/vlm_counts.py` ({time.perf_counter() - start:.0f} s): "
        f"{len(types)} image-text model_types not read by hand; {built} built from their "
        f"default config; {exact} counted exactly, tower included and apart.",
        "",
        "| model_type | built | introspect | tower (built) | tower (introspect) | |",
        "|---|---:|---:|---:|---:|---|",
        *("| " + " | ".join(r) + " |" for r in rows),
        "",
    ]
    OUT.write_text("\n".join(lines), encoding="utf-8")
    print(lines[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
