"""Vision-language wrappers (issue 22, item 1): exact counts with the tower apart, the
processor's visual tokens, and an image-and-text step against the dry run of the real
class fed real-shaped pixel inputs. No network: bundled configs and inline tiny ones."""

from __future__ import annotations

import json
import warnings

import pytest
from introspect.adapters import bundled
from introspect.adapters.hf_config import spec_from_config

from introspect.cli import main
from introspect.errors import ConfigError
from introspect.setup import TrainingSetup
from introspect.vision import image_grid, language_setup

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

WRAPPERS = (
    "Qwen/Qwen3-VL-8B-Instruct",
    "Qwen/Qwen2.5-VL-7B-Instruct",
    "mistralai/Mistral-Small-3.1-24B-Instruct-2503",
    "Qwen/Qwen3.5-9B",
)

#: A Qwen3-VL small enough for a dry run in seconds, with the published patch geometry
#: (patch 16, temporal 2, merge 2) and deepstack mergers.
TINY_QWEN3_VL = {
    "model_type": "qwen3_vl",
    "image_token_id": 1955,
    "video_token_id": 1956,
    "vision_start_token_id": 1952,
    "vision_end_token_id": 1953,
    "tie_word_embeddings": False,
    "text_config": {
        "model_type": "qwen3_vl_text",
        "hidden_size": 128,
        "intermediate_size": 384,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "vocab_size": 2000,
        "rope_scaling": {"mrope_interleaved": True, "mrope_section": [6, 5, 5]},
    },
    "vision_config": {
        "model_type": "qwen3_vl",
        "depth": 2,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_heads": 2,
        "out_hidden_size": 128,
        "patch_size": 16,
        "temporal_patch_size": 2,
        "spatial_merge_size": 2,
        "num_position_embeddings": 256,
        "deepstack_visual_indexes": [0],
    },
}


def _meta_wrapper(config: dict):
    from transformers import AutoConfig, AutoModelForImageTextToText

    raw = dict(config)
    model_type = raw.pop("model_type")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = AutoConfig.for_model(model_type, **raw)
    with torch.device("meta"):
        return AutoModelForImageTextToText.from_config(cfg)


@pytest.mark.parametrize("hub_id", WRAPPERS)
def test_wrapper_count_is_the_meta_build_with_the_tower_apart(hub_id):
    """N is the image-text class's own count and the published one; the tower is every
    parameter outside ``model.language_model`` and ``lm_head``, summed here from the
    build's own modules."""
    model = bundled.lookup(hub_id)
    spec = spec_from_config(model.config(), source=hub_id)
    built = _meta_wrapper(model.config())
    assert spec.n_params == sum(p.numel() for p in built.parameters()) == model.parameters
    text = sum(p.numel() for p in built.model.language_model.parameters())
    head = 0 if spec.tie_word_embeddings else built.lm_head.weight.numel()
    assert spec.tower_parameters == spec.n_params - text - head > 0


def test_qwen35_counts_its_tower_not_only_the_text_model():
    """Qwen3.5 has a text-only causal-LM class too; with a vision_config the wrapper is
    built, so the published total holds the tower."""
    from transformers import AutoConfig, AutoModelForCausalLM

    raw = bundled.lookup("Qwen/Qwen3.5-9B").config()
    spec = spec_from_config(raw, source="qwen3.5")
    text_only = dict(raw["text_config"])
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        lm = AutoModelForCausalLM.from_config(
            AutoConfig.for_model(text_only.pop("model_type"), **text_only)
        )
    assert spec.n_params - spec.tower_parameters == sum(p.numel() for p in lm.parameters())


def test_flat_layout_reads_like_the_nested_one():
    """Qwen2.5-VL's flat layout (the language model's keys at the top level) and the same
    keys moved into text_config give the same spec."""
    raw = bundled.lookup("Qwen/Qwen2.5-VL-7B-Instruct").config()
    keys = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
    keys += ("num_key_value_heads", "vocab_size", "rope_scaling", "max_position_embeddings")
    nested = {k: v for k, v in raw.items() if k not in keys}
    nested["text_config"] = {k: raw[k] for k in keys}
    flat, moved = (spec_from_config(c, source="x") for c in (raw, nested))
    assert (flat.n_params, flat.tower_parameters) == (moved.n_params, moved.tower_parameters)


def test_wrapper_without_text_config_or_flat_layout_is_refused():
    raw = {k: v for k, v in TINY_QWEN3_VL.items() if k != "text_config"}
    with pytest.raises(ConfigError, match="text_config"):
        spec_from_config(raw, path="vl.json")


@pytest.mark.parametrize("size", [(448, 448), (300, 500), (1080, 1920), (40, 3000), (20, 20)])
def test_visual_tokens_are_the_processors(size):
    """The grid and tokens the real Qwen2-VL image processor makes of one image of
    ``size`` (its PIL backend here) equal :func:`introspect.vision.image_grid`'s."""
    import numpy as np
    from transformers import Qwen2VLImageProcessorPil

    spec = spec_from_config(TINY_QWEN3_VL, source="tiny")
    processor = Qwen2VLImageProcessorPil(patch_size=16, merge_size=2, temporal_patch_size=2)
    image = np.zeros((*size, 3), dtype=np.uint8)
    out = processor(images=[image], return_tensors="pt")
    grid = image_grid(spec.vision, *size)
    assert tuple(out["image_grid_thw"][0].tolist()) == grid.grid
    assert out["pixel_values"].shape[0] == grid.patches
    assert grid.tokens == grid.patches // 4


