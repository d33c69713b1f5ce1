"""--adapter-dtype: peft's ``autocast_adapter_dtype`` (``peft/tuners/tuners_utils.py``).
True (peft's default) upcasts 16-bit adapters to FP32; False leaves them at the base
layer's dtype (``_move_adapter_to_device_of_base_layer``), as LitGPT and torchtune keep
them. Real peft steps on CPU (transformers' Llama, BF16 base) against the closed form."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from test_lora import LLAMA, setup  # noqa: E402

from introspect import refined  # noqa: E402
from introspect.applies import NotApplicable  # noqa: E402
from introspect.refined import lora  # noqa: E402

BF16 = dict(precision="bf16", weights_dtype="bf16", activation_dtype="bf16")


def test_peft_keeps_bf16_adapters_without_autocast():
    """The mechanism: with --adapter-dtype bf16 every trainable parameter peft makes is
    BF16 (and FP32 by default), and the closed form counts 2 (4) bytes per value."""
    from introspect.measure import peft_step

    for dtype, want in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        s = setup(**BF16, adapter_dtype=dtype)
        model = peft_step.build(LLAMA, s)
        trained = [p for p in model.parameters() if p.requires_grad]
        assert trained and {p.dtype for p in trained} == {want}
        n = sum(p.numel() for p in trained)
        est = refined.estimate(LLAMA, s).execution.terms
        assert est["weights/lora_adapters"] == n * want.itemsize
        assert lora.adapter_parameters(LLAMA, s) == n


@pytest.mark.slow
@pytest.mark.parametrize("kw", [dict(), dict(lora_dropout=0.1), dict(seq_len=16)])
def test_bf16_adapter_step_peak(kw):
    """Real peft steps with BF16 adapters: the closed form within 0.5% of the measured
    peak, and the saving against FP32 adapters (state, gradients, the adapters' FP32
    input copies) within 2% of the measured saving."""
    from introspect.measure import peft_step

    bf16 = setup(**BF16, adapter_dtype="bf16").replace(**kw)
    fp32 = bf16.replace(adapter_dtype="fp32")
    m_bf16, m_fp32 = peft_step.measure(LLAMA, bf16), peft_step.measure(LLAMA, fp32)
    e_bf16, e_fp32 = refined.estimate(LLAMA, bf16).total, refined.estimate(LLAMA, fp32).total
    assert e_bf16 == pytest.approx(m_bf16.peak_bytes, rel=5e-3)
    saved = m_fp32.peak_bytes - m_bf16.peak_bytes
    assert saved > 0
    assert e_fp32 - e_bf16 == pytest.approx(saved, rel=0.02)
    # Adam's m and v follow the adapters' dtype.
    assert m_bf16.categories["optimizer_state"] < 0.51 * m_fp32.categories["optimizer_state"]


@pytest.mark.parametrize(
    "kw, needle",
    [
        (dict(adapter_dtype="bf16"), "--finetune lora"),
        (dict(finetune="lora", adapter_dtype="bf16", precision="amp"), "--precision bf16"),
        (dict(finetune="lora", adapter_dtype="bf16", precision="mixed"), "master"),
        (dict(finetune="lora", adapter_dtype="bf16", framework="mlx", precision="bf16"), "MLX"),
    ],
)
def test_adapter_dtype_rules(kw, needle):
    from introspect.setup import TrainingSetup

    with pytest.raises(NotApplicable, match=needle):
        TrainingSetup(**kw)
