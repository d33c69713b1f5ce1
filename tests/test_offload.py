"""CPU offload and the optimizer in backward in the refined estimate."""

from __future__ import annotations

from specs import QWEN25_05B

from introspect import refined
from introspect.refined import execution
from introspect.setup import TrainingSetup

SPEC = QWEN25_05B.replace(num_parameters=494_032_768)


def test_optimizer_offload_takes_the_state_off_the_device():
    setup = TrainingSetup(seq_len=1024, precision="mixed", activation_dtype="bf16")
    on = execution.state_terms(SPEC, setup)
    off = execution.state_terms(SPEC, setup.replace(offload="optimizer"))
    assert any(k.startswith("optimizer/") for k in on)
    assert not any(k.startswith("optimizer/") for k in off)
    assert off["weights"] == on["weights"]
    step = execution.optimizer_step(SPEC, setup.replace(offload="optimizer"))
    assert step["optimizer/temporaries"] == 0


def test_parameter_offload_keeps_two_units():
    setup = TrainingSetup(seq_len=1024, offload="parameters")
    terms = execution.state_terms(SPEC, setup)
    unit = max(execution.layer_parameters(SPEC), SPEC.vocab_size * SPEC.hidden_size)
    assert terms == {"weights/gathered": 2 * unit * 4}
    assert execution.grad_bytes(SPEC, setup, SPEC.n_params) <= unit * 4


def test_optimizer_in_backward_has_no_step_phase():
    setup = TrainingSetup(seq_len=512, optimizer_in_backward=True)
    est = refined.estimate(SPEC, setup)
    assert est.peak_phase != "optimizer_step" and "optimizer_step" not in est.phases
    largest = execution.largest_tensor(SPEC) * 4
    assert execution.grad_bytes(SPEC, setup, SPEC.n_params) == largest
    assert est.total < refined.estimate(SPEC, setup.replace(optimizer_in_backward=False)).total
