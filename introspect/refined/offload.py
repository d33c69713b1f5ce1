"""CPU offload and the optimizer in backward: state that leaves the device, and
gradients that never all exist.

* ``offload="optimizer"`` — DeepSpeed ZeRO-Offload (``offload_optimizer: cpu``) and
  FSDP's optimizer on CPU: the FP32 master weights and the optimizer state live in host
  memory and the update runs on the CPU (``DeepSpeedCPUAdam``), so neither they nor the
  update's temporaries are on the device. The gradients still are, until they are
  copied out after backward.
* ``offload="parameters"`` — ZeRO-Infinity's ``offload_param`` / FSDP's
  ``CPUOffload(offload_params=True)``: the weights too live in host memory and are
  brought to the device one unit (a block, or the embedding) at a time, with the next
  one prefetched: two units of working weights on the device. FSDP's CPU offload moves
  each unit's gradients to the host as they are made, so at most one unit's gradients
  are on the device. Implies the optimizer's offload.
* ``optimizer_in_backward`` — torch's ``register_post_accumulate_grad_hook`` pattern
  (torch tutorial "How to save memory by fusing the optimizer step into the backward
  pass"): each parameter is updated and its gradient freed as soon as it is
  accumulated, so at most one parameter's gradient exists and there is no separate
  optimizer phase. Each parameter's own update runs inside backward, at the moment its
  gradient is accumulated, with that one tensor's temporaries
  (:func:`in_backward_step_temporaries`).

Host memory itself is not on the device and is not counted; PCIe traffic is the cost.
"""

from __future__ import annotations

from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec
from introspect.terms import GATHERED_WEIGHTS


def state(spec: ModelSpec, setup: TrainingSetup, terms: dict[str, int], unit: int) -> dict:
    """``terms`` (per-device state) with what offload moves to the host taken out;
    ``unit`` is the bytes of one gathered unit of working weights. Under FSDP2 the
    gathered units are its own moments' (:func:`introspect.refined.sharding.moment_terms`),
    not two units here."""
    if setup.offload == "none":
        return terms
    out = {k: v for k, v in terms.items() if not k.startswith("optimizer/")}
    if setup.offload == "parameters":
        out = {k: v for k, v in out.items() if not k.startswith("weights")}
        if setup.resolved_sharding != "fsdp":
            out[GATHERED_WEIGHTS] = 2 * unit
    return out


def grads_on_host(setup: TrainingSetup) -> bool:
    """FSDP2 with ``CPUOffloadPolicy`` (``--offload parameters``): the sharded parameters
    live on the host, and ``foreach_reduce`` copies each reduce-scattered gradient shard
    to the host as it is made (``_fsdp_collectives.py``: ``new_sharded_grad.to("cpu")``
    when ``fsdp_param.offload_to_cpu``), where the optimizer steps; only the unsharded
    (gathered) parameters, their unsharded gradients and the collectives' buffers are on
    the device."""
    return setup.offload == "parameters" and setup.resolved_sharding == "fsdp"


def caps_grads(setup: TrainingSetup) -> bool:
    """Whether :func:`grads` caps the gradients on the device (else they are as made):
    not under FSDP2's offload, whose moments place each gradient (:func:`grads_on_host`)."""
    if grads_on_host(setup) and not setup.optimizer_in_backward:
        return False
    return setup.optimizer_in_backward or setup.offload == "parameters"


def grads(setup: TrainingSetup, value: int, largest: int, unit: int) -> int:
    """Gradient bytes on the device: at most one parameter's (``largest``) with the
    optimizer in backward, at most one unit's under parameter offload."""
    if setup.optimizer_in_backward:
        value = min(value, largest)
    if setup.offload == "parameters":
        value = min(value, unit)
    return value


def steps_on_device(setup: TrainingSetup) -> bool:
    """Whether an optimizer phase runs on the device after backward."""
    return setup.offload == "none" and not setup.optimizer_in_backward


def in_backward_step_temporaries(setup: TrainingSetup, n: int, value_bytes: int) -> int:
    """Bytes one parameter's own optimizer step allocates for its ``n`` values (the
    optimizer in backward gives each parameter an optimizer of one tensor), at
    ``value_bytes`` per value (Adam's state dtype): torch's single-tensor Adam makes
    ``exp_avg_sq.sqrt()`` and its division by the bias correction, two tensors of ``n``
    (``torch/optim/adam.py`` ``_single_tensor_adam``; no previous parameter's ``denom`` is
    bound, as it is in one optimizer's loop); foreach, one list of one tensor
    (``_multi_tensor_adam``: ``_foreach_sqrt`` after ``_foreach_mul``'s copy, one at a
    time); fused Adam, SGD and 8-bit Adam update in place. Measured: 2·V·d·4 bytes at
    lm_head's step (FP32, untied, single-tensor), V·d·4 with foreach
    (``tests/test_accumulation.py``)."""
    if setup.optimizer not in ("adam", "adamw"):
        return 0
    impl = setup.resolved_optimizer_impl
    return {"single_tensor": 2, "foreach": 1}.get(impl, 0) * n * value_bytes
