"""`introspect measure --trainer hf|trl`: the real transformers Trainer and TRL SFTTrainer
on tiny configs (CPU, two optimizer steps), their peak over trainer.train() beside the
estimate, and the one-line refusals."""

from __future__ import annotations

import json

import pytest

from introspect.cli import main

pytestmark = pytest.mark.slow

pytest.importorskip("transformers")

TINY_LLAMA = ["--layers", "2", "--d-emb", "64", "--heads", "4", "--vocab", "256", "--llama"]
TINY_QWEN2 = {
    "model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256,
    "max_position_embeddings": 128, "tie_word_embeddings": True,
}  # fmt: skip


def run_json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_trainer_peak_holds_weights_grads_and_state_and_writes_nothing_here(
    capsys, tmp_path, monkeypatch
):
    """The HF Trainer's default setup (fused AdamW, FP32): at its second optimizer step
    the weights, every gradient and both Adam moments are alive at once, so the peak
    over trainer.train() is at least 16 bytes per parameter; the JSON names the trainer,
    carries the estimate and the resolved config; the run's output_dir is temporary."""
    monkeypatch.chdir(tmp_path)
    argv = ["measure", *TINY_LLAMA, "--seq", "16", "--batch", "2", "--trainer", "hf", "--json"]
    out = run_json(capsys, argv)
    (row,) = out["rows"]
    m = row["measurement"]
    n = m["n_params"]
    assert m["trainable_params"] == n
    assert m["peak_bytes"] >= 16 * n
    assert m["peak_bytes"] == sum(m["categories"].values())
    assert m["categories"]["optimizer_state"] >= 8 * n
    assert m["setup"]["trainer"] == "hf" and m["setup"]["optimizer_impl"] == "fused"
    assert m["setup"]["batch_size"] == 2  # the flag over the Trainer's default of 8
    assert row["refined"]["total_bytes"] > 0 and row["measured_over_refined"] > 0
    assert out["config"]["setup"]["trainer"]["value"] == "hf"
    assert any("Trainer: 2 optimizer steps" in note for note in m["notes"])
    assert m["versions"]["transformers"]
    assert list(tmp_path.iterdir()) == []


def test_accumulation_keeps_the_first_micro_batch_gradients(tmp_path):
    """gradient_accumulation_steps 2: the first micro-batch's gradients are alive through
    the second's forward and backward. Without accumulation the backward peak holds only
    the gradients made by then; with it all of them (4 bytes per trainable parameter,
    FP32) are alive at that moment, so the peak rises by at least the rest."""
    from introspect.adapters.hf_config import spec_from_config

    from introspect.measure import trainer_run
    from introspect.setup import TrainingSetup

    spec = spec_from_config(TINY_QWEN2, source="tiny qwen2")
    base = dict(
        batch_size=2, seq_len=16, optimizer="sgd", implementation="transformers",
        loop="labels", device="cpu", trainer="hf",
    )  # fmt: skip
    peaks = {}
    for m in (1, 2):
        setup = TrainingSetup(**base, grad_accum=m)
        run = trainer_run.measure(TINY_QWEN2, "tiny qwen2", spec, setup)
        peaks[m] = (run.peak_bytes, run.trainable_params, run.categories)
    trainable, made_by_then = peaks[1][1], peaks[1][2]["gradients"]
    assert made_by_then < 4 * trainable
    assert peaks[2][0] - peaks[1][0] >= 4 * trainable - made_by_then
    assert peaks[2][2]["gradients"] >= 4 * trainable


def test_sft_trainer_runs_offline_and_names_itself(capsys, tmp_path):
    """SFTTrainer over a pre-tokenized dataset with a tokenizer built here: its fused LM
    head is the setup's loss, the header names TRL and its version."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY_QWEN2))
    argv = ["measure", str(cfg), "--seq", "16", "--batch", "1", "--trainer", "trl"]
    argv += ["--optimizer", "sgd", "--json"]
    out = run_json(capsys, argv)
    (row,) = out["rows"]
    m = row["measurement"]
    assert m["setup"]["trainer"] == "trl" and m["setup"]["cross_entropy"] == "trl"
    assert m["setup"]["activation_checkpointing"] is True  # TRL's own default
    assert m["peak_bytes"] >= 8 * m["n_params"]  # weights and gradients at the update
    assert any(note.startswith("stepped by TRL ") for note in m["notes"])
    assert row["measured_over_refined"] > 0
    assert main(argv[:-1]) == 0
    text = capsys.readouterr().out
    assert "SFTTrainer (trainer.train())" in text


def test_lora_under_the_trainer_trains_the_adapters_only(capsys):
    argv = ["measure", *TINY_LLAMA, "--seq", "16", "--trainer", "hf", "--finetune", "lora"]
    argv += ["--lora-rank", "4", "--json"]
    m = run_json(capsys, argv)["rows"][0]["measurement"]
    assert 0 < m["trainable_params"] < m["n_params"] // 4
    assert m["implementation"] == "transformers+peft"
    # the frozen base, and the adapters' weights, gradients and two Adam moments
    assert m["peak_bytes"] >= 4 * m["n_params"] + 16 * m["trainable_params"]


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--framework", "mlx"], "--trainer hf and --framework mlx"),
        (["--device", "fake"], "tensor values"),
        (["--no-census"], "--no-census"),
        (["--devices", "2", "--ddp"], "one process"),
        (["--optimizer-impl", "foreach"], "--optimizer-impl foreach"),
        (["--precision", "mixed"], "--precision mixed"),
    ],
)
def test_refusals_are_one_line(capsys, flags, words):
    argv = ["measure", *TINY_LLAMA, "--seq", "16", "--trainer", "hf", *flags]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_the_dry_run_refusal_is_the_one_the_module_documents():
    from introspect import applies
    from introspect.measure import trainer_run

    assert trainer_run.FAKE_REFUSAL == applies.TRAINER_NO_DRY_RUN
