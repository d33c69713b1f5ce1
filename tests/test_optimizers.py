"""Adafactor and bitsandbytes' paged AdamW (introspect/refined/optimizers.py): the closed
form against real optimizers' state and real (CPU) and dry-run (FakeTensorMode) steps.

Adafactor is transformers' ``Adafactor`` as the HF Trainer builds it
(``transformers/trainer_optimizer.py`` ``_get_adafactor``); the steps are the measured
step's own (``introspect.measure.torch_step``: the reference model and transformers'
classes)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from specs import VARIANTS  # noqa: E402

from introspect import refined  # noqa: E402
from introspect.errors import IntrospectError  # noqa: E402
from introspect.refined import optimizers, sharding  # noqa: E402
from introspect.setup import TrainingSetup  # noqa: E402

SPEC = VARIANTS["rmsnorm-gqa-gated"]
REF = dict(framework="torch", device="cpu", implementation="reference", loop="logits")


def _setup(**kw) -> TrainingSetup:
    return TrainingSetup(**{"batch_size": 1, "seq_len": 16, "optimizer": "adafactor", **REF, **kw})


def _adafactor(params):
    from introspect.measure.torch_step import _adafactor

    return _adafactor(params)


def _state_by_key(optimizer) -> dict[str, int]:
    out: dict[str, int] = {}
    for state in optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                out[key] = out.get(key, 0) + value.untyped_storage().nbytes()
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_adafactor_state_is_what_a_real_step_makes(dtype):
    """One real step of transformers' Adafactor over the reference model: its row/column
    vectors, 1-D second moments and RMS scalars are the closed form's, byte for byte
    (FP32 whatever the parameter dtype: the state follows ``grad.float()``)."""
    from introspect.measure.torch_model import build
    from introspect.measure.torch_step import batch, train_step

    torch.manual_seed(0)
    model = build(SPEC, dtype=dtype)
    opt = _adafactor(model.parameters())
    x, y = batch(SPEC.vocab_size, _setup(), "cpu")
    train_step(model, opt, x, y)
    real = _state_by_key(opt)
    est = optimizers.adafactor_state(sharding.parameter_tensors(SPEC))
    assert "exp_avg" not in real  # beta1=None: no first moment
    assert real["exp_avg_sq_row"] + real["exp_avg_sq_col"] == est[optimizers.ADAFACTOR_FACTORED]
    assert real["exp_avg_sq"] == est[optimizers.ADAFACTOR_SECOND_MOMENT]
    assert real["RMS"] == est[optimizers.ADAFACTOR_RMS]
    assert len(list(model.parameters())) == len(sharding.parameter_tensors(SPEC))


def test_factored_state_is_rows_plus_columns_not_the_matrix():
    """The mechanism: a (R, C) matrix keeps R + C values, a 3-D (E, R, C) one E·R + E·C,
    a vector its own size."""
    est = optimizers.adafactor_state([(300, 7), (5, 11, 13), (9,)])
    assert est[optimizers.ADAFACTOR_FACTORED] == 4 * (300 + 7 + 5 * 11 + 5 * 13)
    assert est[optimizers.ADAFACTOR_SECOND_MOMENT] == 4 * 9
    assert est[optimizers.ADAFACTOR_RMS] == 4 * 3


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16", "mixed", "amp"])
def test_adafactor_real_and_dry_run_steps_are_byte_identical_and_match_the_closed_form(
    precision,
):
    """A short sequence, so the optimizer step holds the peak: the real CPU step and the
    FakeTensorMode dry run agree to the byte; the closed form's state and update
    temporaries are the tracker's exactly, its total within 0.1% (the inputs, targets
    and loss are not modelled)."""
    from introspect.measure.fake import dry_run
    from introspect.measure.torch_step import measure_reference

    setup = _setup(precision=precision)
    real = measure_reference(SPEC, setup)
    fake = dry_run(SPEC, setup)
    assert real.peak_bytes == fake.peak_bytes
    assert real.categories == fake.categories
    assert real.peak_phase == "optimizer"
    est = refined.estimate(SPEC, setup)
    assert est.peak_phase == "optimizer_step"
    terms = est.execution.terms
    state = sum(terms[k] for k in terms if k.startswith("optimizer/adafactor"))
    master = terms.get("optimizer/master_weights", 0)
    assert real.categories["optimizer_state"] == state + master
    assert real.categories["temporary"] == terms["optimizer/temporaries"]
    assert est.total == pytest.approx(real.peak_bytes, rel=1e-3)


@pytest.mark.slow
def test_adafactor_long_sequence_peak_in_backward_matches():
    """At T=128 the peak moves into backward; the closed form follows it within 0.5%."""
    from introspect.measure.torch_step import measure_reference

    setup = _setup(seq_len=128)
    real = measure_reference(SPEC, setup)
    est = refined.estimate(SPEC, setup)
    assert real.peak_phase == "backward"
    assert est.total == pytest.approx(real.peak_bytes, rel=5e-3)


@pytest.mark.slow
def test_adafactor_on_transformers_class_real_equals_dry_run():
    """transformers' own Qwen2 class, labels loop: the CPU step and the dry run are
    byte-identical with Adafactor, and the closed form's temporaries are the tracker's."""
    from hf_steps import CONFIGS, spec_for

    from introspect.measure import hf_models

    raw = CONFIGS["qwen2"]
    spec = spec_for(raw)
    setup = TrainingSetup(
        batch_size=1, seq_len=8, optimizer="adafactor", framework="torch", device="cpu"
    )
    real, _ = hf_models.measure(raw, "test", spec, setup, device="cpu", census=False)
    fake, _ = hf_models.measure(raw, "test", spec, setup, device="fake", census=False)
    assert real.peak_bytes == fake.peak_bytes
    assert real.categories == fake.categories
    est = refined.estimate(spec, setup)
    if real.peak_phase == "optimizer":
        assert real.categories["temporary"] == est.execution.terms["optimizer/temporaries"]
    assert est.total == pytest.approx(real.peak_bytes, rel=0.01)


def test_adafactor_temporaries_follow_the_loop():
    """The largest moment is a matrix after a large one (prev + 2n), or its
    ``_approx_sq_grad`` product (2n + rows + cols); pure BF16 adds the FP32 copies of the
    parameter and its gradient (2n)."""
    shapes = [(1000,), (10, 10)]
    assert optimizers.adafactor_temporaries(shapes, False) == 4 * 2 * 1000
    shapes = [(2, 2), (40, 50)]
    assert optimizers.adafactor_temporaries(shapes, False) == 4 * (2 * 2000 + 40 + 50)
    shapes = [(2000,), (40, 50)]
    assert optimizers.adafactor_temporaries(shapes, False) == 4 * (2000 + 2 * 2000)
    assert optimizers.adafactor_temporaries(shapes, True) == 4 * (2000 + 4 * 2000)


def test_adafactor_state_is_far_below_adam():
    """Qwen2.5-0.5B-sized state: Adafactor's factored vectors are under 1% of Adam's m+v."""
    from specs import QWEN25_05B

    adam = refined.estimate(QWEN25_05B, TrainingSetup(seq_len=64)).execution.terms
    ada = refined.estimate(QWEN25_05B, TrainingSetup(seq_len=64, optimizer="adafactor"))
    state = sum(v for k, v in ada.execution.terms.items() if k.startswith("optimizer/ada"))
    assert state < 0.01 * (adam["optimizer/adam_m"] + adam["optimizer/adam_v"])
    assert "optimizer/adam_m" not in ada.execution.terms


# ---- paged AdamW ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["paged_adamw_8bit", "paged_adamw_32bit"])
def test_paged_state_split_follows_bitsandbytes_thresholds(name):
    """bitsandbytes' ``get_state_buffer`` pages the state of parameters of ≥ 1e5 values;
    ``PagedAdamW8bit`` keeps 32-bit state under 4096 values. A real bitsandbytes step on
    CPU (which falls back to unpaged buffers) makes the same m and v bytes per
    parameter as the closed form's split (absmax and quantization maps aside)."""
    bnb = pytest.importorskip("bitsandbytes")
    import warnings

    sizes = [(400, 300), (256, 8), (300,), (120, 100)]
    params = [torch.nn.Parameter(torch.randn(s)) for s in sizes]
    cls = {"paged_adamw_8bit": bnb.optim.PagedAdamW8bit, "paged_adamw_32bit": bnb.optim.PagedAdamW}
    opt = cls[name](params, lr=1e-3)
    for p in params:
        p.grad = torch.randn_like(p)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Paged optimizers are not supported on CPU"
        opt.step()
    paged = small = 0
    for p in params:
        st = opt.state[p]
        value = st["state1"].nbytes + st["state2"].nbytes
        if p.numel() >= optimizers.PAGED_FROM:
            paged += value
        else:
            small += value
    est = optimizers.paged_state([math.prod(s) for s in sizes], name)
    assert est[optimizers.PAGED_STATE] == paged
    assert est.get("optimizer/adam_m", 0) + est.get("optimizer/adam_v", 0) == small


