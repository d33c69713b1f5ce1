"""The optimizer's state made directly equals what a warm-up step makes, and the measured
peak with it is byte-identical to the warm-up form's."""

from __future__ import annotations

import contextlib

import pytest

torch = pytest.importorskip("torch")

from specs import VARIANTS  # noqa: E402

from introspect.measure import torch_step  # noqa: E402
from introspect.measure.live_tracker import LiveStorageTracker  # noqa: E402
from introspect.measure.optimizer_state import prime_optimizer  # noqa: E402
from introspect.setup import TrainingSetup  # noqa: E402

pytestmark = pytest.mark.slow

SPEC = VARIANTS["rmsnorm-gqa-gated"]


def _layout(optimizer) -> list[dict]:
    """Every state tensor's shape, dtype, device and strides, per parameter in order."""
    out = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            state = optimizer.state.get(p, {})
            out.append(
                {
                    k: (tuple(v.shape), v.dtype, v.device, v.stride())
                    for k, v in state.items()
                    if isinstance(v, torch.Tensor)
                }
            )
    return out


OPTIMIZERS = {
    "adam": lambda ps: torch.optim.Adam(ps, lr=1e-3),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-3),
    "adam-amsgrad": lambda ps: torch.optim.Adam(ps, lr=1e-3, amsgrad=True),
    "adam-fused": lambda ps: torch.optim.Adam(ps, lr=1e-3, fused=True),
    "adamw-foreach": lambda ps: torch.optim.AdamW(ps, lr=1e-3, foreach=True),
    "sgd": lambda ps: torch.optim.SGD(ps, lr=1e-3),
    "sgd-momentum": lambda ps: torch.optim.SGD(ps, lr=1e-3, momentum=0.9),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_primed_state_has_the_warm_up_steps_layout(name, dtype):
    setup = TrainingSetup(seq_len=8, framework="torch")

    def model_and_optimizer():
        torch.manual_seed(0)
        from introspect.measure.torch_model import build

        model = build(SPEC, dtype=dtype)
        model.layers[0].mlp.up_proj.weight.requires_grad_(False)  # frozen: no state
        return model, OPTIMIZERS[name](model.parameters())

    warm_model, warm = model_and_optimizer()
    x, y = torch_step.batch(SPEC.vocab_size, setup, "cpu")
    torch_step.train_step(warm_model, warm, x, y)
    model, primed = model_and_optimizer()
    assert prime_optimizer(model, primed)
    assert _layout(primed) == _layout(warm)
    if name.startswith("sgd") and name != "sgd-momentum":
        assert not primed.state
    else:
        assert primed.state


def test_unknown_optimizer_is_left_to_a_warm_up():
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.RMSprop(model.parameters())
    assert prime_optimizer(model, opt) is False
    assert not opt.state


def _tracked(setup, *, fake: bool, warm_up: bool):
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode(allow_non_fake_inputs=True) if fake else contextlib.nullcontext()
    with mode:
        model = torch_step.build_reference(SPEC, setup, "cpu")
        opt = torch_step.make_optimizer(model, setup)
        x, y = torch_step.batch(SPEC.vocab_size, setup, "cpu")
        if warm_up:
            torch_step.train_step(model, opt, x, y)
        else:
            assert prime_optimizer(model, opt)
        tracker = LiveStorageTracker(model, opt)
        with tracker:
            torch_step.train_step(model, opt, x, y)
    return tracker.peak_bytes, tracker.peak_kinds, tracker.peak_phase


@pytest.mark.parametrize("fake", [False, True], ids=["cpu", "fake"])
@pytest.mark.parametrize("optimizer", ["adam", "adamw", "sgd_momentum"])
def test_measured_peak_is_byte_identical_to_the_warm_up_form(optimizer, fake):
    setup = TrainingSetup(seq_len=32, batch_size=2, framework="torch", optimizer=optimizer)
    warm = _tracked(setup, fake=fake, warm_up=True)
    primed = _tracked(setup, fake=fake, warm_up=False)
    assert primed[0] == warm[0]
    assert primed[2] == warm[2]
    # The peak is in the step itself, not the state it started from.
    assert primed[1]["Activation"] + primed[1]["Temp"] > 0
    # The warm-up form starts with the previous step's gradients alive, the primed one
    # with none; the previous gradients are freed before the peak, so the same is alive.
    assert primed[1] == warm[1]


def test_measure_step_peak_matches_the_warm_up_form():
    setup = TrainingSetup(seq_len=32, framework="torch")
    model = torch_step.build_reference(SPEC, setup, "cpu")
    m = torch_step.measure_step(model, setup, vocab=SPEC.vocab_size)
    peak, kinds, phase = _tracked(setup, fake=False, warm_up=True)
    assert m.peak_bytes == peak
    assert sum(m.categories.values()) == peak
    assert m.peak_phase == phase
