"""benchmarks/every_type.py's shrink helper: the small faithful shape keeps each type's
layer pattern (one whole period of ``layer_types``) and builds a real class whose count
introspect reads exactly."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from every_type import _period, shrink  # noqa: E402

pytest.importorskip("transformers")


@pytest.mark.parametrize("model_type", ["gemma3_text", "qwen3_next", "gpt_oss", "cohere2"])
def test_shrink_keeps_the_layer_pattern(model_type):
    from transformers import AutoConfig

    raw = AutoConfig.for_model(model_type).to_dict()
    small = shrink(raw)
    kinds = small["layer_types"]
    assert len(kinds) == small["num_hidden_layers"] < raw["num_hidden_layers"]
    assert kinds == raw["layer_types"][: len(kinds)]
    assert set(kinds) == set(raw["layer_types"])
    assert len(kinds) >= _period(raw["layer_types"])
    assert small["hidden_size"] == 64 and small["vocab_size"] == 512


def test_shrink_keeps_every_kind_of_a_dense_prefix():
    raw = {
        "num_hidden_layers": 48,
        "hidden_size": 1024,
        "mlp_layer_types": ["dense"] + ["sparse"] * 47,
        "layer_types": ["full_attention"] * 48,
        "n_group": 8,
        "topk_group": 4,
        "num_experts": 64,
    }
    small = shrink(raw)
    assert small["num_hidden_layers"] == 4
    assert small["mlp_layer_types"] == ["dense", "sparse", "sparse", "sparse"]
    assert len(small["layer_types"]) == 4
    assert small["num_experts"] == 4 and small["n_group"] == 1 == small["topk_group"]
    assert shrink(raw, widths=False)["hidden_size"] == 1024


def test_shrunk_config_builds_and_counts_exactly():
    import torch
    from introspect.adapters.hf_config import spec_from_config
    from transformers import AutoConfig, AutoModelForCausalLM

    small = shrink({**AutoConfig.for_model("gemma3_text").to_dict(), "model_type": "gemma3_text"})
    config = AutoConfig.for_model(
        "gemma3_text", **{k: v for k, v in small.items() if k != "model_type"}
    )
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    built = sum(p.numel() for p in model.parameters())
    assert spec_from_config(small, source="gemma3_text").n_params == built
