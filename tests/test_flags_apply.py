"""Every flag means something or is refused (issue 25): a flag that does not apply to the
rest of the setup is one line on stderr naming it, exit code 2 — never a changed number,
never silence. Real CLI runs (``python -m introspect``) on bundled models."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from introspect import applies, fit
from introspect.errors import IntrospectError
from introspect.setup import TrainingSetup

QWEN = "Qwen/Qwen2.5-0.5B"  # 14 heads, 2 K/V heads, 24 layers, FFN 4864


def cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "introspect", *argv], capture_output=True, text=True, timeout=120
    )


def refused(*argv: str) -> str:
    """The one stderr line of a refused command (exit 2, no traceback, nothing on stdout)."""
    out = cli(*argv)
    assert out.returncode == 2, (argv, out.stdout[-300:], out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert out.stdout == ""
    return lines[0]


def test_mlx_offload_is_refused_by_fit_in_one_line():
    """The issue's case: MLX has no host offload, so it may not lower the MLX estimate."""
    line = refused("fit", QWEN, "--framework", "mlx", "--device", "metal", "--offload", "optimizer")
    assert "--offload optimizer is torch-only" in line and "unified memory" in line
    with_budget = refused(
        "fit", QWEN, "--framework", "mlx", "--gpu", "m2-16gb", "--seq", "1024", "--offload",
        "optimizer",
    )  # fmt: skip
    assert "--offload optimizer" in with_budget


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--framework", "mlx", "--optimizer", "adam8bit"], "--optimizer adam8bit"),
        (["--framework", "mlx", "--optimizer-in-backward"], "--optimizer-in-backward"),
        (["--framework", "mlx-compiled", "--optimizer-impl", "fused"], "--optimizer-impl fused"),
        (["--framework", "mlx", "--precision", "amp"], "--precision amp"),
        (["--framework", "mlx", "--cross-entropy", "chunked"], "--cross-entropy fused"),
        (["--framework", "mlx", "--devices", "2", "--ddp"], "--ddp"),
        (["--framework", "mlx", "--devices", "4"], "--devices 4"),
        (["--micro-batches", "4"], "--micro-batches 4"),
        (["--no-reshard"], "--no-reshard"),
        (["--devices", "4", "--zero", "3", "--no-reshard"], "--no-reshard"),
        (["--bucket-view"], "--bucket-view"),
        (["--devices", "2", "--fsdp", "--bucket-view"], "--bucket-view"),
        (["--lora-dropout", "0.1"], "--lora-dropout 0.1"),
        (["--train-embeddings"], "--train-embeddings"),
        (["--base-quant", "int8"], "--base-quant int8"),
        (["--finetune", "lora", "--no-double-quant"], "--no-double-quant"),
        (["--impl", "reference", "--loop", "labels"], "--loop labels"),
        (["--optimizer", "none", "--offload", "optimizer"], "--offload optimizer"),
        (["--optimizer", "none", "--optimizer-in-backward"], "--optimizer-in-backward"),
        (["--freeze-tower"], "--freeze-tower"),
        (["--units", "bytes"], "--units"),
    ],
)
def test_a_flag_that_does_not_apply_is_named(flags, named):
    line = refused("profile", QWEN, *flags)
    assert named in line, line


def test_contradictions_name_both_flags():
    line = refused("profile", QWEN, "--precision", "amp", "--weights-dtype", "bf16")
    assert "--precision amp" in line and "--weights-dtype bf16" in line
    line = refused("profile", QWEN, "--precision", "mixed", "--weights-dtype", "fp32")
    assert "--precision mixed" in line and "--weights-dtype fp32" in line
    line = refused("profile", QWEN, "--precision", "bf16", "--weights-dtype", "int8")
    assert "--precision bf16" in line and "--weights-dtype int8" in line


def test_amp_with_fp32_weights_is_what_amp_means():
    """--precision amp is autocast over FP32 weights: saying so is accepted, and prices
    the same step as --precision amp alone."""

    def total(*flags):
        out = cli("profile", QWEN, "--json", "--precision", "amp", *flags)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)["estimates"]["refined"]["total_bytes"]

    assert total("--weights-dtype", "fp32") == total()
    out = cli("fit", QWEN, "--budget", "80GB", "--precision", "amp", "--weights-dtype", "fp32")
    assert out.returncode == 0, out.stderr


def test_a_flag_that_applies_still_prices():
    """The rules refuse only what does not apply: the same flags in their own setups run."""
    for flags in (
        ["--devices", "4", "--pp", "2", "--micro-batches", "4"],
        ["--devices", "4", "--fsdp", "--no-reshard"],
        ["--devices", "4", "--zero", "1", "--bucket-view"],
        ["--finetune", "lora", "--lora-dropout", "0.1", "--train-embeddings"],
        ["--finetune", "qlora", "--no-double-quant"],
        ["--framework", "mlx", "--optimizer", "sgd"],
    ):
        out = cli("profile", QWEN, "--json", *flags)
        assert out.returncode == 0, (flags, out.stderr)


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--tp", "3"], ["--tp 3", "14 attention heads"]),
        (["--tp", "7"], ["--tp 7", "2 K/V heads"]),
        (["--tp", "1000"], ["--tp 1000"]),
        (["--pp", "100"], ["--pp 100", "24 layers"]),
    ],
)
def test_impossible_parallel_degrees_are_refused_before_pricing(flags, words):
    for command in (["profile", QWEN], ["fit", QWEN, "--budget", "80GB"]):
        line = refused(*command, *flags)
        assert all(w in line for w in words), line