def _step(setup: TrainingSetup):
    from introspect import refined
    from introspect.measure import hf_models

    spec = spec_from_config(TINY_QWEN3_VL, source="tiny")
    measured, _ = hf_models.measure(TINY_QWEN3_VL, "tiny", spec, setup, device="fake", census=False)
    return measured.peak_bytes, refined.estimate(spec, setup).execution.total


SETUPS = {
    "frozen tower fp32 eager": dict(freeze_tower=True, attention="eager"),
    "frozen tower bf16 sdpa": dict(freeze_tower=True, precision="bf16"),
    "frozen tower amp checkpointing": dict(
        freeze_tower=True, precision="amp", activation_checkpointing=True
    ),
    "lora bf16": dict(finetune="lora", precision="bf16"),
    "lora fp32 eager": dict(finetune="lora", attention="eager"),
}


@pytest.mark.parametrize("name", SETUPS)
def test_qwen3_vl_image_step_within_3_percent_of_its_dry_run(name):
    """Two 448×448 images per sample (196 tokens each after the merger) beside 256 text
    tokens: the closed form (the language model's longer sequence, the frozen tower's
    weights, the held pixel input) against transformers' Qwen3VLForConditionalGeneration
    run under fake tensors with real-shaped pixel_values and image_grid_thw."""
    setup = TrainingSetup(
        batch_size=1, seq_len=256, images=2, image_size=(448, 448), device="cpu", **SETUPS[name]
    )
    measured, estimate = _step(setup)
    assert abs(estimate / measured - 1) < 0.03, (name, measured, estimate)


def test_images_lengthen_the_language_models_sequence():
    spec = spec_from_config(TINY_QWEN3_VL, source="tiny")
    setup = TrainingSetup(seq_len=256, images=2, image_size=(448, 448), freeze_tower=True)
    lm = language_setup(spec, setup)
    assert lm.seq_len == 256 + 2 * 196 and lm.images == 0
    assert lm.image_input_bytes == 2 * 784 * 3 * 2 * 16 * 16 * 4


def _cli(capsys, *argv) -> tuple[int, str]:
    code = main(list(argv))
    err = capsys.readouterr().err.strip()
    return code, err


@pytest.mark.parametrize(
    "flags, named",
    [
        (("--images", "1", "--image-size", "8x8", "--freeze-tower"), "--image-size"),
        (("--images", "1", "--image-size", "10x4000", "--freeze-tower"), "--image-size"),
        (("--images", "0", "--image-size", "448x448"), "--images"),
        (("--images", "2"), "--freeze-tower"),  # a trained tower's activations
    ],
)
def test_image_settings_the_processor_rejects_are_one_line(capsys, flags, named):
    code, err = _cli(capsys, "profile", "Qwen/Qwen3-VL-8B-Instruct", *flags)
    assert code == 2 and named in err and len(err.splitlines()) == 1, err


def test_images_on_a_processor_not_modelled_are_refused(capsys):
    code, err = _cli(
        capsys,
        "profile",
        "mistralai/Mistral-Small-3.1-24B-Instruct-2503",
        "--images",
        "1",
        "--freeze-tower",
    )
    assert code == 2 and "not modelled" in err and len(err.splitlines()) == 1, err


def test_profile_json_reports_the_tower_apart(capsys):
    assert main(["profile", "Qwen/Qwen3-VL-8B-Instruct", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    by = out["params"]["by_component"]
    assert by["vision_tower"] == out["spec"]["tower_parameters"] > 0
    assert sum(by.values()) == out["params"]["total"]


#: Qwen2.5-VL small, flat layout, with its windowed tower (window 112 px, two blocks of
#: full attention).
TINY_QWEN25_VL = {
    "model_type": "qwen2_5_vl",
    "hidden_size": 128,
    "intermediate_size": 384,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 2000,
    "rope_scaling": {"type": "mrope", "mrope_section": [4, 6, 6]},
    "image_token_id": 1955,
    "video_token_id": 1956,
    "vision_start_token_id": 1952,
    "vision_end_token_id": 1953,
    "vision_config": {
        "depth": 4,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_heads": 2,
        "out_hidden_size": 128,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "window_size": 112,
        "fullatt_block_indexes": [1, 3],
    },
}


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_qwen25_vl_windowed_tower_runs_its_dry_run_within_3_percent(precision):
    """The window partition (get_vision_window_index) is the tower's own, computed on the
    real grid and passed as the keywords it accepts; the step is within 3% of it."""
    from introspect import refined
    from introspect.measure import hf_models

    spec = spec_from_config(TINY_QWEN25_VL, source="tiny25")
    setup = TrainingSetup(
        seq_len=128, images=2, image_size=(448, 448), freeze_tower=True, precision=precision
    ).replace(device="cpu")
    m, _ = hf_models.measure(TINY_QWEN25_VL, "tiny25", spec, setup, device="fake", census=False)
    assert any("1024 patches, 256 tokens" in n for n in m.notes)
    estimate = refined.estimate(spec, setup).execution.total
    assert abs(estimate / m.peak_bytes - 1) < 0.03, (m.peak_bytes, estimate)
