"""mlx-lm's LoRA over an MLX affine-quantized base (``--base-quant affine4``/``affine8``,
or a config.json with mlx-lm's ``quantization`` block): the frozen base's bytes are what
``nn.quantize`` makes of a real mlx-lm model, to the byte; a real LoRA step over it lands
within ±5% of the estimate; a bad block or flag is one line. Tiny shapes (d = 128, L ≤ 4,
T = 64): MLX's CPU matmul is slow here."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

LLAMA = dict(
    model_type="llama", hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, intermediate_size=352, vocab_size=1024,
    tie_word_embeddings=True, rms_norm_eps=1e-5, max_position_embeddings=256,
)  # fmt: skip
QWEN2_UNTIED = dict(
    model_type="qwen2", hidden_size=128, num_hidden_layers=3, num_attention_heads=4,
    num_key_value_heads=2, intermediate_size=256, vocab_size=1024,
    tie_word_embeddings=False, rms_norm_eps=1e-6, max_position_embeddings=256,
)  # fmt: skip


def cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "introspect", *argv], capture_output=True, text=True, timeout=120
    )


def setup_for(bits: int, group: int, dtype: str = "fp32", **kw):
    from introspect.setup import TrainingSetup

    return TrainingSetup(
        framework="mlx", device="cpu", finetune="lora", lora_rank=8, batch_size=1,
        seq_len=64, precision="bf16" if dtype == "bf16" else "fp32", activation_dtype=dtype,
        weights_dtype=dtype, base_quant=f"affine{bits}", group_size=group, **kw,
    )  # fmt: skip


def quantized_model(raw: dict, bits: int, group: int, dtype: str):
    """mlx-lm's class quantized by mlx-lm's own ``mlx_lm.utils.quantize_model``."""
    import mlx.core as mx
    from mlx_lm.utils import quantize_model

    from introspect.measure import mlx_lm_models

    model = mlx_lm_models.build(raw, "test", mx.bfloat16 if dtype == "bf16" else mx.float32)
    quantize_model(model, {}, group, bits)
    return model


@pytest.mark.parametrize(
    "raw,bits,group,dtype",
    [
        (LLAMA, 4, 64, "fp32"),  # down_proj's d_in 352 is no multiple of 64: stays float
        (LLAMA, 8, 32, "bf16"),
        (QWEN2_UNTIED, 4, 128, "bf16"),  # q/k/v biases float; the untied head quantized
        (QWEN2_UNTIED, 8, 64, "fp32"),
    ],
)
def test_base_bytes_are_nn_quantize_bytes(raw, bits, group, dtype):
    from introspect.adapters.hf_config import spec_from_config
    from mlx.utils import tree_flatten

    from introspect.refined import mlx

    model = quantized_model(raw, bits, group, dtype)
    real = sum(v.nbytes for _, v in tree_flatten(model.parameters()))
    spec = spec_from_config(raw, use_transformers=False)
    s = 2 if dtype == "bf16" else 4
    assert mlx.affine_base_bytes(spec, setup_for(bits, group, dtype), s) == real
    state = mlx.state_terms(spec, setup_for(bits, group, dtype))
    assert state["weights"] == real


def test_affine_tensor_bytes_is_mx_quantize():
    import mlx.core as mx

    from introspect.refined.mlx import affine_tensor_bytes

    w = mx.zeros((96, 256), dtype=mx.bfloat16)
    for bits in (4, 8):
        for group in (32, 64, 128):
            q, scales, biases = mx.quantize(w, group_size=group, bits=bits)
            got = q.nbytes + scales.nbytes + biases.nbytes
            assert affine_tensor_bytes(256, 96, bits, group, 2) == got


def real_step_peak() -> int:
    """``mx.get_peak_memory()`` of one real mlx-lm LoRA step over ``nn.quantize``'d Llama."""
    from introspect.adapters.hf_config import spec_from_config

    from introspect.measure import mlx_lm_models, mlx_step

    setup = setup_for(4, 64)
    spec = spec_from_config(LLAMA, use_transformers=False)
    model = quantized_model(LLAMA, 4, 64, "fp32")
    mlx_lm_models.to_lora(model, setup.replace(base_quant="auto"))
    m = mlx_step.measure_step(
        model, setup, vocab=spec.vocab_size, compiled=False, implementation="mlx_lm",
        loss=mlx_lm_models.trainer_loss, repeats=2,
        inputs=mlx_lm_models.trainer_batch(spec.vocab_size, setup), random_state=True,
    )  # fmt: skip
    return m.peak_bytes


def test_real_lora_step_over_a_4bit_base_within_5_percent():
    """One real mlx-lm LoRA step over ``nn.quantize``'d Llama (benchmarks/mlx_quantized.py
    runs more): the peak within ±5% of the estimate, and well under the dense-base one.
    The step runs in its own process, as ``introspect measure`` does: in this one, MLX's
    peak would count arrays earlier tests still hold, and its random state would stay
    behind for later tests' baselines."""
    from pathlib import Path

    from introspect.adapters.hf_config import spec_from_config

    from introspect.refined import estimate

    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
        "import test_mlx_quantized as t; print(t.real_step_peak())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    peak = int(out.stdout.split()[-1])
    setup = setup_for(4, 64)
    spec = spec_from_config(LLAMA, use_transformers=False)
    est = estimate(spec, setup).total
    assert abs(est / peak - 1) <= 0.05, (est, peak)
    assert estimate(spec, setup.replace(base_quant="auto")).total > est