def test_a_parallel_degree_that_divides_the_model_prices():
    out = cli("profile", QWEN, "--tp", "2", "--pp", "24", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["estimates"]["refined"]["total_bytes"] > 0


def test_table_rows_refuse_a_degree_their_model_cannot_take():
    """table prices each source: a --tp that splits one model's heads but not another's
    is an error row for that model, and the command exits 2 naming it."""
    out = cli("table", QWEN, "Qwen/Qwen2.5-7B", "--tp", "4", "--csv")  # 14 and 28 heads
    assert out.returncode == 2
    assert "--tp 4" in out.stderr and "14 attention heads" in out.stderr
    rows = out.stdout.strip().splitlines()[1:]
    assert any(r.startswith("Qwen/Qwen2.5-7B,") and "error" not in r for r in rows)


@pytest.mark.parametrize(
    "argv",
    [
        ["profile", QWEN, "--exact", "--tp", "2"],
        ["profile", QWEN, "--exact", "--offload", "optimizer"],
        ["measure", "10M", "--device", "fake", "--seq", "32", "--optimizer-in-backward"],
        ["measure", "10M", "--devices", "2", "--ddp", "--seq", "32", "--pp", "2"],
    ],
)
def test_a_step_is_never_set_beside_an_estimate_of_another_setup(argv):
    flag = next(a for a in argv if a in ("--tp", "--offload", "--optimizer-in-backward", "--pp"))
    line = refused(*argv)
    assert flag in line and "two different setups" in line


def test_table_reported_refuses_the_setup_flags_it_would_drop():
    line = refused("table", "--reported", "qwen-7b", "--seq", "4096", "--checkpointing")
    assert "--seq" in line and "--checkpointing" in line
    assert cli("table", "--reported", "qwen-7b").returncode == 0


def test_units_bytes_is_tables():
    out = cli("table", QWEN, "--units", "bytes")
    assert out.returncode == 0, out.stderr
    assert "16N bytes" in out.stdout
    for command in (["fit", QWEN, "--budget", "80GB"], ["estimate", "--layers", "2",
                    "--d-emb", "64", "--heads", "4", "--vocab", "100", "--seq", "8"]):  # fmt: skip
        assert "--units" in refused(*command, "--units", "bytes")


def test_zero_3_says_what_it_means_once():
    out = cli("profile", QWEN, "--devices", "4", "--zero", "3")
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("--zero 3 is DeepSpeed ZeRO-3") == 1
    data = json.loads(cli("fit", QWEN, "--budget", "80GB", "--devices", "4", "--zero", "3",
                          "--json").stdout)  # fmt: skip
    assert any("DeepSpeed" in n for n in data["notes"])
    plain = cli("profile", QWEN, "--devices", "4", "--fsdp")
    assert "--zero 3 is" not in plain.stdout


def test_messages_name_flags_not_fields():
    for kw, flag in (
        (dict(lora_dropout=1.5, finetune="lora"), "--lora-dropout"),
        (dict(base_quant="int8"), "--base-quant"),
        (dict(framework="mlx", implementation="transformers"), "--impl"),
        (dict(micro_batches=0), "--micro-batches"),
        (dict(seq_len=0), "--seq"),
    ):
        with pytest.raises(ValueError) as err:
            TrainingSetup(**kw)
        assert flag in str(err.value)
        assert not any(
            f in str(err.value) for f in ("lora_dropout", "base_quant", "implementation")
        )


def test_fit_never_proposes_a_change_the_flags_refuse():
    """fit's candidate changes, applied to an MLX setup, are each a setup the rules
    accept; the torch-only ones are left out, and every change is one the rules allow."""
    mlx = TrainingSetup(framework="mlx", seq_len=1024)
    keys = {c.key for c in fit.changes(8, 16, "mlx")}
    torch_only = {"offload_optimizer", "adam8bit", "optimizer_in_backward", "zero3"}
    assert keys.isdisjoint(torch_only | {"cross_entropy", "fused_optimizer"})
    assert {"checkpointing", "lora", "bf16"} <= keys
    for c in fit._changes(8, 16):
        changed = c.apply(mlx)
        if changed is not None:
            assert applies.refusal(changed) is None, c.key
    torch_keys = {c.key for c in fit.changes(8, 16, "torch")}
    assert {"offload_optimizer", "adam8bit", "zero3"} <= torch_keys


def test_fit_mlx_lists_no_torch_only_change():
    out = cli("fit", QWEN, "--framework", "mlx", "--gpu", "m2-16gb", "--seq", "1024", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    labels = [r["change"] for r in data["changes"]]
    labels += [r["change"] for r in data["combinations"]]
    assert labels and not any(
        w in label for label in labels for w in ("offload", "8-bit", "in backward", "ZeRO")
    )


@pytest.mark.parametrize(
    "moe, what",
    [
        (dict(moe_intermediate_size=97, shared_expert_intermediate_size=128), "expert"),
        (dict(moe_intermediate_size=96, shared_expert_intermediate_size=129), "shared-expert"),
        (dict(moe_intermediate_size=96, shared_expert_intermediate_size=128), None),
    ],
)
def test_check_parallel_reads_the_experts_widths(moe, what):
    """An MoE model: each expert's (and the shared expert's) width is split by --tp too."""
    from introspect.adapters.hf_config import spec_from_config

    raw = dict(
        model_type="qwen2_moe", hidden_size=128, num_hidden_layers=2, intermediate_size=352,
        num_attention_heads=4, num_key_value_heads=2, vocab_size=1000, num_experts=4,
        num_experts_per_tok=2, **moe,
    )  # fmt: skip
    spec = spec_from_config(raw)
    setup = TrainingSetup(tensor_parallel=2)
    if what is None:
        applies.check_parallel(spec, setup)
        return
    with pytest.raises(IntrospectError, match=f"--tp 2: .* {what}"):
        applies.check_parallel(spec, setup)