def test_paged_state_is_its_own_term_with_the_allocator_note(capsys):
    from introspect.cli import main

    code = main(["profile", "Qwen/Qwen2.5-0.5B", "--optimizer", "paged-adamw-32bit"])
    out = capsys.readouterr().out
    assert code in (0, None)
    assert "optimizer/paged_state" in out
    assert "torch's allocator" in out and "does not see it" in out
    est = refined.estimate(
        VARIANTS["rmsnorm-gqa-gated"], TrainingSetup(optimizer="paged_adamw_32bit", seq_len=16)
    )
    adam = refined.estimate(VARIANTS["rmsnorm-gqa-gated"], TrainingSetup(seq_len=16))
    t = est.execution.terms
    paged_and_small = t[optimizers.PAGED_STATE] + t.get("optimizer/adam_m", 0) * 2
    assert paged_and_small == 2 * adam.execution.terms["optimizer/adam_m"]


@pytest.mark.parametrize("device", ["cpu", "fake"])
def test_paged_measure_is_refused_with_one_line(device, capsys):
    from introspect.cli import main

    code = main(
        ["measure", "Qwen/Qwen2.5-0.5B", "--impl", "transformers", "--device", device]
        + ["--optimizer", "paged-adamw-8bit", "--seq", "8"]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "cudaMallocManaged" in err[0]


@pytest.mark.parametrize(
    "kw, needle",
    [
        (dict(optimizer="adafactor", framework="mlx"), "MLX"),
        (dict(optimizer="paged_adamw_8bit", offload="optimizer"), "CPU Adam"),
        (dict(optimizer="adafactor", devices=2, sharding="fsdp"), "sharded"),
        (dict(optimizer="adafactor", optimizer_impl="fused"), "one update"),
    ],
)
def test_rules_refuse_what_is_not_modelled(kw, needle):
    with pytest.raises((IntrospectError, ValueError), match=needle):
        TrainingSetup(**kw)


@pytest.mark.slow
@pytest.mark.parametrize(
    "targets", [("all-linear",), ("q_proj", "v_proj", "lm_head", "embed_tokens")], ids=str
)
def test_adafactor_over_lora_adapters_is_the_real_state(targets):
    """A real peft step with Adafactor: its state over the adapters (each a matrix:
    rows + columns; the head's and embedding's too) is the closed form's to the byte,
    and the peak within 0.5%."""
    pytest.importorskip("peft")
    from test_lora import LLAMA, setup

    from introspect.measure import peft_step

    s = setup(optimizer="adafactor", lora_targets=targets).replace(seq_len=8)
    measured = peft_step.measure(LLAMA, s)
    est = refined.estimate(LLAMA, s)
    state = sum(v for k, v in est.execution.terms.items() if k.startswith("optimizer/adafactor"))
    assert measured.categories["optimizer_state"] == state
    assert est.total == pytest.approx(measured.peak_bytes, rel=5e-3)
