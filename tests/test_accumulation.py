"""Gradient accumulation (``--grad-accum M``): M micro-batches, then one optimizer step.

Real CPU steps of transformers' own classes (tied and untied Qwen2 at width 64), of our
reference model and of a peft LoRA model, each with M forward/backward passes before
the update as the HF Trainer runs them (``introspect/measure/torch_step.py``
``TorchStep``); their FakeTensorMode dry runs byte for byte, and the closed form
(``introspect/refined/accumulation.py``) within the 1% the other measured-step tests use.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from introspect.adapters.hf_config import spec_from_config  # noqa: E402
from specs import BASE, VARIANTS  # noqa: E402

from introspect import applies  # noqa: E402
from introspect.measure import hf_models  # noqa: E402
from introspect.measure.fake import dry_run  # noqa: E402
from introspect.measure.torch_step import measure_reference  # noqa: E402
from introspect.refined import execution_estimate  # noqa: E402
from introspect.refined.causes import tracker_phase  # noqa: E402
from introspect.setup import TrainingSetup  # noqa: E402

pytestmark = pytest.mark.slow

QWEN2 = dict(BASE, model_type="qwen2", intermediate_size=128, num_key_value_heads=2)


def hf_step(raw: dict, device: str, **fields):
    spec = spec_from_config(raw, source="qwen2-small")
    fields = {"seq_len": 64, "attention": "eager", **fields}
    s = TrainingSetup(batch_size=2, implementation="transformers", device="cpu", **fields)
    return spec, s, hf_models.measure(raw, "qwen2-small", spec, s, device=device, census=False)[0]


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize(
    "fields",
    [dict(), dict(loop="logits"), dict(precision="amp"), dict(precision="bf16")],
    ids=["labels", "logits", "amp", "bf16"],
)
def test_grad_accum_real_step_equals_dry_run_and_closed_form(tied, fields):
    """``--grad-accum 4`` on transformers' Qwen2: the real CPU step and its dry run to the
    byte, the closed form within 1% in the tracker's phase; and the peak above the same
    step without accumulation by at least the gradients the later micro-batches find
    already made (the first micro-batch's forward end has none)."""
    raw = dict(QWEN2, tie_word_embeddings=tied)
    spec, s, real = hf_step(raw, "cpu", grad_accum=4, **fields)
    _, _, fake = hf_step(raw, "fake", grad_accum=4, **fields)
    assert (fake.peak_bytes, fake.categories, fake.peak_phase) == (
        real.peak_bytes,
        real.categories,
        real.peak_phase,
    )
    est = execution_estimate(spec, s)
    assert est.total == pytest.approx(real.peak_bytes, rel=0.01)
    assert tracker_phase(est.meta["peak_phase"]) == real.peak_phase
    # Every trainable gradient is alive at the later micro-batches' peak.
    grads = sum(
        p.numel() * p.element_size()
        for p in hf_models.build(
            raw, "qwen2-small", attention="eager", dtype=_dtype(s)
        ).parameters()
    )
    assert real.categories["gradients"] == grads
    _, _, single = hf_step(raw, "cpu", **fields)
    assert single.categories["gradients"] < grads


def _dtype(setup: TrainingSetup):
    return torch.bfloat16 if setup.precision == "bf16" else torch.float32


def test_every_micro_batch_after_the_first_is_the_same():
    """M = 2 and M = 4 hold the same peak (micro-batches 2..M are alike), and the closed
    form says so too; M = 1 holds less."""
    raw = dict(QWEN2, tie_word_embeddings=False)
    peaks = {m: hf_step(raw, "fake", grad_accum=m)[2].peak_bytes for m in (1, 2, 4)}
    assert peaks[2] == peaks[4] > peaks[1]
    spec = spec_from_config(raw, source="qwen2-small")
    est = {
        m: execution_estimate(
            spec, TrainingSetup(batch_size=2, seq_len=64, device="cpu", grad_accum=m)
        ).total
        for m in (1, 2, 4)
    }
    assert est[2] == est[4] > est[1]


@pytest.mark.parametrize("attention", ["eager", "memory_efficient"])
@pytest.mark.parametrize("name", ["standard", "rmsnorm-gqa-gated"])
def test_reference_model_accumulates(name, attention):
    """Our reference model (logits loop) with ``--grad-accum 3``: real == dry run, and the
    closed form within 1%."""
    spec = VARIANTS[name]
    s = TrainingSetup(
        batch_size=2, seq_len=64, implementation="reference", device="cpu",
        attention=attention, grad_accum=3,
    )  # fmt: skip
    real, fake = measure_reference(spec, s, "cpu"), dry_run(spec, s)
    assert (fake.peak_bytes, fake.categories) == (real.peak_bytes, real.categories)
    assert execution_estimate(spec, s).total == pytest.approx(real.peak_bytes, rel=0.01)


@pytest.mark.parametrize("kw", [dict(), dict(train_embeddings=True)], ids=["adapters", "emb"])
def test_lora_accumulates_the_adapters_gradients(kw):
    """A real peft LoRA step of transformers' Llama with ``--grad-accum 2``: the closed
    form within 1%; only the adapters' (and, with --train-embeddings, the head's and
    embedding's) gradients are alive across micro-batches."""
    pytest.importorskip("peft")
    from test_lora import LLAMA, setup

    from introspect.measure import peft_step

    s = setup(grad_accum=2, **kw)
    m = peft_step.measure(LLAMA, s)
    assert execution_estimate(LLAMA, s).total == pytest.approx(m.peak_bytes, rel=0.01)
    single = peft_step.measure(LLAMA, setup(**kw))
    assert m.peak_bytes > single.peak_bytes


@pytest.mark.parametrize(
    "fields, flag",
    [
        (dict(optimizer_in_backward=True), "--optimizer-in-backward"),
        (dict(devices=2, sharding="ddp"), "sharding"),
        (dict(devices=2, sharding="fsdp", zero_stage=3), "sharding"),
        (dict(precision="mixed"), "--precision mixed"),
        (dict(offload="optimizer"), "--offload optimizer"),
        (dict(optimizer="none"), "--optimizer none"),
        (dict(framework="mlx", optimizer="sgd"), "--framework torch"),
    ],
)
def test_unmodelled_pairs_are_refused(fields, flag):
    """What the closed form does not model is one line naming --grad-accum and why."""
    with pytest.raises(applies.NotApplicable, match="--grad-accum 2") as err:
        TrainingSetup(grad_accum=2, **fields)
    assert flag in str(err.value) and "\n" not in str(err.value)


# ---- the optimizer in backward -----------------------------------------------------------


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize(
    "fields",
    [
        dict(seq_len=4),  # the head's and the embedding's own updates hold the peak
        dict(seq_len=4, precision="amp"),
        dict(seq_len=4, optimizer_impl="foreach"),
        dict(seq_len=4, precision="bf16", loop="logits"),
        dict(seq_len=64),  # the end of forward holds it
    ],
    ids=["T4", "T4-amp", "T4-foreach", "T4-bf16-logits", "T64"],
)
def test_optimizer_in_backward_real_equals_dry_run_and_closed_form(tied, fields):
    """``--optimizer-in-backward`` on transformers' Qwen2: one optimizer per parameter in
    its post-accumulate-grad hook (``introspect/measure/in_backward.py``). Real CPU step
    == dry run to the byte; the closed form within 1%; no gradient is left at the peak
    beyond the one tensor being stepped; and at T=4, where the update dominates, the peak
    is below the same step's with the optimizer after backward."""
    raw = dict(QWEN2, tie_word_embeddings=tied)
    fields = dict(fields)
    seq = fields.pop("seq_len")
    spec = spec_from_config(raw, source="qwen2-small")
    s = TrainingSetup(
        batch_size=2, seq_len=seq, implementation="transformers", device="cpu",
        optimizer_in_backward=True, **fields,
    )  # fmt: skip
    real, fake = (
        hf_models.measure(raw, "qwen2-small", spec, s, device=d, census=False)[0]
        for d in ("cpu", "fake")
    )
    assert (fake.peak_bytes, fake.categories) == (real.peak_bytes, real.categories)
    assert execution_estimate(spec, s).total == pytest.approx(real.peak_bytes, rel=0.01)
    V, d = spec.vocab_size, spec.hidden_size
    assert real.categories["gradients"] <= V * d * 4
    if seq == 4:
        plain = s.replace(optimizer_in_backward=False)
        after = hf_models.measure(raw, "qwen2-small", spec, plain, device="fake", census=False)
        assert real.peak_bytes < after[0].peak_bytes


@pytest.mark.parametrize("optimizer", ["adam", "sgd_momentum"])
def test_optimizer_in_backward_updates_as_the_step_after_backward(optimizer):
    """The hooks run the update: from the same weights, one step with the optimizer in
    backward leaves the weights one ordinary step leaves, and the same optimizer state."""
    from introspect.measure import torch_step

    spec = VARIANTS["rmsnorm-gqa-gated"]
    after = {}
    for in_backward in (False, True):
        s = TrainingSetup(
            seq_len=16, implementation="reference", device="cpu", optimizer=optimizer,
            optimizer_in_backward=in_backward,
        )  # fmt: skip
        model = torch_step.build_reference(spec, s, "cpu")
        step = torch_step.make_step(model, s, device="cpu")
        x, y = torch_step.batch(spec.vocab_size, s, "cpu")
        step(x, y)
        step(x, y)
        assert all(p.grad is None for p in model.parameters()) == in_backward
        states = [step.optimizer.state[p] for p in model.parameters()]
        after[in_backward] = ([p.detach().clone() for p in model.parameters()], states)
    for a, b in zip(after[False][0], after[True][0], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    for a, b in zip(after[False][1], after[True][1], strict=True):
        assert a.keys() == b.keys()


@pytest.mark.parametrize("name", ["standard", "rmsnorm-gqa-gated"])
def test_reference_model_with_the_optimizer_in_backward(name):
    """Our reference model (untied or tied head, logits loop) with the optimizer in
    backward at T=4: real == dry run, the closed form within 1%."""
    spec = VARIANTS[name]
    s = TrainingSetup(
        batch_size=2, seq_len=4, implementation="reference", device="cpu",
        optimizer_in_backward=True,
    )  # fmt: skip
    real, fake = measure_reference(spec, s, "cpu"), dry_run(spec, s)
    assert (fake.peak_bytes, fake.categories) == (real.peak_bytes, real.categories)
    assert execution_estimate(spec, s).total == pytest.approx(real.peak_bytes, rel=0.01)


def test_optimizer_in_backward_with_mixed_precision_is_one_line():
    """The measured step does not write the master copy's update inside the hook."""
    from introspect.errors import IntrospectError
    from introspect.measure import torch_step

    spec = VARIANTS["standard"]
    s = TrainingSetup(seq_len=8, implementation="reference", precision="mixed",
                      optimizer_in_backward=True, device="cpu")  # fmt: skip
    with pytest.raises(IntrospectError, match="--optimizer-in-backward with --precision mixed"):
        torch_step.measure_reference(spec, s, "cpu")


# ---- activation offload ------------------------------------------------------------------


def _saved_bytes(raw: dict, s: TrainingSetup) -> int:
    """Bytes of every tensor autograd saves in one forward and loss of the model, each
    save counted (what save_on_cpu packs), by hooks of this test's own."""
    from introspect.measure import torch_step

    model = hf_models.build(raw, "qwen2-small", attention="eager", dtype=torch.float32)
    x, y = torch_step.batch(raw["vocab_size"], s, "cpu")
    total = []

    def pack(t):
        total.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        torch_step.labels_loss(model, x, y)[0].backward()
    return sum(total)


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("seq_len", [64, 256])
def test_offloaded_activations_real_equals_dry_run(tied, seq_len):
    """``--offload-activations`` (torch's save_on_cpu(pin_memory=True)): the real CPU
    step and its dry run to the byte, device and host; the host holds every saved tensor
    (each save a copy, counted by hooks of this test's own); the device peak is below the
    same step's without offload; the closed form is approximate (its docstring gives the
    measured band) and must stay within it."""
    raw = dict(QWEN2, tie_word_embeddings=tied)
    spec, s, real = hf_step(raw, "cpu", seq_len=seq_len, offload_activations=True)
    _, _, fake = hf_step(raw, "fake", seq_len=seq_len, offload_activations=True)
    assert (fake.peak_bytes, fake.categories, fake.host_peak_bytes) == (
        real.peak_bytes,
        real.categories,
        real.host_peak_bytes,
    )
    assert real.host_peak_bytes == _saved_bytes(raw, s)
    _, _, kept = hf_step(raw, "fake", seq_len=seq_len)
    assert real.peak_bytes < kept.peak_bytes and kept.host_peak_bytes is None
    assert execution_estimate(spec, s).total == pytest.approx(real.peak_bytes, rel=0.2)


@pytest.mark.parametrize("fields", [dict(), dict(train_embeddings=True)], ids=["lora", "emb"])
def test_lora_grad_accum_dry_run_is_the_real_step(fields):
    """peft's LoRA over transformers' Gemma (untied) with ``--grad-accum 3``: the dry run
    (peft inside FakeTensorMode) is the real CPU step to the byte, and the closed form is
    within 1%."""
    pytest.importorskip("peft")
    from small_configs import FAMILIES

    family = "gemma, untied, bias"
    raw = FAMILIES[family]
    spec = spec_from_config(raw, source=family)
    s = TrainingSetup(
        batch_size=2, seq_len=32, implementation="transformers", finetune="lora",
        lora_rank=8, grad_accum=3, device="cpu", **fields,
    )  # fmt: skip
    real, fake = (
        hf_models.measure(raw, family, spec, s, device=d, census=False)[0] for d in ("cpu", "fake")
    )
    assert (fake.peak_bytes, fake.categories) == (real.peak_bytes, real.categories)
    assert execution_estimate(spec, s).total == pytest.approx(real.peak_bytes, rel=0.01)


def test_seed_estimate_is_the_later_micro_batch_and_says_so(capsys):
    """The seed's sum already holds every gradient beside every activation (micro-batch
    2..M's end of forward): ``estimate --grad-accum 4`` prints the same figures and one
    note saying so."""
    from introspect.cli import main

    shape = ["estimate", "--layers", "2", "--d-emb", "64", "--heads", "4", "--vocab", "100"]
    shape += ["--seq", "8"]
    outputs = []
    for extra in ([], ["--grad-accum", "4"]):
        assert main([*shape, *extra]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[1].startswith(outputs[0].rstrip("\n"))
    assert outputs[1].count("note: --grad-accum 4") == 1
