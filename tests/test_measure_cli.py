"""`introspect measure`: JSON shape, text output, and one-line errors with exit code 2."""

from __future__ import annotations

import json

import pytest

from introspect.cli import main

pytestmark = pytest.mark.slow


TINY_LLAMA = ["--layers", "2", "--d-emb", "64", "--heads", "4", "--vocab", "512", "--llama"]


def run_json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_torch_json_shape(capsys):
    pytest.importorskip("torch")
    out = run_json(capsys, ["measure", "10M", "--framework", "torch", "--seq", "64", "--json"])
    assert out["spec"]["num_hidden_layers"] == 8
    (row,) = out["rows"]
    m = row["measurement"]
    assert m["backend"] == "torch" and m["device"] == "cpu" and m["framework"] == "torch"
    assert m["setup"]["seq_len"] == 64 and m["setup"]["framework"] == "torch"
    assert m["peak_bytes"] == sum(m["categories"].values())
    assert row["simplified"]["total_bytes"] > 0
    assert row["measured_over_simplified"] == pytest.approx(
        m["peak_bytes"] / row["simplified"]["total_bytes"]
    )
    assert m["step_seconds"] > 0 and m["tokens_per_second"] > 0
    assert m["census"]["activations/logits"] >= 64 * 8192 * 4
    assert row["quadratic_saved_per_layer"] == {str(i): 1 for i in range(8)}
    assert row["largest_gap"]["term"]


def test_mlx_sweep_text(capsys):
    pytest.importorskip("mlx.core")
    argv = [
        "measure",
        "--layers",
        "2",
        "--d-emb",
        "64",
        "--heads",
        "4",
        "--vocab",
        "512",
        "--framework",
        "mlx-compiled",
        "--seq",
        "16",
        "32",
    ]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "mlx_compiled on cpu" in text
    assert "measured GB" in text and "simplified GB" in text and "tokens/s" in text
    assert "active after step" in text


def test_fake_llama_shape_flags(capsys):
    pytest.importorskip("torch")
    argv = [
        "measure",
        "20M",
        "--llama",
        "--framework",
        "torch",
        "--device",
        "fake",
        "--seq",
        "128",
        "--json",
    ]
    (row,) = run_json(capsys, argv)["rows"]
    m = row["measurement"]
    assert m["device"] == "fake" and m["step_seconds"] is None
    assert m["census"]  # the dry run takes its census inside FakeTensorMode


def test_lora_measures_peft_on_the_transformers_class(capsys):
    """``--lora-rank`` on torch steps transformers' class wrapped by peft (not the full
    model under a LoRA label): the adapters are what the optimizer updates, the base
    counts in N, and the refined LoRA estimate lands within 3% of the real step."""
    pytest.importorskip("peft")
    base = [*TINY_LLAMA, "--framework", "torch", "--impl", "transformers", "--seq", "64"]
    full = run_json(capsys, ["measure", *base, "--json"])["rows"][0]["measurement"]
    out = run_json(capsys, ["measure", *base, "--lora-rank", "4", "--json"])
    (row,) = out["rows"]
    m = row["measurement"]
    assert m["implementation"] == "transformers+peft" and m["setup"]["finetune"] == "lora"
    assert m["trainable_params"] == m["n_params"] - full["n_params"] > 0
    assert m["peak_bytes"] < full["peak_bytes"]
    assert row["measured_over_refined"] == pytest.approx(1, abs=0.03)
    assert main(["measure", *base, "--lora-rank", "4"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert f"{m['n_params']:,} parameters, {m['trainable_params']:,} trained" in head


@pytest.mark.parametrize(
    "argv, message",
    [
        (["measure", "10M", "--framework", "jax"], "--framework"),
        (
            ["measure", "10M", "--framework", "mlx", "--device", "cuda"],
            "--device cuda is for torch",
        ),
        (["measure", "--layers", "2", "--framework", "torch"], "missing --d-emb"),
        (["measure", "10M", "--framework", "torch", "--impl", "mlx-lm"], "MLX model"),
        (
            ["measure", "10M", "--framework", "torch", "--impl", "transformers", "--seq", "8"],
            "not a Llama",
        ),
        (
            ["measure", *TINY_LLAMA, "--framework", "torch", "--lora-rank", "4"],
            "add --impl transformers",
        ),
        (
            ["measure", "10M", "--framework", "torch", "--devices", "2", "--lora-rank", "4"],
            "drop --devices",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2(capsys, argv, message):
    assert exit_code(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_cuda_without_cuda_is_one_line(capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert main(["measure", "10M", "--framework", "torch", "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no CUDA device" in err


def test_refuses_a_real_run_larger_than_memory(capsys):
    pytest.importorskip("torch")
    assert main(["measure", "70B", "--framework", "torch", "--seq", "64"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--device fake" in err


def exit_code(argv):
    """main's return code, or argparse's SystemExit code for a usage error."""
    try:
        return main(argv)
    except SystemExit as exit:
        return exit.code


def test_a_config_torch_rejects_is_one_line(capsys, tmp_path):
    """torch's own assertion while transformers builds the class (a padding index
    beyond the vocabulary) is one line naming the file, not a traceback."""
    pytest.importorskip("transformers")
    config = tmp_path / "config.json"
    config.write_text(
        '{"model_type": "phi3", "hidden_size": 64, "num_hidden_layers": 1, '
        '"num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100, '
        '"pad_token_id": 32000}'
    )
    argv = ["measure", str(config), "--framework", "torch", "--impl", "transformers"]
    assert exit_code([*argv, "--seq", "16"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(config) in err and "Padding_idx" in err
