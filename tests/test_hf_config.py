"""config.json → ModelSpec: exact counts for the bundled reference models, Hugging Face's
defaults, one-line errors, a fuzzed parser, and the real transformers classes built on
the meta device as the judge of every family's count."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from introspect.adapters import bundled
from introspect.adapters.hf_config import (
    REGISTRY,
    load_config,
    spec_from_config,
    supported_model_types,
)

from introspect.errors import ConfigError, UnsupportedArchitecture
from introspect.params import parameter_count, parameters_by_component
from introspect.spec import ModelSpec

#: The bundled models the hand-written readers cover (the vision-language wrappers are
#: read from transformers' own build: tests/test_vision.py).
BUNDLED = tuple(m for m in bundled.models() if m.model_type in REGISTRY)


def _ids(models):
    return [m.hub_id for m in models]


# ---- the published counts -----------------------------------------------------------


@pytest.mark.parametrize("model", BUNDLED, ids=_ids(BUNDLED))
def test_bundled_config_gives_the_published_exact_count(model):
    spec = spec_from_config(model.config(), source=model.hub_id)
    assert spec.num_parameters is None  # derived from the structure, not copied
    assert parameter_count(spec) == model.parameters
    assert sum(parameters_by_component(spec).values()) == model.parameters
    assert spec.tie_word_embeddings == model.tied
    assert spec.model_type == model.model_type


def test_every_bundled_family_is_registered():
    assert {m.model_type for m in BUNDLED} <= set(REGISTRY)


def test_qwen_remote_code_splits_intermediate_size_over_w1_and_w2():
    spec = bundled.lookup("Qwen/Qwen-7B").spec()
    assert spec.intermediate_size == 22016 // 2
    assert spec.head_dim == 128  # kv_channels
    assert spec.qkv_bias and not spec.o_bias and not spec.mlp_bias  # no_bias: true


# ---- Hugging Face's defaults for keys a config leaves out -----------------------------


def _small(model_type: str, **extra) -> dict:
    config = {
        "model_type": model_type,
        "hidden_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 8,
        "vocab_size": 1000,
        "intermediate_size": 512,
    }
    config.update(extra)
    return config


def test_gemma_ties_when_the_key_is_absent_and_says_so():
    spec = spec_from_config(_small("gemma", num_key_value_heads=1))
    assert spec.tie_word_embeddings
    assert spec.head_dim == 256  # GemmaConfig's default, not hidden_size / heads
    assert any("tie_word_embeddings" in a for a in spec.assumptions)


def test_kv_heads_default_follows_each_config_class():
    # LlamaConfig: as many as the query heads; MistralConfig: 8.
    assert spec_from_config(_small("llama")).kv_heads == 8
    assert spec_from_config(_small("llama", num_attention_heads=16)).kv_heads == 16
    mistral = spec_from_config(_small("mistral", num_attention_heads=16))
    assert mistral.kv_heads == 8
    assert any("num_key_value_heads" in a for a in mistral.assumptions)


def test_qwen3_head_dim_defaults_to_128_not_hidden_over_heads():
    spec = spec_from_config(_small("qwen3", num_key_value_heads=4))
    assert spec.head_dim == 128 and spec.q_dim == 8 * 128


def test_null_means_default():
    spec = spec_from_config(_small("llama", num_key_value_heads=None, head_dim=None))
    assert spec.kv_heads == 8 and spec.head_size == 32


def test_gpt2_reads_its_own_key_names():
    config = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12}
    spec = spec_from_config(config)
    # GPT-2 small, 124,439,808 parameters (the published checkpoint's count).
    assert parameter_count(spec) == 124_439_808
    assert spec.position_embedding == "learned" and spec.max_position_embeddings == 1024


# ---- errors ---------------------------------------------------------------------------


@pytest.mark.parametrize("use_transformers", [True, False], ids=["transformers", "fallback"])
def test_unknown_model_type_names_itself_the_file_and_the_supported_list(use_transformers):
    with pytest.raises(UnsupportedArchitecture) as err:
        spec_from_config(
            _small("not_a_model"), path="/models/x/config.json", use_transformers=use_transformers
        )
    message = str(err.value)
    assert "'not_a_model'" in message and "/models/x/config.json" in message
    assert "safetensors headers still give the exact count" in message
    for family in supported_model_types():
        assert family in message
    assert "\n" not in message


@pytest.mark.parametrize(
    "change, words",
    [
        ({"hidden_size": None}, "hidden_size is missing"),
        ({"hidden_size": 4096.0}, "hidden_size must be an integer"),
        ({"num_hidden_layers": "32"}, "num_hidden_layers must be an integer"),
        ({"vocab_size": True}, "vocab_size must be an integer"),
        ({"vocab_size": 0}, "vocab_size must be positive"),
        ({"tie_word_embeddings": "yes"}, "tie_word_embeddings must be true or false"),
        ({"num_key_value_heads": 3}, "must divide"),
        ({"model_type": 7}, "model_type must be a string"),
        ({"model_type": None}, "no model_type"),
    ],
)
def test_bad_configs_raise_one_line_config_errors(change, words):
    config = _small("llama")
    for key, value in change.items():
        if value is None:
            config.pop(key)
        else:
            config[key] = value
    with pytest.raises(ConfigError) as err:
        spec_from_config(config, path="cfg.json")
    assert words in str(err.value)
    assert str(err.value).startswith("cfg.json: ")
    assert "\n" not in str(err.value)


def test_load_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.json")
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path)  # a folder
    bad = tmp_path / "bad.json"
    bad.write_text('{"model_type": "llama",')
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="expected a JSON object"):
        load_config(bad)
    bad.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(bad)


# ---- fuzzing: a valid ModelSpec or one of our errors, nothing else ----------------------

_json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=False),
    st.text(max_size=8),
)
_json_values = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=5,
)
_keys = st.sampled_from(
    sorted(
        {k for m in BUNDLED for k in m.config()}
        | {"n_embd", "n_layer", "n_head", "n_inner", "n_positions", "kv_channels", "no_bias"}
        | {"qk_layernorm", "partial_rotary_factor", "num_experts", "mlp_bias"}
    )
)


def _check(config) -> None:
    try:
        spec = spec_from_config(config, path="fuzz.json")
    except (ConfigError, UnsupportedArchitecture) as err:
        assert str(err) and "\n" not in str(err)
        return
    assert isinstance(spec, ModelSpec)
    assert sum(parameters_by_component(spec).values()) == parameter_count(spec) > 0


_FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_FUZZ
@given(st.dictionaries(_keys | st.text(max_size=6), _json_values, max_size=8))
def test_fuzz_random_dicts(config):
    _check(config)


@_FUZZ
@given(
    model=st.sampled_from(BUNDLED),
    family=st.sampled_from(sorted(REGISTRY)),
    changes=st.dictionaries(_keys, _json_values | st.integers(1, 5000), max_size=4),
    drops=st.lists(_keys, max_size=3),
)
def test_fuzz_mutated_real_configs(model, family, changes, drops):
    config = copy.deepcopy(model.config())
    config["model_type"] = family
    config.update(changes)
    for key in drops:
        config.pop(key, None)
    _check(config)


@_FUZZ
@given(st.one_of(_json_values, st.lists(_json_values)))
def test_fuzz_non_objects(value):
    if isinstance(value, dict):
        _check(value)
    else:
        with pytest.raises(ConfigError):
            spec_from_config(value)


def test_load_config_round_trips_a_bundled_file(tmp_path):
    model = bundled.lookup("google/gemma-2b")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(model.config()))
    assert load_config(path) == model.config()


@pytest.mark.parametrize("use_transformers", [True, False], ids=["transformers", "fallback"])
@pytest.mark.parametrize(
    "config, words",
    [
        ({"model_type": "gemma3", "vision_config": {}}, "text_config is missing"),
        ({"model_type": "llama4", "vision_config": {}}, "text_config is missing"),
        (
            _small("gemma2", num_hidden_layers=3, layer_types=["full_attention"]),
            "layer_types lists 1 layers but num_hidden_layers is 3",
        ),
        (
            _small("mistral", sliding_window=9000, max_position_embeddings=4096),
            "sliding_window=9000 is larger than the context",
        ),
        (
            _small("qwen3_moe", num_experts=4, num_experts_per_tok=5),
            "num_experts_per_tok=5 must be between 1 and num_experts=4",
        ),
    ],
    ids=[
        "gemma3-no-text",
        "llama4-no-text",
        "layer-list-length",
        "window-over-context",
        "top-k-over-experts",
    ],
)
def test_inconsistent_stacks_are_one_line_errors_naming_the_key(config, words, use_transformers):
    with pytest.raises(ConfigError) as err:
        spec_from_config(config, path="cfg.json", use_transformers=use_transformers)
    assert words in str(err.value) and str(err.value).startswith("cfg.json")
    assert "\n" not in str(err.value)
