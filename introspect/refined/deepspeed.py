"""DeepSpeed ZeRO-2's own buffers, on any number of ranks — one included.

``--zero 2`` and ``--zero 3`` are DeepSpeed's stages (``--zero 1`` is torch's
``ZeroRedundancyOptimizer``, ``--fsdp`` FSDP2's ``fully_shard``). DeepSpeed runs on one
GPU too (Qwen's fine-tuning scripts launch ``deepspeed`` with ``ds_config_zero2.json`` on
one device): with one rank nothing is partitioned (÷1), but what DeepSpeed allocates
is real, and the sharding closed form (:mod:`introspect.refined.sharding`: weights, the
FP32 partition's master and Adam state ÷D, the reduce and all-gather buckets) holds with
D = 1. This module adds what ``deepspeed/runtime/zero/stage_1_and_2.py``
(``DeepSpeedZeroOptimizer``, stage 2) allocates beyond it, full training only:

* **the FP32 partition is a clone** (``__init__``: ``weights_partition =
  parallel_partitioned_bit16_groups[i][partition_id].detach().clone().to(device,
  master_weights_and_grads_dtype)``), also when the model is FP32 (``--precision fp32``
  or ``amp``): 4 bytes per local parameter as ``optimizer/master_weights``
  (:func:`master_bytes`). Stage 3 reuses an FP32 partition (``stage3.py``
  ``_create_fp32_partitions``: ``fp32_partitioned_groups_flat.append(fp16_partitioned_
  groups_flat[i])`` when the dtypes agree), so only stage 2 keeps the copy.
* **the step's gradient partition** (``step``): ``flat_grad_partition =
  flatten_dense_tensors_aligned(averaged_gradients[i], partition_size)`` (a new flat
  copy of the working-dtype gradients), then ``single_grad_partition =
  flat_grad_partition.to(fp32)`` (a second copy under 16-bit weights, none under FP32)
  while the gradients are still referenced; then the flat copy and the gradients are
  freed (``del flat_grad_partition``, ``free_grad_in_param_list``,
  ``averaged_gradients[i] = None``) and ``_optimizer_step`` runs on the FP32 partition's
  gradient alone. Two moments: :func:`grad_partition_moment` (w + w + 4 bytes per local
  parameter under 16-bit weights, 4 + 4 under FP32) and the step (4 bytes:
  :func:`step_grad_bytes`).
* **its optimizer**: for an ``"optimizer": {"type": "AdamW"}`` section (Qwen's, the HF
  Trainer's ``auto`` configs) ``deepspeed/runtime/engine.py``
  ``_configure_basic_optimizer`` builds ``FusedAdam`` (in place: no temporaries), unless
  ``torch_adam`` or a CPU offload; :attr:`TrainingSetup.resolved_optimizer_impl` is
  ``fused`` for ``--zero 2``/``3`` unless ``--optimizer-impl`` says otherwise.

Not measured: DeepSpeed is not a dependency and its ZeRO kernels need an accelerator;
the figures follow the source above (DeepSpeed at ``edaa72212``, 2026).
"""

from __future__ import annotations

import math

from introspect.refined.precision import working_weight_bytes
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

FP32 = 4

#: The copy of the working-dtype gradients the step flattens, and its FP32 conversion.
FLAT_GRADS = "grads/deepspeed_flat_partition"
FP32_GRADS = "grads/deepspeed_fp32_partition"


def is_deepspeed(setup: TrainingSetup) -> bool:
    """``--zero 2`` or ``--zero 3``: DeepSpeed's stages (on any number of devices)."""
    return setup.resolved_sharding == "zero" and setup.zero_stage >= 2


def applies(setup: TrainingSetup) -> bool:
    """Whether this module's stage-2 terms apply: DeepSpeed ZeRO-2, full training, an
    optimizer that steps on the device (CPU offload swaps the partition to the host:
    :mod:`introspect.refined.offload`)."""
    return (
        is_deepspeed(setup)
        and setup.zero_stage == 2
        and setup.finetune == "full"
        and setup.optimizer != "none"
        and setup.offload == "none"
        and not setup.optimizer_in_backward
    )


def local_parameters(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Elements of this rank's flat partition: ``ceil(N / D)`` (N itself on one rank)."""
    return math.ceil(spec.n_params / setup.devices)


def master_bytes(setup: TrainingSetup) -> int | None:
    """Bytes per local parameter of ZeRO-2's FP32 partition (a clone, whatever the
    weights' dtype); None where this module does not decide it."""
    return FP32 if applies(setup) else None


def step_grad_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Gradient bytes ``_optimizer_step`` runs with: the FP32 partition's gradient."""
    return FP32 * local_parameters(spec, setup)


def grad_partition_moment(
    spec: ModelSpec, setup: TrainingSetup, state: dict[str, int]
) -> dict[str, int] | None:
    """The step's conversion of the gradients into the FP32 partition's, at its
    largest: ``state`` (the persistent terms), the working-dtype gradients, their flat
    copy and, under 16-bit weights, its FP32 conversion alive together (module
    docstring). None where :func:`applies` does not."""
    if not applies(setup):
        return None
    from introspect.terms import GRADS

    n, w = local_parameters(spec, setup), working_weight_bytes(setup)
    terms = dict(state)
    terms[GRADS] = w * n
    terms[FLAT_GRADS] = w * n
    terms[FP32_GRADS] = FP32 * n if w < FP32 else 0
    return terms
