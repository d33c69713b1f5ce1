"""A stack or setup the closed form does not model says so, and the dry run of the real
class answers it (issue 19 item 3, issue 25 item 4): a hybrid state-space model profiled
names its Mamba layers and is answered by a FakeTensorMode step of transformers' class,
within 1% of the real CPU step; the closed form refuses it, an encoder, and setups the
class refuses, each in one line."""

from __future__ import annotations

import json

import pytest

from introspect.cli import main

pytest.importorskip("torch")
pytest.importorskip("transformers")

from mixer_stacks import one_line_error  # noqa: E402

#: Nemotron-H at a small shape: Mamba-2 mixer, attention, Mamba-2 mixer, routed experts
#: behind a latent projection (``moe_latent_size``: what the closed form does not model;
#: without it the stack is modelled: tests/test_ssm.py, tests/test_hybrids.py).
NEMOTRON_H = {
    "model_type": "nemotron_h",
    "hidden_size": 64,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 256,
    "intermediate_size": 128,
    "hybrid_override_pattern": "M*ME",
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "moe_shared_expert_intermediate_size": 32,
    "moe_latent_size": 16,
    "mamba_num_heads": 8,
    "mamba_head_dim": 16,
    "ssm_state_size": 8,
    "n_groups": 1,
    "chunk_size": 16,
    "use_mamba_kernels": False,
}
#: A pure recurrent stack with no reader (``RwkvSelfAttention``'s time mixing and
#: ``RwkvFeedForward``'s channel mixing): Mamba-1 and Mamba-2 stacks are modelled
#: (tests/test_mamba1.py, tests/test_mamba2_stack.py).
RWKV = {
    "model_type": "rwkv",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "vocab_size": 256,
    "context_length": 128,
}
#: What the walker names first in it.
RWKV_PART = "RwkvSelfAttention (attention: time_decay, time_first, time_mix_key, … not recognised)"
BERT = {
    "model_type": "bert",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "vocab_size": 256,
    "intermediate_size": 128,
}
BLOOM = {"model_type": "bloom", "hidden_size": 64, "n_layer": 2, "n_head": 4, "vocab_size": 256}
JETMOE = {
    "model_type": "jetmoe",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "kv_channels": 16,
    "vocab_size": 256,
    "intermediate_size": 128,
    "num_local_experts": 2,
    "num_experts_per_tok": 1,
}
SETUP = ["--seq", "64", "--batch", "2", "--device", "cpu"]


def _write(tmp_path, config: dict) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


