"""--attention left out follows the implementation (issue 21): transformers' class default
(SDPA unless the class has no SDPA path: ``PreTrainedModel.get_correct_attn_implementation``
in ``transformers/modeling_utils.py``), eager for our reference model, mx.fast SDPA for
mlx-lm; a given --attention is kept; the printed setup says where the default came from."""

from __future__ import annotations

import json

import pytest
from introspect.adapters import hf_table
from introspect.adapters import hf_transformers as hft
from introspect.adapters.families import ALIASES, REGISTRY

from introspect import refined
from introspect.cli import main
from introspect.refined.implementations import resolve_attention
from introspect.setup import TrainingSetup
from introspect.spec import standard_spec

LLAMA = "meta-llama/Llama-3.2-1B"  # bundled


def _profile(capsys, *argv: str) -> dict:
    capsys.readouterr()
    assert main(["profile", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _total(out: dict) -> int:
    return out["estimates"]["refined"]["total_bytes"]


def test_setup_leaves_attention_to_the_implementation():
    """A TrainingSetup without attention: eager for the reference model, memory-efficient
    for mlx-lm at once; transformers' waits for the model (None) and resolves with it."""
    ref = TrainingSetup(implementation="reference")
    assert ref.attention == "eager" and "reference" in ref.attention_origin
    mlx = TrainingSetup(framework="mlx")
    assert mlx.implementation == "mlx_lm" and mlx.attention == "memory_efficient"
    hf = TrainingSetup()
    assert hf.implementation == "transformers" and hf.attention is None
    spec = standard_spec(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=100)
    got = resolve_attention(spec, hf)
    assert got.attention == "memory_efficient"
    assert got.attention_origin == "sdpa: transformers' default for LlamaForCausalLM"
    given = TrainingSetup(attention="eager")
    assert resolve_attention(spec, given) is given  # a given attention is kept
    assert given.attention_origin == ""
    # a copy given another attention is no longer the default
    assert got.replace(attention="eager").attention_origin == ""


def test_profile_without_attention_is_sdpa_for_llama_and_says_so(capsys):
    """Llama's class supports SDPA: profile without --attention equals profile with
    --attention memory-efficient (and is below eager at T=2048, FP32 on CPU), and its
    setup line names the source of the choice."""
    default = _profile(capsys, LLAMA, "--seq", "2048", "--device", "cpu")
    sdpa = _profile(capsys, LLAMA, "--seq", "2048", "--device", "cpu", "--attention", "sdpa")
    eager = _profile(capsys, LLAMA, "--seq", "2048", "--device", "cpu", "--attention", "eager")
    assert _total(default) == _total(sdpa) < _total(eager)
    capsys.readouterr()
    assert main(["profile", LLAMA, "--seq", "2048"]) == 0
    text = capsys.readouterr().out
    assert "memory_efficient attention (sdpa: transformers' default for LlamaForCausalLM)" in text


def test_a_given_attention_is_kept(capsys):
    capsys.readouterr()
    assert main(["profile", LLAMA, "--attention", "eager"]) == 0
    text = capsys.readouterr().out
    assert "eager attention," in text and "transformers' default" not in text


def test_reference_and_mlx_defaults(capsys):
    """--impl reference keeps eager (the same figure as --attention eager); mlx-lm's
    default is its mx.fast SDPA."""
    ref = _profile(capsys, LLAMA, "--impl", "reference", "--device", "cpu")
    flags = ("--impl", "reference", "--device", "cpu")
    ref_eager = _profile(capsys, LLAMA, *flags, "--attention", "eager")
    assert _total(ref) == _total(ref_eager)
    capsys.readouterr()
    assert main(["profile", LLAMA, "--framework", "mlx"]) == 0
    assert "mx.fast SDPA: mlx-lm's models always call" in capsys.readouterr().out


def test_a_class_without_sdpa_defaults_to_eager():
    """Gemma 2's class has no SDPA path: its default is eager, and the default is not
    refused (an explicit --attention memory-efficient still is)."""
    from introspect.adapters.hf_config import spec_from_config
    from small_configs import FAMILIES

    from introspect.unmodelled import NotModelled, check_setup

    spec = spec_from_config(dict(FAMILIES["gemma2"]), use_transformers=False)
    setup = resolve_attention(spec, TrainingSetup(seq_len=256))
    assert setup.attention == "eager"
    assert setup.attention_origin == (
        "eager: transformers' default for Gemma2ForCausalLM, which has no SDPA path"
    )
    check_setup(spec, setup)  # not refused
    with pytest.raises(NotModelled, match="_supports_sdpa is False"):
        check_setup(spec, TrainingSetup(seq_len=256, attention="memory_efficient"))
    est = refined.estimate(spec, TrainingSetup(seq_len=256))
    assert est.total == refined.estimate(spec, setup).total


@pytest.mark.parametrize("name", ["llama, head_dim 48", "gemma2", "qwen3_moe", "gpt2", "gpt_oss"])
def test_the_default_is_what_transformers_picks(name):
    """Built with no attn_implementation, transformers' class runs the attention the
    resolution says (``config._attn_implementation`` after ``from_config``)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from small_configs import FAMILIES

    raw = dict(FAMILIES[name])
    model_type = raw["model_type"]
    config = transformers.AutoConfig.for_model(**raw)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    picked = {"sdpa": "memory_efficient", "eager": "eager"}[model.config._attn_implementation]
    attention, name = hft.default_attention(model_type)
    assert (attention, name) == (picked, type(model).__name__)


def test_the_table_is_the_hand_read_families_classes():
    """For every family read by hand, the bundled (class, _supports_sdpa) row is the
    installed transformers' causal-LM class (the whole table:
    ``benchmarks/transformers_table.py --check``)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    for model_type in [*REGISTRY, *ALIASES]:
        family = ALIASES.get(model_type, model_type)
        if not hft.knows(family) or hft.model_class(family) is None:
            continue
        cls = hft.model_class(family)
        assert hf_table.causal_lm(family) == (cls.__name__, cls._supports_sdpa), family


def test_a_real_cpu_step_without_attention_equals_profile(tmp_path, capsys):
    """A REAL CPU step of a small Llama through transformers' own class, --attention left
    out on both sides: the measured peak equals profile's refined estimate within the
    existing tolerance (1%), and both ran SDPA."""
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    transformers.LlamaConfig(
        hidden_size=128,
        intermediate_size=344,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=1024,
        max_position_embeddings=512,
    ).save_pretrained(tmp_path)
    source = str(tmp_path / "config.json")
    capsys.readouterr()
    argv = ["measure", source, "--impl", "transformers", "--device", "cpu", "--seq", "256"]
    assert main([*argv, "--no-census", "--json"]) == 0
    m = json.loads(capsys.readouterr().out)["rows"][0]["measurement"]
    assert m["setup"]["attention"] == "memory_efficient"
    assert m["setup"]["attention_origin"].startswith("sdpa: transformers' default")
    profile = _profile(capsys, source, "--seq", "256", "--device", "cpu")
    assert abs(_total(profile) / m["peak_bytes"] - 1) < 0.01
    eager = _profile(capsys, source, "--seq", "256", "--device", "cpu", "--attention", "eager")
    assert _total(eager) > 1.01 * m["peak_bytes"]  # the old default would be off
