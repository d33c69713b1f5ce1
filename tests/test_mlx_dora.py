"""mlx-lm's DoRA, LoRA dropout and gradient accumulation on MLX
(:mod:`introspect.refined.mlx_dora`): the state is what mlx-lm's modules hold, to the
byte; a real step (mlx-lm's ``DoRALinear``/``LoRALinear`` from ``linear_to_lora_layers``,
and mlx-lm's own ``train`` loop for accumulation) lands within ±5% of the estimate; what
mlx-lm refuses or the derivation does not cover is one line, exit 2. Tiny shapes
(d = 128, L ≤ 3, B·T = 128): MLX's CPU matmul is slow here. Every real step runs in its
own process, as in ``tests/test_mlx_quantized.py``: in this one MLX's peak would count
arrays earlier tests still hold."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

LLAMA = dict(
    model_type="llama", hidden_size=128, num_hidden_layers=3, num_attention_heads=4,
    num_key_value_heads=2, intermediate_size=352, vocab_size=2048,
    tie_word_embeddings=True, rms_norm_eps=1e-5, max_position_embeddings=256,
)  # fmt: skip


def setup_for(finetune: str = "dora", dtype: str = "fp32", framework: str = "mlx", **kw):
    from introspect.setup import TrainingSetup

    return TrainingSetup(
        framework=framework, implementation="mlx_lm", device="cpu", finetune=finetune,
        lora_rank=8, batch_size=2, seq_len=64, precision="bf16" if dtype == "bf16" else "fp32",
        **kw,
    )  # fmt: skip


def spec():
    from introspect.adapters.hf_config import spec_from_config

    return spec_from_config(LLAMA, use_transformers=False)


def cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "introspect", *argv], capture_output=True, text=True, timeout=120
    )


def step_peak(finetune: str, dtype: str, framework: str, dropout: float, accum: int) -> int:
    """In a fresh process: one real mlx-lm step's peak (accumulation: mlx-lm's ``train``)."""
    from introspect.measure import mlx_lm_models
    from introspect.measure.mlx_lm_trainer import measure_trainer

    setup = setup_for(finetune, dtype, framework, lora_dropout=dropout, grad_accum=accum)
    if accum > 1:
        return measure_trainer(LLAMA, "test", spec(), setup)[0]
    m = mlx_lm_models.measure(
        LLAMA, "test", spec(), setup, compiled=framework == "mlx_compiled", repeats=2
    )
    return m.peak_bytes


def real_peak(*args) -> int:
    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
        f"import test_mlx_dora as t; print(t.step_peak(*{args!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    return int(out.stdout.split()[-1])


def measured_ratio(finetune, dtype, framework, dropout=0.0, accum=1) -> tuple[float, int, int]:
    from introspect.refined import estimate

    peak = real_peak(finetune, dtype, framework, dropout, accum)
    setup = setup_for(finetune, dtype, framework, lora_dropout=dropout, grad_accum=accum)
    est = estimate(spec(), setup).total
    return est / peak, est, peak


def test_dora_state_is_the_modules_magnitudes():
    """weights/dora_magnitude is the bytes of every ``m`` mlx-lm's ``DoRALinear`` holds,
    and the adapters are LoRA's: the trainable tree of the converted model, to the byte."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    from introspect.measure import mlx_lm_models
    from introspect.refined import mlx

    model = mlx_lm_models.build(LLAMA, "test", mx.float32)
    mlx_lm_models.to_lora(model, setup_for())
    trainable = dict(tree_flatten(model.trainable_parameters()))
    m = sum(v.nbytes for k, v in trainable.items() if k.endswith(".m"))
    adapters = sum(v.nbytes for k, v in trainable.items() if not k.endswith(".m"))
    assert all(v.dtype == mx.float32 for v in trainable.values())
    terms = mlx.state_terms(spec(), setup_for())
    assert terms["weights/dora_magnitude"] == m
    assert terms["weights/lora_adapters"] == adapters
    assert terms["optimizer/adam_m"] == m + adapters
    graph = mlx.extra_terms(spec(), setup_for())
    assert graph["grads/mlx/dora_magnitude"] == m