def test_hybrid_profile_names_the_mamba_layers_and_the_dry_run_answers(capsys, tmp_path):
    source = _write(tmp_path, NEMOTRON_H)
    assert main(["profile", source, *SETUP, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["modelled"] is False and out["answer"] == "dry_run"
    assert out["estimates"] is None
    assert out["unmodelled"] == [
        "NemotronHMoE (routed-expert blocks, E, with a latent projection) in 1 of 4 layers",
    ]  # the Mamba-2 mixers are modelled (the reader's); only the experts are not
    assert out["spec"]["unmodelled"] == out["unmodelled"]
    dry = out["dry_run"]
    assert dry["implementation"] == "transformers' NemotronHForCausalLM"
    assert sum(dry["categories"].values()) == dry["peak_bytes"]

    # The real step of the same class on the CPU, through measure's torch path.
    assert main(["measure", source, *SETUP, "--impl", "transformers", "--no-census",
                 "--json"]) == 0  # fmt: skip
    measured = json.loads(capsys.readouterr().out)
    assert measured["modelled"] is False and measured["unmodelled"] == out["unmodelled"]
    (row,) = measured["rows"]
    assert set(row) == {"measurement"}  # no estimate beside a stack they do not model
    real = row["measurement"]["peak_bytes"]
    assert dry["peak_bytes"] == pytest.approx(real, rel=0.01)


def test_hybrid_profile_text_says_what_answers(capsys, tmp_path):
    assert main(["profile", _write(tmp_path, NEMOTRON_H), *SETUP]) == 0
    text = capsys.readouterr().out
    part = "NemotronHMoE (routed-expert blocks, E, with a latent projection) in 1 of 4 layers"
    assert f"not modelled: {part}" in text
    assert "answered by the dry run of transformers' NemotronHForCausalLM" in text
    assert "refined" not in text and "simplified" not in text


def test_pure_recurrent_model_is_answered_by_the_dry_run(capsys, tmp_path):
    source = _write(tmp_path, RWKV)
    assert main(["profile", source, *SETUP, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["unmodelled"][0] == f"{RWKV_PART} in 2 of 2 layers"
    assert out["dry_run"]["peak_bytes"] > 0
    # A real step is printed without the estimates that do not apply.
    assert main(["measure", source, "--seq", "64", "--device", "fake", "--no-census"]) == 0
    text = capsys.readouterr().out
    assert f"not modelled: {RWKV_PART} in 2 of 2 layers" in text
    assert "estimates do not apply" in text
    assert "refined" not in text and "simplified" not in text
    # Our reference model would be a transformer: measuring it is refused.
    assert main(["measure", source, *SETUP, "--impl", "reference", "--no-census"]) == 2
    assert "not modelled: RwkvSelfAttention" in one_line_error(capsys)
    # So is a sharded step, which is laid beside the refined per-rank estimate.
    assert main(["measure", source, "--devices", "2", "--fsdp", "--seq", "32"]) == 2
    assert "sharded step" in one_line_error(capsys)


@pytest.mark.parametrize("command", [["table"], ["fit", "--budget", "8GB"]])
def test_the_closed_form_refuses_an_unmodelled_stack_in_one_line(capsys, tmp_path, command):
    source = _write(tmp_path, NEMOTRON_H)
    assert main([command[0], source, *command[1:]]) == 2
    line = one_line_error(capsys)
    assert "model_type 'nemotron_h' is not modelled" in line
    assert "NemotronHMoE" in line and "covers decoder-only transformers" in line


def test_an_encoder_is_refused_in_one_line(capsys, tmp_path):
    assert main(["profile", _write(tmp_path, BERT), "--seq", "64"]) == 2
    line = one_line_error(capsys)
    assert "model_type 'bert' is not a decoder-only causal LM" in line
    assert "BertLMHeadModel's attention is not causal" in line


def test_setups_the_class_refuses_are_refused(capsys, tmp_path):
    bloom = _write(tmp_path, BLOOM)
    assert main(["profile", bloom, "--seq", "64", "--attention", "memory-efficient"]) == 2
    assert "BloomForCausalLM has no SDPA path" in one_line_error(capsys)
    assert main(["profile", bloom, "--seq", "64"]) == 0  # eager: the class runs it
    capsys.readouterr()
    # Our reference implementation has an SDPA path: only transformers' class refuses.
    assert main(["profile", bloom, "--seq", "64", "--attention", "memory-efficient",
                 "--impl", "reference"]) == 0  # fmt: skip
    capsys.readouterr()
    jetmoe = tmp_path / "jetmoe"
    jetmoe.mkdir()
    path = _write(jetmoe, JETMOE)
    assert main(["profile", path, "--seq", "64", "--checkpointing"]) == 2
    assert "cannot checkpoint" in one_line_error(capsys)


def test_modelled_builds_are_not_flagged():
    """Families the walker reads (and names that merely contain a mixer's letters:
    Seed-OSS's ``SeedOssMLP`` holds "ssm") stay modelled; in RecurrentGemma's build the
    walker names its recurrent block, not its norms and MLP — the family reader models
    that block (the layer kind ``rglru``), so the spec it reads names nothing."""
    from introspect.adapters import hf_transformers as hft
    from introspect.adapters.hf_config import spec_from_config

    small = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256}  # fmt: skip
    for model_type in ("gpt_neox", "seed_oss", "olmo"):
        assert spec_from_config({"model_type": model_type, **small}).unmodelled == ()
    config = {
        "model_type": "recurrent_gemma",
        **small,
        "lru_width": 64,
        "block_types": ["recurrent", "attention"],
    }
    built = hft.spec_from_build(config, "recurrent_gemma", where="rg", source="rg")
    assert built.unmodelled == ("RecurrentGemmaRecurrentBlock (temporal_block) in 1 of 2 layers",)
    assert spec_from_config(config).unmodelled == ()


def test_not_decoder_only_model_types_are_refused(capsys, tmp_path):
    """T5 has no causal-LM class; BART's decoder as a causal LM cross-attends (no layer
    kind has that), so it is named, not estimated."""
    from introspect.adapters.hf_config import spec_from_config

    assert main(["profile", _write(tmp_path, {"model_type": "t5"}), "--seq", "64"]) == 2
    assert "model_type 't5' has no causal-LM class" in one_line_error(capsys)
    bart = spec_from_config(
        {
            "model_type": "bart",
            "d_model": 64,
            "decoder_layers": 2,
            "encoder_layers": 2,
            "decoder_attention_heads": 4,
            "encoder_attention_heads": 4,
            "vocab_size": 256,
            "decoder_ffn_dim": 128,
            "encoder_ffn_dim": 128,
        }  # fmt: skip
    )
    assert bart.unmodelled == ("BartAttention (encoder_attn: cross-attention) in 2 of 2 layers",)


def test_without_torch_the_answer_says_what_to_install(monkeypatch, tmp_path):
    """Where torch or transformers cannot be imported, the dry run cannot answer: one
    line naming the install."""
    from introspect.adapters.hf_config import spec_from_config

    from introspect import unmodelled
    from introspect.measure import answer
    from introspect.setup import TrainingSetup

    spec = spec_from_config(NEMOTRON_H, source="nemotron-h")
    monkeypatch.setattr(unmodelled, "can_dry_run", lambda: False)
    with pytest.raises(unmodelled.NotModelled, match=r"introspect\[torch,compare\]"):
        answer.dry_run_answer("nemotron-h", spec, TrainingSetup(seq_len=64))


def test_a_per_layer_config_is_named_not_a_traceback(capsys, tmp_path):
    """Dots3's text config keeps heads per layer: reading ``num_attention_heads`` off it
    raises transformers' AmbiguousGlobalPerLayerAttributeError (once a traceback). Its
    build is read instead, its latent attention named (what it adds to DeepSeek-V3's MLA);
    asked for MLX, one line."""
    source = _write(tmp_path, {"model_type": "dots3_note_text"})
    assert main(["profile", source, "--framework", "mlx"]) == 2
    line = one_line_error(capsys)
    assert "not modelled: Dots3NoteTextAttention: MLA with" in line
    assert "--framework torch" in line


def test_the_hand_read_families_sdpa_table_is_their_classes():
    """class_refusal answers the families read by hand from NO_SDPA (importing
    transformers costs seconds); the table must be exactly what their classes say, and
    every one of them must support checkpointing."""
    from introspect.adapters import hf_transformers as hft
    from introspect.adapters.families import ALIASES, REGISTRY

    no_sdpa = {}
    for model_type in [*REGISTRY, *ALIASES]:
        if not hft.knows(model_type) or hft.model_class(model_type) is None:
            continue
        cls = hft.model_class(model_type)
        assert getattr(cls, "supports_gradient_checkpointing", False), model_type
        if not getattr(cls, "_supports_sdpa", False):
            no_sdpa[ALIASES.get(model_type, model_type)] = cls.__name__
    assert no_sdpa == hft.NO_SDPA


def test_a_config_with_json_special_floats_is_read(capsys, tmp_path):
    """transformers writes ``float('inf')`` as ``{"__float__": "Infinity"}``
    (Falcon-H1's ``time_step_limit``): the config still reads (Falcon-H1 is now the
    closed form's, adapters/families/falcon_h1.py, which needs no dt limit)."""
    config = {
        "model_type": "falcon_h1",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "vocab_size": 256,
        "intermediate_size": 128,
        "mamba_d_ssm": 64,
        "mamba_n_heads": 4,
        "mamba_d_head": 16,
        "mamba_d_state": 8,
        "mamba_chunk_size": 16,
        "time_step_limit": [0.0, {"__float__": "Infinity"}],
    }
    assert main(["profile", _write(tmp_path, config), "--seq", "32", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["estimates"] and not out["spec"].get("unmodelled")


def test_a_dry_run_the_class_itself_fails_is_one_line(capsys, tmp_path):
    """DeepSeek-V2's default ``num_experts_per_tok`` is None: its router's ``topk`` raises
    inside the class's forward. The answer says so in one line, not a traceback."""
    config = {
        "model_type": "deepseek_v2",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "vocab_size": 256,
        "intermediate_size": 128,
        "moe_intermediate_size": 32,
        "n_routed_experts": 4,
        "num_experts_per_tok": None,
        "first_k_dense_replace": 1,
        "kv_lora_rank": 16,
        "q_lora_rank": 32,
        "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 8,
        "v_head_dim": 16,
    }
    assert main(["profile", _write(tmp_path, config), "--seq", "32", "--batch", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "dry run of transformers' own class failed" in err and "TypeError" in err