def test_config_quantization_block_prices_the_base(tmp_path):
    raw = dict(LLAMA, quantization={"group_size": 64, "bits": 4})
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    out = cli("profile", str(path), "--framework", "mlx", "--finetune", "lora", "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)["config"]["setup"]
    assert (
        got["base_quant"]["value"] == "affine4"
        and "quantization bits 4" in (got["base_quant"]["origin"])
    )
    assert got["group_size"]["value"] == 64


@pytest.mark.parametrize(
    "block,names",
    [
        ({"group_size": 48, "bits": 4}, "group_size"),
        ({"group_size": 64, "bits": 7}, "bits"),
        ({"group_size": 64, "bits": 3}, "3-bit is not modelled"),
    ],
)
def test_bad_quantization_block_is_one_line(tmp_path, block, names):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(LLAMA, quantization=block)))
    out = cli("profile", str(path), "--framework", "mlx", "--finetune", "lora")
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and names in lines[0] and "Traceback" not in out.stderr, lines


@pytest.mark.parametrize(
    "argv,names",
    [
        (["--finetune", "lora", "--base-quant", "affine4"], "--base-quant affine4"),
        (["--framework", "mlx", "--base-quant", "affine4"], "--base-quant affine4"),
        (["--framework", "mlx", "--finetune", "qlora"], "--framework mlx"),
        (["--framework", "mlx", "--finetune", "lora", "--group-size", "32"], "--group-size 32"),
    ],
)
def test_bad_flags_are_one_line(argv, names):
    out = cli("profile", "Qwen/Qwen2.5-0.5B", *argv)
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and names in lines[0] and "Traceback" not in out.stderr, lines


def test_bundled_qwen3_8b_4bit_fit_answers_mlx_lm_lora_knobs():
    """The bundled (reconstructed) mlx-community/Qwen3-8B-4bit: its exact count, its base
    priced as affine 4-bit from its quantization block, and fit's knob table on an 8 GB
    Mac — the largest max_seq_length grows as num_layers falls, with grad_checkpoint on
    too (the checkpointed LoRA counts over the 4-bit base: "not derived" and no length
    before, torch's moments before that, issue 23), and checkpointing lets each
    num_layers take a longer sequence."""
    from introspect.adapters import resolve

    from introspect.refined.affine import affine_tensor_bytes

    model = resolve("mlx-community/Qwen3-8B-4bit")
    assert model.spec.n_params == 8_190_735_360
    out = cli(
        "fit", "mlx-community/Qwen3-8B-4bit", "--framework", "mlx", "--finetune", "lora",
        "--precision", "bf16", "--gpu", "m2-8gb", "--json",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["setup"]["base_quant"] == "affine4" and data["setup"]["group_size"] == 64
    knobs = data["mlx_lora_knobs"]
    assert knobs["rank"] == 8 and knobs["batches"] == [1, 4]
    seq = {(r["num_layers"], r["grad_checkpoint"]): r["largest_seq"]["1"] for r in knobs["rows"]}
    assert set(seq) == {(k, c) for k in (16, 8, 4) for c in (False, True)}
    assert seq[(16, False)] < seq[(8, False)] < seq[(4, False)]
    assert not any("not_derived" in r for r in knobs["rows"])
    assert seq[(16, True)] < seq[(8, True)] < seq[(4, True)]
    assert all(seq[(k, True)] > seq[(k, False)] for k in (16, 8, 4))
    # the frozen base alone: 4.6 GB of an 8 GB Mac (a dense BF16 base would be 16.4 GB)
    d, f, V = 4096, 12288, 151936
    linears = 36 * (
        2 * affine_tensor_bytes(d, d, 4, 64, 2)
        + 2 * affine_tensor_bytes(d, 1024, 4, 64, 2)
        + 2 * affine_tensor_bytes(d, f, 4, 64, 2)
        + affine_tensor_bytes(f, d, 4, 64, 2)
    )
    assert 4.5e9 < linears + 2 * affine_tensor_bytes(d, V, 4, 64, 2) < 4.8e9


def test_sizes_lora_on_a_4bit_base_beside_full():
    """``introspect sizes --framework mlx --finetune lora --base-quant affine4``: the seed's
    table with a LoRA column beside full fine-tuning; LoRA over a 4-bit base is below both
    the full refined figure and LoRA over the FP32 base, row by row."""
    from introspect.commands import sizes

    full = sizes.rows([512], 1, "mlx", "lora", "auto")
    four = sizes.rows([512], 1, "mlx", "lora", "affine4")
    for a, b in zip(full, four, strict=True):
        assert b["lora_total_bytes"] < a["lora_total_bytes"] < a["refined_total_bytes"]
    out = cli("sizes", "--framework", "mlx", "--finetune", "lora", "--base-quant", "affine4")
    assert out.returncode == 0, out.stderr
    assert "LoRA 4-bit GB" in out.stdout and "mlx_lm.lora's defaults" in out.stdout
    for argv, names in (
        (["--finetune", "lora"], "--framework"),
        (["--framework", "torch", "--finetune", "lora", "--base-quant", "affine4"], "affine4"),
    ):
        bad = cli("sizes", *argv)
        assert bad.returncode == 2 and bad.stdout == "" and names in bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1