@pytest.mark.parametrize(
    "dtype,framework", [("fp32", "mlx"), ("bf16", "mlx"), ("fp32", "mlx_compiled")]
)
def test_dora_step_within_5_percent_of_a_real_mlx_lm_step(dtype, framework):
    ratio, est, peak = measured_ratio("dora", dtype, framework)
    assert abs(ratio - 1) <= 0.05, (est, peak)


@pytest.mark.parametrize(
    "finetune,dtype,framework",
    [("lora", "fp32", "mlx"), ("lora", "bf16", "mlx_compiled"), ("dora", "fp32", "mlx")],
)
def test_dropout_step_within_5_percent_of_a_real_mlx_lm_step(finetune, dtype, framework):
    ratio, est, peak = measured_ratio(finetune, dtype, framework, dropout=0.1)
    assert abs(ratio - 1) <= 0.05, (est, peak)


@pytest.mark.parametrize("finetune", ["lora", "full"])
def test_accumulating_trainer_within_5_percent(finetune):
    """mlx-lm's own ``train`` with ``grad_accumulation_steps`` 2 (always compiled)."""
    ratio, est, peak = measured_ratio(finetune, "fp32", "mlx_compiled", accum=2)
    assert abs(ratio - 1) <= 0.05, (est, peak)


def test_accumulation_adds_the_summed_gradient_tree():
    from introspect.refined import estimate
    from introspect.refined.lora import adapter_parameters
    from introspect.refined.mlx_dora import magnitude_rows

    s = setup_for("dora", framework="mlx_compiled")
    one = estimate(spec(), s).execution
    two = estimate(spec(), s.replace(grad_accum=4)).execution
    trained = adapter_parameters(spec(), s) + magnitude_rows(spec(), s)
    assert two["grads/mlx/accumulated"] == 4 * trained
    assert two.total - one.total == 4 * trained


@pytest.mark.parametrize(
    "argv,needle",
    [
        (("--framework", "torch"), "modelled on --framework mlx only"),
        (("--framework", "mlx", "--checkpointing"), "--finetune dora with --checkpointing"),
        (("--framework", "mlx", "--base-quant", "affine4"), "--base-quant affine4"),
        (("--framework", "mlx", "--lora-targets", "q_proj"), "--lora-targets q_proj"),
    ],
)
def test_dora_refusals_are_one_line(tmp_path, argv, needle):
    import json

    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA))
    out = cli("profile", str(path), "--finetune", "dora", *argv)
    assert out.returncode == 2, out.stdout
    assert needle in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_dora_on_experts_names_mlx_lms_refusal():
    out = cli("profile", "Qwen/Qwen3-30B-A3B", "--framework", "mlx", "--finetune", "dora")
    assert out.returncode == 2
    assert "SwitchLinear" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_dora_on_an_underived_block_is_not_modelled():
    out = cli("profile", "Qwen/Qwen3-0.6B", "--framework", "mlx", "--finetune", "dora")
    assert out.returncode == 2
    assert "not modelled for mlx-lm's qwen3 block" in out.stderr


def test_mlx_lm_config_with_dora_dropout_and_accumulation(tmp_path):
    """An ``mlx_lm.lora`` YAML's ``fine_tune_type: dora``, ``lora_parameters.dropout`` and
    ``grad_accumulation_steps`` become the setup, and each prices its own term."""
    import json

    config = tmp_path / "lora.yaml"
    config.write_text(
        "fine_tune_type: dora\ngrad_accumulation_steps: 2\nbatch_size: 2\n"
        "max_seq_length: 64\nnum_layers: -1\n"
        "lora_parameters:\n  rank: 8\n  dropout: 0.05\n  scale: 20.0\n"
    )
    model = tmp_path / "config.json"
    model.write_text(json.dumps(LLAMA))
    out = cli("profile", str(model), "--config", str(config), "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    setup = got["config"]["setup"]
    assert setup["finetune"]["value"] == "dora" and setup["grad_accum"]["value"] == 2
    text = json.dumps(got["estimates"]["refined"])
    for term in ("dora_unscaled", "lora_dropout_mask", "grads/mlx/accumulated"):
        assert term in text
